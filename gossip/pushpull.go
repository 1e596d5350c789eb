package gossip

import (
	"math"
	"slices"
	"time"
)

// Push-pull: memberlist's periodic full-state exchange over TCP. This
// node's state is its balances and what it has charged of others'
// counters (localState); a peer's is merged in mergeState.

// stateBudget bounds a push-pull state (memberlist allows 20 MiB).
const stateBudget = 8 << 20

// localState is this node's push-pull state: the ledger's balances (half
// of stateBudget at most) and, for those keys, the counters heard from
// others (the other half).
func (s *Syncer) localState() []byte {
	var entries []stateEntry
	size := 0
	s.ledger.Snapshot(func(c Counter, balance float64) bool {
		size += entryOverhead + len(c.Rule) + len(c.Key) + 9
		if size > stateBudget/2 {
			return false
		}
		entries = append(entries, stateEntry{c: c, balance: balance})
		return true
	})
	// What this node has charged of others' counters for those keys: a
	// receiver adopting a balance must not charge them again.
	listed := make(map[[2]string]bool, len(entries))
	for _, e := range entries {
		listed[[2]string{e.c.Rule, e.c.Key}] = true
	}
	var seen []seenEntry
	size = 0
	s.mu.Lock()
	for k, sr := range s.seen {
		if !listed[[2]string{k.rule, k.key}] {
			continue
		}
		if size += entryOverhead + len(k.origin) + len(k.rule) + len(k.key); size > stateBudget/2 {
			break
		}
		seen = append(seen, seenEntry{origin: k.origin, c: Counter{Rule: k.rule, Key: k.key, Epoch: sr.cur.epoch, Window: sr.cur.window, Used: sr.cur.hi}})
	}
	s.mu.Unlock()
	return encodeState(s.self, entries, seen)
}

// mergeState takes a peer's push-pull state: its balances and counters.
func (s *Syncer) mergeState(b []byte) {
	origin, entries, seen, err := decodeState(b)
	if err != nil {
		s.stats.BadPackets.Add(1)
		s.badLog.warn(s.log, s.clock(), "dropped a malformed push-pull state", "bytes", len(b), "error", err)
		return
	}
	if origin == s.self {
		return
	}
	s.stats.StatesMerged.Add(1)
	bounded, _ := s.ledger.(BoundedLedger)
	now := s.sinceBorn()
	nowNanos := uint64(max(0, s.clock().UnixNano()))
	// Entries of keys reset here since the peer counted them are neither
	// adopted nor charged: the reset forgave them. Entries this node would
	// not take from a packet (unknown rules, too-long keys, implausible
	// epochs) are dropped too.
	allow := make(map[[2]string]Allowance)
	s.mu.Lock()
	entries = slices.DeleteFunc(entries, func(e stateEntry) bool {
		if s.staleLocked(e.c) {
			return true
		}
		a, ok := s.admitLocked(bounded, origin, e.c, nowNanos)
		if ok && bounded != nil {
			allow[[2]string{e.c.Rule, e.c.Key}] = a
		}
		return !ok
	})
	seen = slices.DeleteFunc(seen, func(e seenEntry) bool { return s.staleLocked(e.c) })
	s.mu.Unlock()
	// Where the peer's balance is lower, take it, and with it everything the
	// peer had charged for that key (its own counter and the others' it
	// lists), so none of it is charged here again. Elsewhere, charge what the
	// peer's own counter says that this node has not yet heard. With a
	// BoundedLedger, a balance deeper in debt than one burst is suspicious
	// and taken as 0 (see adoptBound).
	adopted := make(map[[2]string]bool)
	for _, e := range entries {
		k := [2]string{e.c.Rule, e.c.Key}
		balance := e.balance
		if a, ok := allow[k]; ok {
			balance = s.adoptBound(a, origin, e, now)
		}
		if s.ledger.Adopt(e.c.Rule, e.c.Key, e.c.Window, balance) {
			adopted[k] = true
		}
	}
	var charges []charge
	s.mu.Lock()
	for _, e := range entries {
		if adopted[[2]string{e.c.Rule, e.c.Key}] {
			s.baselineLocked(origin, e.c)
			continue
		}
		tokens, _, sr := s.applyLocked(origin, e.c)
		if a, ok := allow[[2]string{e.c.Rule, e.c.Key}]; ok && tokens > 0 {
			tokens = s.boundLocked(sr, a, origin, e.c, tokens, now)
		}
		if tokens > 0 {
			charges = append(charges, charge{e.c.Rule, e.c.Key, e.c.Window, tokens})
		}
	}
	for _, e := range seen {
		if e.origin != s.self && adopted[[2]string{e.c.Rule, e.c.Key}] {
			s.baselineLocked(e.origin, e.c)
		}
	}
	s.mu.Unlock()
	s.charge(charges)
}

// adoptBound returns the balance this node may take from origin's state
// entry e. A balance more than one allowance burst in debt is more than
// one origin could cause at once: it is counted as suspicious, taken as 0
// (the key is spent, not in debt), and the origin's allowance for the key
// is emptied, so that its counters cannot add another burst on top of it
// (they are allowed only the rate from then on).
//
// An honest balance is taken as it is, and adoption does not spend the
// origin's allowance: an honest peer's lower balance holds other origins'
// consumption too (it charged them first), and spending the peer's
// allowance on it clamped the peer's own later counters in honest clusters
// (testcluster). The price: a legitimate debt deeper than one burst (after
// a partition heals) is learned as 0 from a push-pull, and the cluster
// admits that much more.
//
// A bucket balance in debt within one burst is taken, and caps the
// origin's allowance for the key at its soft margin plus the rate (see
// allowance.inDebt): an origin in debt can admit no more than that.
func (s *Syncer) adoptBound(a Allowance, origin string, e stateEntry, now time.Duration) float64 {
	if e.balance >= 0 {
		return e.balance
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := counterKey{origin, e.c.Rule, e.c.Key}
	sr := s.seen[k]
	if sr == nil {
		// A state's counter heard first charges nothing (Prev is Used).
		sr = s.rememberLocked(k, seenRange{cur: genRange{epoch: e.c.Epoch, window: e.c.Window, lo: e.c.Used, hi: e.c.Used}})
	}
	if e.balance >= -a.Burst {
		if e.c.Window == 0 { // a window's debt ends with the window
			sr.allow.inDebt(a, now)
		}
		return e.balance
	}
	s.suspectLocked(origin, e.c, "push-pull balance more than one burst in debt", uint64(min(-e.balance, math.MaxUint64/2)), uint64(a.Burst))
	sr.allow = allowance{credit: 0, heard: now, filled: now}
	return 0
}
