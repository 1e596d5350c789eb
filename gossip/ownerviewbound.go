package gossip

import "math"

// An owner's view is bounded by this node's own balance.
//
// A fresh view of a key decides admissions on its own (bucket.Store's
// share): between two answers this node admits its share of the owner's
// balance, its own balance aside, because its own lags the cluster's (a
// node that heard of the key late had its bucket refilled while the
// others spent the refill, then was charged all they spent). So a keyed
// member that is a key's owner or replica on this node's ring could, by
// answering with a balance it does not have, make this node admit without
// limit: a real daemon told "2 users, a balance of 10^300" every 20 ms for
// 2 s admitted 4,895 requests of a key of burst 100 that refilled 100 an
// hour (TestOwnerLiesKeyedRogueOwnerViews), where a member that lies in
// its counters or push-pull states is held to one allowance (issue 15).
//
// An honest owner's balance lies above this node's by at most what the
// lag costs: the refill of a burst capped away here while the owner spent
// it, and the rate over the longest wait between two answers
// (ownerIdlePush). So a view's balance is taken no higher than this node's
// own balance plus twice that lead (viewLead): honest views are unchanged,
// and a lying owner lets this node admit at most about 2 × viewLead beyond
// its own bucket over the lie (its own balance falls with each admission,
// and the view with it), plus one share between two answers. A view cut
// is counted as a suspicious report from its sender.

// viewLead is how far above this node's balance of a key an honest
// owner's may lie: a burst (with its soft margin) and the rate over
// ownerIdlePush.
func viewLead(a Allowance) float64 {
	return a.Burst + a.Soft + a.PerSecond*ownerIdlePush.Seconds()
}

// boundViewLocked returns the balance of owner sender's view of a's key,
// at most this node's own balance plus 2 × viewLead. A view without a
// balance (NaN), or of a key this node has no limit for, is left alone.
// Caller holds s.mu.
func (s *Syncer) boundViewLocked(sender string, a ownerAnswer, bounded BoundedLedger, al Allowance) float64 {
	if bounded == nil || math.IsNaN(a.balance) {
		return a.balance
	}
	own, _ := bounded.Balance(a.rule, a.key)
	if math.IsNaN(own) || math.IsInf(own, 0) {
		return a.balance
	}
	top := own + 2*viewLead(al)
	if a.balance <= top {
		return a.balance
	}
	s.suspectLocked(sender, Counter{Rule: a.rule, Key: a.key, Epoch: a.gen, Window: a.window},
		"an owner's view above this node's balance by more than the lag explains", uint64(max(0, min(a.balance, math.MaxUint32))), uint64(max(0, min(top, math.MaxUint32))))
	return top
}
