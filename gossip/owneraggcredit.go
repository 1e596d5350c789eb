package gossip

// An aggregator's group in one owner's numbering hears what another owner
// (the replica after a failover, or the third) told this node on its own
// counter.
//
// A member new to a key (a churn joiner) that the ring names aggregator
// makes its group while the owner still answers: the group takes the
// owner's numbering (aggHeardLocked). When the owner is killed, the
// aggregator's own counter and its group counter both go to the replica,
// which counts from the failover. Its own counter reaches the replica
// first: the replica answers it as a user (others: what the others
// consumed since the failover) and sends it a notice; then the group
// counter opens the group's subscription there, which continues from what
// the replica told the aggregator as a user (groupCountLocked: its first
// answer's prev is that, not 0). The aggregator is charged that part on
// its own counter's answers (aggOwnChargeLocked, up to ownUpTo), but its
// group adds only what the replica's group answers add above their first
// prev: its users never heard what the others consumed between the
// owner's last answer and the replica's first (300 simulated nodes, 10%/min
// churn, the owner killed at 8 s, seed 22: a joiner aggregator was charged
// 90 on its own counter, its group's first answer from the replica came
// with prev 90, and 13 nodes ended 54-89 tokens under what the others
// admitted, its users among them).
//
// So what the own counter's answers of an owner other than the one whose
// numbering the group took charge here is added to the group too, up to
// where the group's subscription of that owner started (its first prev:
// below it, the group heard nothing of that owner's count; none yet: the
// subscription is to come and will start from the aggregator's own, as
// groupCountLocked continues it). Nothing is added twice: the group's own
// answers of that owner add only above that start. The same run after:
// min -89 -> -16 (seeds 18 and 23: -75 -> -36, -158 -> -49; the other
// seeds but 9, whose churn then diverges, and honest runs unchanged):
// TestOwnAnswerOfAnotherOwnerReachesTheGroup.

// aggCreditGroupLocked adds tokens, charged here from sender's answer to
// this node's own counter of k, to k's group when the group counts in
// another owner's numbering, up to where the group's subscription of
// sender started. Caller holds s.mu.
func (s *Syncer) aggCreditGroupLocked(k aggKey, sender string, tokens uint64) {
	g := s.owner.agg.groups[k]
	if tokens == 0 || g == nil || g.o != s.owner.mine[k] || !g.upSet || g.upFrom == sender {
		return
	}
	if g.creditFrom != sender {
		g.creditFrom, g.credit = sender, 0
	}
	if h := s.owner.heard[k]; h != nil {
		for _, sl := range h.slots {
			if sl.owner == sender && !sl.own {
				tokens = min(tokens, sl.start-min(sl.start, g.credit))
			}
		}
	}
	g.credit += tokens
	g.up += tokens
	g.o.total += tokens
	g.o.dirty = true
}
