package gossip

import (
	"math"
	"slices"
	"time"
)

type charge struct {
	rule, key      string
	window, tokens uint64
}

// receive applies a message from a peer: counters, or resets. A kind this
// version does not know (a newer peer's) is ignored. A counters packet is
// refused whole when its stamp says it is a replay (see stamp.go); each of
// its counters is then admitted (admitLocked), deduplicated by the seen
// table (applyLocked), and charged no more than its origin's allowance
// (boundLocked).
func (s *Syncer) receive(b []byte) {
	s.stats.PacketsReceived.Add(1)
	s.stats.BytesReceived.Add(uint64(len(b)))
	switch kind, ok := packetKind(b); {
	case ok && kind == msgReset:
		s.receiveResets(b)
		return
	case ok && kind > msgReset:
		s.stats.IgnoredPackets.Add(1)
		s.log.Debug("ignored a gossip message of an unknown kind", "kind", kind, "bytes", len(b))
		return
	}
	var charges []charge
	n := int(max(1, s.members.Load()))
	relay := n > s.cfg.FanoutLimit
	transmits := retransmits(n)
	bounded, _ := s.ledger.(BoundedLedger)
	now := s.sinceBorn()
	nowNanos := uint64(max(0, s.clock().UnixNano()))
	s.mu.Lock()
	_, err := decodeCountersChecked(b, s.checkStampLocked, func(origin string, c Counter) {
		if origin == s.self || s.staleLocked(c) {
			return
		}
		a, ok := s.admitLocked(bounded, origin, c, nowNanos)
		if !ok {
			return
		}
		tokens, news, sr := s.applyLocked(origin, c)
		clamped := false
		if bounded != nil && tokens > 0 {
			give := s.boundLocked(sr, a, origin, c, tokens, now)
			clamped, tokens = give < tokens, give
		}
		if tokens > 0 {
			charges = append(charges, charge{c.Rule, c.Key, c.Window, tokens})
		}
		if news && relay && !clamped { // a suspicious counter is not spread further

			s.relayLocked(origin, c, transmits)
		}
	})
	s.mu.Unlock()
	if err != nil {
		s.stats.BadPackets.Add(1)
		s.badLog.warn(s.log, s.clock(), "dropped a gossip packet", "bytes", len(b), "error", err)
		return
	}
	s.charge(charges)
}

// admitLocked decides whether a counter is applied at all, and returns the
// origin's allowance for its key. With a BoundedLedger, a counter of a rule
// this node does not have, or of a key longer than its clients may send, is
// neither charged nor remembered; and one whose epoch is implausibly far
// ahead of this node's clock (see maxEpochAhead) is refused as suspicious.
// Caller holds s.mu.
func (s *Syncer) admitLocked(bounded BoundedLedger, origin string, c Counter, nowNanos uint64) (Allowance, bool) {
	if c.Epoch > satAdd(nowNanos, maxEpochAhead) {
		s.suspectLocked(origin, c, "epoch ahead of this node's clock", c.Epoch, nowNanos)
		return Allowance{}, false
	}
	if bounded == nil {
		return Allowance{}, true
	}
	a, ok := bounded.Allowance(c.Rule, c.Key)
	if !ok {
		s.stats.UnknownCounters.Add(1)
		return Allowance{}, false
	}
	return a, true
}

// boundLocked clamps tokens, newly heard from origin for c's key, to what
// the origin could have admitted since it was last heard (see allowance),
// counting the report as suspicious when it claims more. Caller holds s.mu.
func (s *Syncer) boundLocked(sr *seenRange, a Allowance, origin string, c Counter, tokens uint64, now time.Duration) uint64 {
	// A member back from being away (dead to this node, or cut off) may
	// report what it admitted meanwhile; its counters can arrive before
	// this node has seen it rejoin, while it is still listed as failed.
	var away time.Duration
	if r, ok := s.rejoined[origin]; ok && now-r.at < rejoinGrace {
		away = r.away
	} else if f, ok := s.failed[origin]; ok {
		away = time.Since(f.since)
	}
	give := sr.allow.take(a, tokens, now, away)
	if give < tokens {
		s.suspectLocked(origin, c, "more than the origin could have admitted", tokens, give)
	}
	return give
}

func (s *Syncer) charge(charges []charge) {
	for _, c := range charges {
		s.ledger.Charge(c.rule, c.key, c.window, c.tokens)
		for {
			old := s.stats.TokensCharged.Load()
			if s.stats.TokensCharged.CompareAndSwap(old, satAdd(old, c.tokens)) {
				break
			}
		}
	}
}

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
