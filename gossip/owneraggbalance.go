package gossip

import (
	"math"
	"time"
)

// The balance an aggregator tells its group (owneragg.go, ownershare.go).
//
// A user's share is its part of the key's balance as one node sees it for
// the whole cluster (bucket.Store.SetOwnerView): every user must be told
// the same balance, or those told a lower one admit less than their share
// and those told a higher one more. Without aggregation that is the
// owner's. An aggregator's own balance is not the owner's: it counts its
// group's consumption before the owner does, its bucket, like any
// receiver's, lost refill to the cap while it had not heard of the key
// (ownershare.go: why views carry the owner's balance at all), and it may
// have learnt a different debt (ownerlearn.go); each offset stays for as
// long as the key stays in debt. With 100 simulated nodes on one key in
// debt, one group (and the owner) admitted 0-6% of its share while others
// took 1.27 times theirs (SCALING.md's fairness at 100 nodes: 90% of 2 s
// shares within ±25%; 26% with another seed).
//
// So an aggregator tells its users (and itself) the owner's balance from
// the owner's last answer to the group, plus the refill since (at most a
// full bucket), less the group's consumption that answer had not counted
// (the group's sum beyond the answer's acknowledgement): the owner's
// balance as it is now, as far as this node knows, at most this node's own
// balance plus twice the lead an honest owner's may have (viewLead, as
// every view is bounded: ownerviewbound.go). Until the owner has
// told the group a balance, or when its last one is older than
// aggBalanceFresh, it tells its own balance, as before.

// aggBalanceFresh is how old the owner's last balance to a group may be
// for its users to be told it: an idle group hears from its owner at least
// once per ownerIdlePush.
const aggBalanceFresh = 2 * ownerIdlePush

// aggUpView is the owner's view in its last answer to a group that said a
// balance: the balance, the group sum it had counted, and when it came.
type aggUpView struct {
	balance float64
	acked   uint64
	at      time.Duration
	set     bool
}

// note keeps answer a's balance, heard now, if it said one.
func (v *aggUpView) note(a ownerAnswer, now time.Duration) {
	if math.IsNaN(a.balance) || math.IsInf(a.balance, 0) {
		return
	}
	*v = aggUpView{balance: a.balance, acked: a.ackUsed, at: now, set: true}
}

// aggGroupOfLocked returns the group this node aggregates whose aggregate
// is o (nil: o is none). Caller holds s.mu.
func (s *Syncer) aggGroupOfLocked(k aggKey, o *ownedKey) *aggGroup {
	if g := s.owner.agg.groups[k]; g != nil && g.o == o && o != nil {
		return g
	}
	return nil
}

// aggBalanceLocked is the balance of key k the users of aggregate o are
// told: own (this node's balance) unless o is a group this node
// aggregates whose owner said a balance lately; then the owner's, as
// above. Caller holds s.mu.
func (s *Syncer) aggBalanceLocked(k aggKey, o *ownedKey, own float64, now time.Duration) float64 {
	g := s.aggGroupOfLocked(k, o)
	if g == nil || !g.view.set || now-g.view.at > aggBalanceFresh {
		return own
	}
	al, here, ok := s.limitOf(k.rule, k.key)
	if !ok {
		return own
	}
	sum := g.o.total - min(g.o.total, g.up)
	b := g.view.balance + al.PerSecond*(now-g.view.at).Seconds()
	b = min(b, al.Burst-al.Soft) - float64(sum-min(sum, g.view.acked))
	if !math.IsNaN(here) && !math.IsInf(here, 0) {
		// As a view is taken (ownerviewbound.go): an owner that lies about
		// the balance moves this node's own share no further than the lag
		// explains (its users bound what they are told themselves).
		b = min(b, here+2*viewLead(al))
	}
	return b
}

// aggSelfViewLocked is the view of key k for this node's own ledger when
// it aggregates k's group (o) and the owner said a balance lately: the
// group's balance (aggBalanceLocked), having counted this node's own
// consumption as far as the group has. ok is false otherwise (it decides
// on its own balance). Caller holds s.mu.
func (s *Syncer) aggSelfViewLocked(k aggKey, o *ownedKey, users uint64, now time.Duration) (OwnerView, bool) {
	g := s.aggGroupOfLocked(k, o)
	self := o.subs[s.self]
	if g == nil || self == nil {
		return OwnerView{}, false
	}
	b := s.aggBalanceLocked(k, o, math.NaN(), now)
	if math.IsNaN(b) {
		return OwnerView{}, false
	}
	return OwnerView{Users: users, Balance: b, AckEpoch: self.epoch, AckUsed: self.hi}, true
}
