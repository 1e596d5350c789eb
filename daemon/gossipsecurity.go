package daemon

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// insecureWarnEvery is how often a daemon gossiping in the clear says so
// again, so the warning is in every window of logs anyone reads.
const insecureWarnEvery = 10 * time.Minute

// gossipInsecure reports whether this daemon gossips without encryption.
func (d *Daemon) gossipInsecure() bool { return d.syncer != nil && !d.settings.Cluster.Encrypted() }

// warnInsecure logs, at WARN, that gossip at addr is in the clear and what follows.
func (d *Daemon) warnInsecure(addr string) {
	c := d.settings.Cluster
	if c.Insecure || c.Exposed() {
		d.log.Warn("gossip is NOT encrypted (--insecure-gossip): any host that can reach the gossip port can join the cluster, read consumption and forge it; give every node the same key with --gossip-key-file FILE or SLUICE_GOSSIP_KEY",
			"addr", addr, "join", c.Join)
		return
	}
	d.log.Warn("gossip is not encrypted; it is bound to loopback, so only users of this host can reach it; give a key with --gossip-key-file FILE or SLUICE_GOSSIP_KEY",
		"addr", addr)
}

// startInsecureWarnings warns now and then every insecureWarnEvery, when
// gossip runs in the clear, until ctx ends or the returned stop is called
// (stop waits for the warnings to end).
func (d *Daemon) startInsecureWarnings(ctx context.Context) (stop func()) {
	if !d.gossipInsecure() {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	addr := d.syncer.Addr() // read here, once: memberlist rewrites its local node in place
	go func() {
		defer close(done)
		repeatUntil(ctx, insecureWarnEvery, func() { d.warnInsecure(addr) })
	}()
	return func() { cancel(); <-done }
}

// repeatUntil calls fn now and then every interval until ctx ends.
func repeatUntil(ctx context.Context, every time.Duration, fn func()) {
	fn()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// gossipSecurityView adds the cluster's gossip security to /readyz.
func (d *Daemon) gossipSecurityView(body map[string]any) {
	if d.syncer == nil {
		return
	}
	body["gossip_encrypted"] = d.settings.Cluster.Encrypted()
	body["gossip_insecure"] = d.gossipInsecure()
}

// registerGossipSecurity adds sluice_gossip_encrypted and
// sluice_gossip_insecure (1 or 0) once the syncer exists.
func (m *metrics) registerGossipSecurity(d *Daemon) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	enc, insecure := b(d.settings.Cluster.Encrypted()), b(d.gossipInsecure())
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_gossip_encrypted",
			Help: "1 when cluster gossip is encrypted with a key, 0 when it runs in the clear."}, func() float64 { return enc }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_gossip_insecure",
			Help: "1 when cluster gossip runs without a key (--insecure-gossip, or bound to loopback without one): anyone who reaches the gossip port can join, read and forge consumption."},
			func() float64 { return insecure }),
	)
}
