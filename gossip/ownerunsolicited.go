package gossip

// Unsolicited answers and notices refused (session 11).
//
// Owner mode's design is that a node that never touches a key never hears
// of it: an owner, replica, chained third or aggregator answers only the
// contributors whose counters it counted, and sends aggregation notices
// (kind 8) only to them. Yet a node took an answer (kind 5) or a notice
// about any key from a member the ring names its owner or replica, and
// answers created a heard entry and, through the charge, a bucket per key:
// a keyed member owning about 1/N of all keys could make a real sluiced
// hold 400,000 buckets and heard entries for keys it never used (peak RSS
// +128 MiB; the heard map is in no memory arithmetic), and since the
// store evicts, at a full shard, the sampled bucket nearest to full, those
// buckets created in debt would push out a legitimate client's bucket in
// smaller debt, which then restarts full: a bypass of the limit through
// eviction pressure.
//
// No legitimate flow answers a node about a key it has no state for: its
// own counters (sent, or queued: lastOwn, pending, waiting, failover), a
// subscription heard already (heard), a group it aggregates (groups), a
// key routed through aggregators (hot), or an aggregate it holds (mine).
// So answers and notices about any other key are refused, counted in
// AnswersRefused (sluice_gossip_owner_answers_refused_total), and allocate
// nothing. A refused answer is at worst a lost one: answers are
// cumulative, and a subscription whose first answers were lost is
// repaired by heard messages (ownerrepeat.go). Heard messages (kind 9)
// already touched only the aggregates this node holds (receiveHeard).
//
// Tests: TestUnsolicitedAnswersAllocateNothing (gossip),
// TestOwnerRogueUnsolicitedAnswersFloodNothing (cmd/sluiced).

// solicitedLocked reports whether this node has any state of (rule, key)
// in window that an answer or notice about it may legitimately concern;
// epoch is the answer's acknowledged epoch (its own pending counter's).
// Caller holds s.mu.
func (s *Syncer) solicitedLocked(rule, key string, window, epoch uint64) bool {
	k2 := [2]string{rule, key}
	k := aggKey{rule, key, window}
	if _, ok := s.owner.lastOwn[k2]; ok {
		return true
	}
	if s.owner.heard[k] != nil || s.owner.mine[k] != nil || s.owner.agg.hot[k2] != nil || s.owner.agg.groups[k] != nil {
		return true
	}
	if _, ok := s.owner.waiting[k2]; ok {
		return true
	}
	if _, ok := s.owner.failover[k2]; ok {
		return true
	}
	_, ok := s.pending[pendingKey{counterKey{s.self, rule, key}, window, epoch}]
	return ok
}
