package gossip

import (
	"math"
	"time"
)

// A new owner learns a key's debt from its contributors.
//
// Owner mode merges no push-pull state, so a node that becomes a key's
// owner without having used it (a node that just joined and took the
// key's arc, or a dead owner's replica that never used the key) holds a
// full bucket for it: it admitted up to one burst more than the cluster
// had left when it used the key itself, and told later newcomers a debt of
// about nothing (newcomerPrevLocked reads the owner's own balance). Ten
// processes, one replaced every 1.5 s: a key handed once to a new node
// 101.9-106.7% of burst + rate × T, one never handed 99.7-100.6%
// (TestProcsChurnKeepsTheLimit).
//
// Its contributors know the debt: each has been charged the cluster's
// consumption by the previous owner. So a heard message (ownerrepeat.go)
// carries the sender's debt for the key (how far its balance lies below a
// full bucket), and an owner whose aggregate of the key is young (made
// within ownerLearnFor: it may not know the key's history) lowers its own
// balance to the sender's, if that is lower: it is charged the difference
// (each view counts a subset of the consumption, the lower is the better
// estimate, and nothing is charged twice). Its own users and the newcomers
// it tells the debt then start from the cluster's. Not Ledger.Adopt: a
// daemon's Adopt also ends a new bucket's first-share hold (a peer's view
// of the key), so an owner that adopted a small debt at a key's first
// contact admitted up to a burst at once (in-process, 10% loss, 8 s:
// 107-110% in 3 of about 16 runs under the race detector).
//
// Trust: a keyed member could claim a debt it does not have; the claim is
// capped at the key's burst (the owner's balance goes no lower than a
// bucket emptied), and only while the aggregate is young: no worse than a
// member that spends a burst, which it may.

// ownerLearnFor is, in gossip intervals, how long after an aggregate is
// made its owner adopts the debts its contributors report.
const ownerLearnFor = 50

// learnt is a debt an owner adopts once it has let go of s.mu: how far
// below full (a full bucket's balance) a contributor's balance was.
type learnt struct {
	k          aggKey
	full, debt float64
	at         time.Duration // when the contributor sent it, on this node's clock since born
}

// debtLocked is how far this node's balance of k lies below a full bucket,
// rounded up; 0 without a BoundedLedger or for a key it has no limit for.
// Caller holds s.mu.
func (s *Syncer) debtLocked(k aggKey) uint64 {
	a, balance, ok := s.limitOf(k.rule, k.key)
	if !ok {
		return 0
	}
	debt := a.Burst - a.Soft - balance
	if !(debt > 0) { // a full bucket, or no balance (+Inf, NaN)
		return 0
	}
	return uint64(min(math.Ceil(debt), math.MaxUint32))
}

// learnDebtLocked appends to learn the balance a contributor's reported
// debt a.debt gives aggregate o's key, while o is young, less what the
// contributor's bucket refilled in age (since the report was sent, on this
// node's clock: ownerlearnstale.go). Caller holds s.mu.
func (s *Syncer) learnDebtLocked(learn []learnt, o *ownedKey, a heardAck, age, now time.Duration) []learnt {
	if a.debt == 0 || now-o.born > ownerLearnFor*s.cfg.GossipInterval || !s.learnsFromLocked(aggKey{a.rule, a.key, a.window}, o) {
		return learn
	}
	bounded, ok := s.ledger.(BoundedLedger)
	if !ok {
		return learn
	}
	al, ok := bounded.Allowance(a.rule, a.key)
	if !ok {
		return learn
	}
	debt := min(float64(a.debt), al.Burst) - al.PerSecond*age.Seconds()
	if !(debt >= 1) {
		return learn
	}
	return append(learn, learnt{aggKey{a.rule, a.key, a.window}, al.Burst - al.Soft, debt, now - age})
}

// learnsFromLocked reports whether its contributors' debts teach aggregate
// k (o) the key's: not when o is a group this node aggregates. A group's
// numbering, and the key's debt, come from the owner's first answer to it
// (owneragg.go); its users' balances hold the group's consumption counted
// here already (an aggregator charges it at once), so their debts exceed
// the key's by that much, and the aggregator was charged it twice, for as
// long as the key stayed in debt (100 simulated nodes on a key in debt: an
// aggregator 351 tokens, and its group, told its balance, admitted 0-6% of
// its share). An owner still learns from every contributor, an aggregator
// or a user that goes through one included: theirs may hold consumption it
// has not counted yet too (an interval or two of a group's), which errs
// toward admitting less, the same for every user (each is told the owner's
// balance, owneraggbalance.go), and under loss it holds what the owner
// never heard (1,000 simulated nodes, 30% loss, seed 2: 116.5% of the
// limit over 5 s without it, 98.2% with). Caller holds s.mu.
func (s *Syncer) learnsFromLocked(k aggKey, o *ownedKey) bool {
	g := s.owner.agg.groups[k]
	return g == nil || g.o != o
}

// adoptLearnt charges this node what lies between its balances and the
// debts learnt, where they are deeper; on the key's replica or third, only
// what its charge-once account leaves (ownerlearnpair.go). Caller does not
// hold s.mu.
func (s *Syncer) adoptLearnt(learn []learnt) {
	bounded, ok := s.ledger.(BoundedLedger)
	if !ok {
		return
	}
	for _, l := range learn {
		balance, _ := bounded.Balance(l.k.rule, l.k.key)
		if more := l.debt - (l.full - balance); more >= 1 {
			if tokens := s.learntCharge(l, uint64(more)); tokens > 0 {
				s.ledger.Charge(l.k.rule, l.k.key, l.k.window, tokens)
			}
		}
	}
}
