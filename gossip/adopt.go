package gossip

import (
	"math"
	"slices"
	"time"
)

// mergeState applies a peer's push-pull state: its balances and counters.
//
// Where the peer's balance is lower, take it, and with it everything the
// peer had charged for that key (its own counter and the others' it
// lists), so none of it is charged here again. Elsewhere, charge what the
// peer's own counter says that this node has not yet heard. With a
// BoundedLedger, how far below this node's balance a peer's may take it
// is bounded by what the counters it lists could have admitted (see
// adoptBound).
func (s *Syncer) mergeState(b []byte) {
	origin, entries, seen, err := decodeState(b)
	if err != nil {
		s.stats.BadPackets.Add(1)
		s.badLog.warn(s.log, s.clock(), "dropped a malformed push-pull state", "bytes", len(b), "error", err)
		return
	}
	if origin == s.self || s.ownerMode() { // owner mode repairs by its own counters (owner.go)
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
	var listed map[[2]string][]seenEntry
	if bounded != nil {
		listed = make(map[[2]string][]seenEntry, len(allow))
		for _, e := range seen {
			if k := [2]string{e.c.Rule, e.c.Key}; e.origin != origin {
				if _, ok := allow[k]; ok {
					listed[k] = append(listed[k], e)
				}
			}
		}
	}
	adopted := make(map[[2]string]explanation)
	for _, e := range entries {
		k := [2]string{e.c.Rule, e.c.Key}
		balance, ex := e.balance, explanation{whole: true} // a ledger that does not bound takes it whole
		if a, ok := allow[k]; ok {
			if balance, ex = s.adoptBound(bounded, a, origin, e, listed[k], now); len(ex.paid) == 0 {
				// Nothing explained: the ledger takes nothing. (Handed back
				// its own balance, read a moment ago, it would "lower" it by
				// the refill since and report a change.)
				continue
			}
		}
		// Counters whose consumption was paid for are accounted for here even
		// when the ledger took nothing (its balance was already as low); for
		// a window, only when it took the balance (it refuses one of a window
		// it has left, whose consumption may still count).
		if s.ledger.Adopt(e.c.Rule, e.c.Key, e.c.Window, balance) || (len(ex.paid) > 0 && e.c.Window == 0) {
			adopted[k] = ex
		}
	}
	var charges []charge
	s.mu.Lock()
	for _, e := range entries {
		ex, ok := adopted[[2]string{e.c.Rule, e.c.Key}]
		if ok && ex.whole {
			s.baselineLocked(origin, e.c)
			continue
		}
		// Taken short of the peer's balance: what the counters paid is
		// heard, and the rest of the peer's own counter is charged as if
		// the key had not been adopted (the others' when their packets come).
		for _, p := range ex.paid {
			s.accountLocked(p.origin, p.c, p.tokens)
		}
		h, _, sr := s.hearLocked(origin, e.c)
		tokens := h.tokens()
		if a, ok := allow[[2]string{e.c.Rule, e.c.Key}]; ok && tokens > 0 {
			tokens = s.boundLocked(sr, a, origin, e.c, h, now)
		}
		if tokens > 0 {
			charges = append(charges, charge{e.c.Rule, e.c.Key, e.c.Window, tokens})
		}
	}
	for _, e := range seen {
		if ex, ok := adopted[[2]string{e.c.Rule, e.c.Key}]; ok && ex.whole && e.origin != s.self {
			s.baselineLocked(e.origin, e.c)
		}
	}
	s.mu.Unlock()
	s.charge(charges)
}

// explanation is what the counters of a state's entry paid for
// (adoptBound): each counter's part that this node had not heard and its
// origin's allowance paid, and whether together they explain the whole
// gap down to the peer's balance, which is then taken as it is (with
// every counter the peer lists: all are in it). Short of that, only the
// parts paid are in the balance taken, and only they are heard here.
type explanation struct {
	paid  []paidCounter
	whole bool
}

// paidCounter is tokens of origin's counter c paid for by a state.
type paidCounter struct {
	origin string
	c      Counter
	tokens uint64
}

// adoptBound returns the balance this node may take from origin's state
// entry e, and what the counters paid for (for a bucket, what they paid is
// accounted for here whether or not the ledger took the balance).
//
// A peer's balance below this node's is consumption the peer has charged
// and this node has not: the part of each counter it lists (its own, e,
// and the others', listed) above what this node has heard of it. So the
// balance may fall by no more than those parts, each paid from its
// origin's allowance for the key, as if it had arrived in a packet (see
// allowance.take): an honest lower balance, however deep after a
// partition, is taken whole, and a rogue's claim costs no more than its
// counters could have, from the same allowance its packets draw on.
// Counters of names that are not members are not counted, and neither is
// this node's own.
//
// What the counters do not explain is not taken: this node's balance is
// then the better one (a peer that learned of consumption late lost the
// refill meanwhile). Beyond one burst (and, from a peer back from a
// partition, the rate for as long as it was away) it is counted as
// suspicious.
//
// The peer's balance lacks the consumption this node has charged and the
// peer has not heard (after a partition heals, each side's balance lacks
// the other side's): this node's own and other members' counters above
// what the peer lists of them. That is taken off it first. Taking a peer's
// balance as it was dropped that consumption from this node's balance,
// and a later honest state was then "deeper than its counters explain".
// What this takes off can lower the balance taken only as far as the
// listed counters explain.
func (s *Syncer) adoptBound(bounded BoundedLedger, a Allowance, origin string, e stateEntry, listed []seenEntry, now time.Duration) (float64, explanation) {
	here, own := bounded.Balance(e.c.Rule, e.c.Key)
	if math.IsInf(here, 0) || math.IsNaN(here) { // no such rule
		return e.balance, explanation{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	theirs := e.balance - float64(s.unheardLocked(origin, own, e.c, listed))
	gap := here - theirs
	if !(gap > 0) { // not lower (or NaN): the ledger takes nothing
		return e.balance, explanation{}
	}
	var ex explanation
	explained := 0.0
	explain := func(name string, c Counter) {
		if paid := s.explainLocked(a, name, c, gap-explained, now); paid > 0 {
			explained += float64(paid)
			ex.paid = append(ex.paid, paidCounter{name, c, paid})
		}
	}
	explain(origin, e.c)
	for _, l := range listed {
		if explained >= gap {
			break
		}
		if l.origin != s.self && s.memberLocked(l.origin) {
			explain(l.origin, l.c)
		}
	}
	ex.whole = explained >= gap
	// Suspicion is of what the peer claims, not of what it has not heard
	// of this node's own (a pruned counter, a member that joined late).
	// A peer back from a partition honestly lies lower by up to what its
	// side admitted beyond this one's: a burst and the rate for as long as
	// it was away (each node's bucket sat full, losing the refill, until
	// it heard the other side's consumption).
	if unexplained := here - e.balance - explained; unexplained > a.Burst+a.PerSecond*s.awayLocked(origin, now).Seconds() {
		s.suspectLocked(origin, e.c, "push-pull balance below what its counters explain",
			uint64(min(unexplained, math.MaxUint64/2)), uint64(explained))
	}
	return max(theirs, here-explained), ex
}

// unheardLocked is the consumption of c's key this node has charged or
// admitted and peer has not heard: this node's own counter (own) and each
// other member's counter held here, above what the counters the peer lists
// hold of them in the same generation. Caller holds s.mu.
func (s *Syncer) unheardLocked(peer string, own Counter, c Counter, listed []seenEntry) uint64 {
	above := func(name string, g genRange) uint64 {
		heard := uint64(0)
		for _, l := range listed {
			if l.origin == name && l.c.Epoch == g.epoch && l.c.Window == g.window {
				heard = max(heard, l.c.Used)
			}
		}
		return g.hi - min(heard, g.hi)
	}
	total := above(s.self, genRange{epoch: own.Epoch, window: own.Window, hi: own.Used})
	count := func(name string) {
		if name == peer || name == s.self {
			return
		}
		if sr := s.seen[counterKey{name, c.Rule, c.Key}]; sr != nil {
			total = satAdd(total, above(name, sr.cur))
		}
	}
	for name := range s.peers {
		count(name)
	}
	for name := range s.failed {
		count(name)
	}
	return total
}

// explainLocked pays up to want tokens of origin's counter c that this node
// has not heard from the origin's allowance for c's key, and returns what
// it paid. A counter of a generation this node does not hold is unheard
// from its start; one older than the generation held tells nothing new.
// In the generation held, both ends are unheard: what lies above the range
// charged here, and what lies below it (this node first heard of the
// counter midway, its first packets lost or sent before the origin knew
// this node as a member); once the balance is taken, accountLocked marks
// what was paid accounted for (baselineLocked the whole counter when the
// peer's balance was taken whole). Caller holds s.mu.
func (s *Syncer) explainLocked(a Allowance, origin string, c Counter, want float64, now time.Duration) uint64 {
	k := counterKey{origin, c.Rule, c.Key}
	sr := s.seen[k]
	var heard, below uint64
	if sr != nil {
		if g := sr.gen(c); g != nil {
			heard = g.hi
			if g == &sr.cur { // baselineLocked accounts for the part below in cur only
				below = min(g.lo, c.Used)
			}
		} else if compareGen(c.Epoch, c.Window, sr.cur.epoch, sr.cur.window) < 0 {
			return 0
		}
	}
	unheard := c.Used - min(c.Used, heard) + below
	if unheard == 0 || want < 1 {
		return 0
	}
	if sr == nil {
		// Heard first in a state: everything up to Used is in the balance
		// taken (baselineLocked records it).
		sr = s.rememberLocked(k, seenRange{cur: genRange{epoch: c.Epoch, window: c.Window, lo: c.Used, hi: c.Used}})
	}
	give, _ := s.takeLocked(sr, a, origin, c, min(unheard, uint64(min(math.Ceil(want), math.MaxUint64/2))), now)
	return give
}

// accountLocked records that tokens of origin's counter c that this node
// had not heard are in a balance it took (explainLocked paid them): the
// part above the range heard first, then the part below it, as
// explainLocked counted them. The rest stays unheard, to be charged when a
// packet brings it. Caller holds s.mu.
func (s *Syncer) accountLocked(origin string, c Counter, tokens uint64) {
	k := counterKey{origin, c.Rule, c.Key}
	sr := s.seen[k]
	if sr == nil { // evicted since explainLocked remembered it: nothing heard
		sr = s.rememberLocked(k, seenRange{cur: genRange{epoch: c.Epoch, window: c.Window, lo: c.Used, hi: c.Used}})
	}
	sr.touched = true
	g := sr.gen(c)
	if g == nil {
		if compareGen(c.Epoch, c.Window, sr.cur.epoch, sr.cur.window) < 0 {
			return // older than the generation held: explainLocked paid nothing of it
		}
		sr.place(genRange{epoch: c.Epoch, window: c.Window, lo: c.Used, hi: c.Used}) // heard from its start: all below
		g = &sr.cur
	}
	above := min(tokens, c.Used-min(c.Used, g.hi))
	g.hi += above
	if rest := tokens - above; rest > 0 && g == &sr.cur {
		g.lo -= min(rest, g.lo)
	}
}

// memberLocked reports whether name is a member this node knows, alive or
// gone. Caller holds s.mu.
func (s *Syncer) memberLocked(name string) bool {
	if _, ok := s.peers[name]; ok {
		return true
	}
	_, ok := s.failed[name]
	return ok
}
