package sim

import (
	"math"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/gossip"
)

// Rules of a simulated node: one namespace each in its store.
const (
	ruleHot   = "hot"   // Hot's key, and Spread's keys: Rate, Burst
	ruleProbe = "probe" // convergence probes: a limit nothing reaches
)

// limits are a run's limits, by rule.
type limits struct{ hot, probe bucket.Limit }

func (l *limits) of(rule string) (bucket.Limit, bucket.Namespace, bool) {
	switch rule {
	case ruleHot:
		return l.hot, 0, true
	case ruleProbe:
		return l.probe, 1, true
	}
	return bucket.Limit{}, 0, false
}

// node is one simulated daemon.
type node struct {
	i      int
	gen    uint32 // generation of this slot: a replacement is the next
	name   string
	alive  bool
	store  *bucket.Store
	syncer *gossip.Syncer
	dg     memberlist.Delegate
	ev     memberlist.EventDelegate
	self   memberlist.Node

	// Measurements.
	requests            uint64 // requests of the load made here
	admitted            uint64 // of which admitted
	windowAdmitted      uint64 // since the last fairness sample
	pktSent, pktRecv    uint64 // best-effort packets
	bytesSent, bytesRcv uint64
	stateBytes          uint64 // push-pull states sent and received
	busy                time.Duration
	trace               *trace // its inputs, recorded for a replay in isolation (isolate.go); nil: none
}

// ledger is a simulated daemon's gossip.BoundedLedger over its store, as
// the daemon's (daemon/cluster.go) with its rules fixed: no soft margin,
// bucket algorithms.
type ledger struct {
	s *Sim
	n *node
}

var _ gossip.BoundedLedger = ledger{}

func (l ledger) Drain(fn func(gossip.Counter)) {
	l.n.store.DrainDirty(func(c bucket.Consumption) {
		fn(gossip.Counter{Rule: nsName(c.NS), Key: c.Key, Epoch: c.Epoch, Window: c.Window, Used: c.Used, Prev: c.Prev})
	})
}

func nsName(ns bucket.Namespace) string {
	if ns == 1 {
		return ruleProbe
	}
	return ruleHot
}

func (l ledger) Charge(rule, key string, window, tokens uint64) {
	lim, ns, ok := l.s.lim.of(rule)
	if !ok {
		return
	}
	l.n.store.ChargeWindow(ns, []byte(key), lim, int64(min(tokens, bucket.MaxCost)), window, l.s.clock())
	if l.s.isolating {
		return // a replay (isolate.go) measures nothing of the run
	}
	if rule == ruleHot {
		l.s.hotCharged(l.n, tokens) // hotkey.go
	}
	if rule == ruleProbe {
		l.s.probeSeen(l.n, key, tokens, false)
	}
}

func (l ledger) Snapshot(fn func(gossip.Counter, float64) bool) {
	l.n.store.Snapshot(l.s.clock(), func(ns bucket.Namespace, _ string) (bucket.Limit, bool) {
		lim, _, ok := l.s.lim.of(nsName(ns))
		return lim, ok
	}, func(c bucket.Consumption, _ bucket.Limit, balance float64) bool {
		return fn(gossip.Counter{Rule: nsName(c.NS), Key: c.Key, Epoch: c.Epoch, Window: c.Window, Used: c.Used, Prev: c.Prev}, balance)
	})
}

func (l ledger) Adopt(rule, key string, window uint64, balance float64) bool {
	lim, ns, ok := l.s.lim.of(rule)
	if !ok {
		return false
	}
	took := l.n.store.Adopt(ns, []byte(key), lim, window, balance, l.s.clock())
	if took && rule == ruleProbe && !l.s.isolating {
		l.s.probeSeen(l.n, key, 0, true)
	}
	return took
}

func (l ledger) Allowance(rule, key string) (gossip.Allowance, bool) {
	lim, _, ok := l.s.lim.of(rule)
	if !ok || key == "" || len(key) > l.n.store.MaxKeyLen() {
		return gossip.Allowance{}, false
	}
	return gossip.Allowance{Burst: float64(lim.Burst()), PerSecond: lim.PerSecond()}, true
}

var _ gossip.OwnerViewLedger = ledger{}

// OwnerView applies owner mode's views with FirstShare only, as sluiced
// does (daemon.Config.NoFirstShare turns them off).
func (l ledger) OwnerView(rule, key string, _ uint64, v gossip.OwnerView) {
	if lim, ns, ok := l.s.lim.of(rule); ok && l.s.cfg.FirstShare {
		l.n.store.SetOwnerView(ns, []byte(key), lim, bucket.OwnerView{Users: v.Users, Balance: v.Balance, Epoch: v.AckEpoch, Counted: v.AckUsed, Interval: v.Interval}, l.s.clock())
	}
}

func (l ledger) Balance(rule, key string) (float64, gossip.Counter) {
	lim, ns, ok := l.s.lim.of(rule)
	if !ok {
		return math.Inf(1), gossip.Counter{}
	}
	k := []byte(key)
	b, _ := l.n.store.Balance(ns, k, lim, l.s.clock())
	var own gossip.Counter
	if c, ok := l.n.store.Local(ns, k); ok {
		own = gossip.Counter{Rule: rule, Key: key, Epoch: c.Epoch, Window: c.Window, Used: c.Used, Prev: c.Prev}
	}
	return b, own
}
