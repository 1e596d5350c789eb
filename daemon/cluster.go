package daemon

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/gossip"
	"github.com/sluicelabs/sluice/internal/buildinfo"
)

// version is reported to peers in node metadata and in the members view:
// the build's (internal/buildinfo is its one source).
var version = buildinfo.Get().Version

// ledger is the daemon's side of gossip: it maps rule names to namespaces and
// limits, and reads the clock for every charge.
type ledger struct{ d *Daemon }

var _ gossip.Ledger = ledger{}

func (l ledger) Drain(fn func(gossip.Counter)) {
	names := l.d.nsNames.Load()
	l.d.store.DrainDirty(func(c bucket.Consumption) {
		if int(c.NS) < len(*names) {
			fn(gossip.Counter{Rule: (*names)[c.NS], Key: c.Key, Epoch: c.Epoch, Window: c.Window, Used: c.Used, Prev: c.Prev})
		}
	})
}

// Charge applies a peer's consumption of one limit of a rule in a window
// (0 for the buckets); rule is the limit's name (see limitName).
func (l ledger) Charge(rule, key string, window, tokens uint64) {
	defer leave(l.d.fence.enter())
	ar, i, ok := l.d.rules.Load().resolve(rule)
	if !ok {
		return
	}
	k := []byte(key)
	cost := int64(min(tokens, bucket.MaxCost))
	after, err := l.d.store.ChargeWindow(ar.ns[i], k, ar.LimitsFor(k)[i], cost, window, l.d.now())
	if err == nil && after < 0 {
		// The part of a peer's consumption that lands below zero was admitted
		// somewhere in the cluster without tokens to cover it: overshoot.
		ar.counted.overshoot.Add(min(float64(cost), -after))
	}
}

var _ gossip.BoundedLedger = ledger{}

// Allowance is what one origin could admit of key under the limit named
// rule (see gossip.Allowance): the limit's burst and soft margin at once
// (for windows, two windows' counts: the end of one and the start of the
// next), then its rate. Rules this daemon does not have and keys longer
// than its clients may send have none.
func (l ledger) Allowance(rule, key string) (gossip.Allowance, bool) {
	if key == "" || len(key) > l.d.store.MaxKeyLen() {
		return gossip.Allowance{}, false
	}
	ar, i, ok := l.d.rules.Load().resolve(rule)
	if !ok {
		return gossip.Allowance{}, false
	}
	lim := ar.LimitsFor([]byte(key))[i]
	soft := softMargin(ar, lim)
	burst := float64(lim.Burst() + soft)
	if lim.Algorithm().Windowed() {
		burst *= 2
	}
	return gossip.Allowance{Burst: burst, PerSecond: lim.PerSecond(), Soft: float64(soft)}, true
}

// Balance is key's balance here under the limit named rule, and this
// daemon's own counter for it (see gossip.BoundedLedger); its burst for a
// key without a bucket, +Inf for a rule this daemon does not have (nothing
// is adopted for it).
func (l ledger) Balance(rule, key string) (float64, gossip.Counter) {
	defer leave(l.d.fence.enter())
	ar, i, ok := l.d.rules.Load().resolve(rule)
	if !ok {
		return math.Inf(1), gossip.Counter{}
	}
	k := []byte(key)
	b, _ := l.d.store.Balance(ar.ns[i], k, ar.LimitsFor(k)[i], l.d.now())
	var own gossip.Counter
	if c, ok := l.d.store.Local(ar.ns[i], k); ok {
		own = gossip.Counter{Rule: rule, Key: key, Epoch: c.Epoch, Window: c.Window, Used: c.Used, Prev: c.Prev}
	}
	return b, own
}

func (l ledger) Snapshot(fn func(gossip.Counter, float64) bool) {
	l.d.eachHeld(func(rule string, _ bucket.Limit, c bucket.Consumption, balance float64) bool {
		return fn(gossip.Counter{Rule: rule, Key: c.Key, Epoch: c.Epoch, Window: c.Window, Used: c.Used, Prev: c.Prev}, balance)
	})
}

// eachHeld calls fn for every bucket that is not full, of a rule in force,
// with the name of the rule's limit (see limitName) and the key's limit,
// until fn returns false. fn runs under a shard lock (see
// bucket.Store.Snapshot) and must be quick.
func (d *Daemon) eachHeld(fn func(rule string, lim bucket.Limit, c bucket.Consumption, balance float64) bool) {
	rs := d.rules.Load()
	names := d.nsNames.Load()
	d.store.Snapshot(d.now(), func(ns bucket.Namespace, key string) (bucket.Limit, bool) {
		if int(ns) >= len(*names) {
			return bucket.Limit{}, false
		}
		ar, i, ok := rs.resolve((*names)[ns])
		if !ok || ar.ns[i] != ns {
			return bucket.Limit{}, false
		}
		return ar.LimitsFor([]byte(key))[i], true
	}, func(c bucket.Consumption, lim bucket.Limit, balance float64) bool {
		return fn((*names)[c.NS], lim, c, balance)
	})
}

func (l ledger) Adopt(rule, key string, window uint64, balance float64) bool {
	defer leave(l.d.fence.enter())
	ar, i, ok := l.d.rules.Load().resolve(rule)
	if !ok {
		return false
	}
	k := []byte(key)
	return l.d.store.Adopt(ar.ns[i], k, ar.LimitsFor(k)[i], window, balance, l.d.now())
}

// newSyncer builds the gossip syncer from the daemon's cluster settings.
func (d *Daemon) newSyncer(extra func(*gossip.Config), census *gossip.CensusSink) (*gossip.Syncer, error) {
	c := d.settings.Cluster
	cfg := gossip.Config{
		NodeName:         d.settings.NodeName,
		Join:             c.Join,
		GossipInterval:   c.GossipInterval,
		GossipNodes:      c.GossipNodes,
		FanoutLimit:      c.FanoutLimit,
		GossipMode:       c.GossipMode,
		AggregateAbove:   c.AggregateAbove,
		PushPullInterval: c.PushPullInterval,
		RejoinInterval:   c.RejoinInterval,
		SecretKey:        c.Key,
		Label:            c.Label,
		Meta:             gossip.Meta{Version: version, RulesHash: d.Rules().Hash},
		Logger:           d.log.Named("gossip"),
		Census:           census,
	}
	bind := c.Bind
	if bind == "" {
		bind = "0.0.0.0:" + strconv.Itoa(gossip.DefaultBindPort)
	}
	var err error
	if cfg.BindAddr, cfg.BindPort, err = splitHostPort(bind, gossip.DefaultBindPort); err != nil {
		return nil, fmt.Errorf("cluster bind %q: %w", bind, err)
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = "0.0.0.0" // ":7946" is every interface, as settings judged it (see config.ClusterSettings.Exposed)
	}
	if c.Advertise != "" {
		if cfg.AdvertiseAddr, cfg.AdvertisePort, err = splitHostPort(c.Advertise, 0); err != nil {
			return nil, fmt.Errorf("cluster advertise %q: %w", c.Advertise, err)
		}
	}
	if c.KeyringFile != "" {
		if cfg.Keyring, err = loadKeyring(c.KeyringFile); err != nil {
			return nil, err
		}
	}
	if extra != nil {
		extra(&cfg)
	}
	return gossip.New(cfg, ledger{d})
}

func splitHostPort(s string, defaultPort int) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return s, defaultPort, nil // a bare address
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("bad port %q", port)
	}
	return host, p, nil
}

// loadKeyring reads a JSON list of base64 keys; the first is used to encrypt.
func loadKeyring(path string) (*memberlist.Keyring, error) {
	keys, err := readKeys(path)
	if err != nil {
		return nil, err
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("load keyring %s: %w", path, err)
	}
	return kr, nil
}

// readKeys reads a keyring file: a JSON list of base64 keys, the first primary.
// Errors name the file and the key's position, never a key.
func readKeys(path string) ([][]byte, error) {
	data, err := readSecretFile(path)
	if err != nil {
		return nil, fmt.Errorf("load keyring: %w", err)
	}
	var encoded []string
	if err := json.Unmarshal(data, &encoded); err != nil || len(encoded) == 0 {
		return nil, fmt.Errorf("load keyring %s: want a JSON list of base64 keys, the first primary", path)
	}
	keys := make([][]byte, len(encoded))
	for i, e := range encoded {
		if keys[i], err = DecodeKey(e); err != nil {
			return nil, fmt.Errorf("load keyring %s: key %d: %w", path, i, err)
		}
	}
	return keys, nil
}

// reloadKeyring re-reads the keyring file into the running gossip, so keys
// rotate without a restart (see gossip.Syncer.SetKeys). A bad file changes
// nothing. Logs name the file and how many keys, never a key.
func (d *Daemon) reloadKeyring() error {
	path := d.settings.Cluster.KeyringFile
	if path == "" || d.syncer == nil {
		return nil
	}
	keys, err := readKeys(path)
	if err == nil {
		err = d.syncer.SetKeys(keys)
	}
	if err != nil {
		d.log.Error("keyring reload failed; keeping the keys in use", "path", path, "error", err)
		return fmt.Errorf("reload keyring: %w", err)
	}
	d.log.Info("gossip keyring reloaded", "path", path, "keys", len(keys))
	return nil
}

// DecodeKey decodes a base64 gossip key of 16, 24 or 32 bytes.
func DecodeKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("gossip key is not base64: %w", err)
	}
	switch len(k) {
	case 16, 24, 32:
		return k, nil
	}
	return nil, fmt.Errorf("gossip key of %d bytes; want 16, 24 or 32", len(k))
}

// leaveTimeout bounds how long a leaving daemon waits for its departure to spread.
const leaveTimeout = 2 * time.Second
