package gossip

// A replica's (or third's) learnt debt pairs with the owner's answers.
//
// A young aggregate learns the key's debt from its contributors' heard
// messages (ownerlearn.go): where a contributor's balance lies deeper than
// this node's, it is charged the difference. That is meant for a node
// whose bucket never heard the key's history (a new owner, or a dead
// owner's replica that never used it). But the replica's aggregate is made
// whenever a node fails the key over to it, and the third's when a node
// fails it over to the third (ownerchain.go), while the owner may still be
// alive, late, and answering this node: a contributor's deeper debt is
// consumption the owner had charged it and has yet to charge this node
// (the contributor handled the owner's answer first), and the owner's
// answer then charged this node the same again. The replica's and the
// third's counting already pairs with the owner's answers
// (replicaChargeLocked, ownerchargeonce.go); the learnt debt did not.
// Ten bare syncers holding the real test's limit (burst 100, 100/s),
// stalled at random (TestStarvedOwnerLearnsTheDebtOnce's net): in 40
// seeds, the third charged 14, 60 and 4 tokens over what the others
// consumed (seeds 1, 37, 31: since the chain, the third counts, so it
// learns too) and the replica 1-3 in 6 seeds, each node's excess exactly
// the debt it learnt (traced by printing each learnt charge); now both are
// exact in all 40 (TestReplicaAndThirdLearnTheDebtOnce).
//
// So the learnt debt of the key's replica or third is charged as its
// aggregate's counting is: through replicaChargeLocked, pairing with the
// owner's (and the replica's) answers, or with the aggregator's it hears
// the key through (owneraggreplica.go). The owner's learnt debts, and a
// replica's whose owner is not late (it never used the key: no pair), are
// charged whole, as before; an owner that died never covers the learnt
// debt, which then lifts the replica's account and is charged.

// learntCharge returns what of tokens, the depth by which learnt l lies
// below this node's balance, it charges. Caller does not hold s.mu.
func (s *Syncer) learntCharge(l learnt, tokens uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replicaChargeLocked("", l.k, tokens, l.at, s.sinceBorn())
}
