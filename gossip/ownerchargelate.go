package gossip

import "time"

// A failover's pair lasts as long as its replica may answer.
//
// A node that failed a key over charges the larger of the owner's and the
// replica's answers, not their sum (ownerchargeonce.go). The pair used to
// start at the replica's first answer and end when the owner answered again
// with its sum caught up. A starved replica answers late: its first answer
// came after the owner had answered again and ended the failover, the
// owner's answers since the failover began (which carried the same
// consumption) were outside the pair, and the replica's answer was charged
// whole, on top; its first answer also carries the key's debt (the node is
// a newcomer to the replica's aggregate, newcomerPrevLocked), consumption
// the node had long been charged through the owner. And the replica keeps
// answering the node for a subscription's TTL after its last counter, so
// each later failover of other nodes reached it as the replica's answers
// after the pair had ended: a new pair, the owner's sum 0, charged whole.
// Ten bare syncers holding the real test's limit, stalled at random (8% of
// rounds, for 5-44 rounds): 8 of the 10 charged 11-157 tokens above the
// others' ~1,150 in 2 of 24 seeds, now none but the replica
// (TestStarvedReplicaAnswersLateChargeOnce); over 100 seeds and five stall
// profiles, nodes over went from 656 of 5,000 to 127. 50 in-process
// daemons held to 0.10-0.12 of a core: the cluster's over-charge after
// settling went from a median of +7.7% (6 of 8 starved runs above +5%) to
// -1.0% (2 of 13 above: what remains comes with ring moves and the
// replica's first answers, docs/GUARANTEES.md).
//
// So a node's failover from an owner (one failover: the round it began)
// has one pair, made by the first answer of either after it began, the
// owner's included, and it lasts until the replica has been silent for a
// subscription's TTL: the owner counts all the replica counts, so with the
// owner answering, the replica's answers charge only what lifts them above
// the owner's, however late they come. The node's next failover starts a
// pair of its own (the last one's would swallow the new replica's answers:
// TestSecondFailoverIsChargedWhileItLasts). Pairs of a node that did not
// fail the key over (the replica counting its own aggregate) end as
// before.
//
// The price: while the owner is alive, the owner's sum grows with every
// node's consumption and the replica's only with the failed-over nodes';
// if the owner then dies, what the replica tells this node before its own
// failover begins (at most ownerFailover rounds of the others') lies below
// the owner's sum and is not charged: it admits that much more, never less.

// failoverOfLocked names this node's failover of k from owner, now or
// lately: the round it began, plus one; 0 when there is none or this node
// is the replica (its aggregate pairs by time: ownerLateLocked). Caller
// holds s.mu.
func (s *Syncer) failoverOfLocked(k aggKey, owner, replica string) uint64 {
	f, ok := s.owner.failover[[2]string{k.rule, k.key}]
	if !ok || f.owner != owner || replica == s.self {
		return 0
	}
	return f.at + 1
}

// newFailoverPairLocked makes the pair of this node's failover fo of k,
// nil when MaxSeen pairs are held. Caller holds s.mu.
func (s *Syncer) newFailoverPairLocked(k aggKey, owner, replica string, fo uint64, now time.Duration) *chargePair {
	return s.newPairLocked(k, chargePair{a: owner, b: replica, lastB: now, failover: fo}, now)
}
