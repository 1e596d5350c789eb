package gossip

import "slices"

// A key's third member on the ring is none of its aggregators.
//
// The chain failover (ownerchain.go) sends a key's counters to its third
// member once the owner and the replica both leave them unanswered. When
// that third was itself one of the key's aggregators (the first member at
// one of the key's aggregation points that is neither owner nor replica:
// 10-16% of keys at 100-300 members), its aggregate of the key in
// ownerState.mine was its group's, so it refused the failed-over counters
// (chainRefusesLocked) and kept its own counters at the replica: nobody
// counted the key until the ring dropped both, and every group admitted on
// its aggregator's own balance, as before the chain. 300 simulated nodes,
// a hot key whose third aggregates it, owner killed at 8 s and replica at
// 9 s (testcluster sim --hot-key-third-aggregates, seeds 1-3): 544.8-546.8%
// of the allowed over 30 s, worst 1 s window 17.3-17.9 times the limit;
// 100 nodes: 308.3-313.7%, 10.5-11.1 times.
//
// So, once every member speaks protoChainAgg, an aggregation point skips
// the key's third as it skips its owner and replica (aggregatorAt): the
// third is a user of the key through an aggregator, like the replica, and
// the chain works for every key as for the others. After, same runs: 300
// nodes 93.4-93.5% (no 1 s window over the limit), 100 nodes 93.5-93.9%
// (worst window that of the first second, as without a kill); the owner
// alone killed 93.3-94.2%, nothing killed 93.5-94.2%. Runs of keys whose
// third is at no aggregation point (the default hot key) are
// byte-identical: honest 300 and 100 nodes, loss, churn with the owner
// killed, and owner and replica killed at 300 (seeds 1-3).
//
// Why not the other ways (ring.md's options):
//   - the third counting failed-over counters while it aggregates a group:
//     one aggregate per key and window (ownerState.mine) is either a
//     group's, answered with the owner's view plus the rest of the group,
//     or an owner's, answered with everything else; holding both, or
//     handing the group on at the first failed-over counter (its users
//     then fail over to the next slot after aggFailover unanswered rounds,
//     and the third must count its own group's past from where the
//     replica counted it), adds a state per key to every aggregator and a
//     second transition racing with the ring's own hand-on at declaration;
//   - chaining to the first successor that aggregates nothing: when the
//     ring drops both dead, its owner is the third, not the member that
//     counted, and the new owner counts the whole failover again (the
//     75% of the 30-node run before the chain: every node charged twice).
//
// Excluding the third costs nothing measurable: one member fewer among
// N-2 candidates for an aggregation point; when the ring drops the owner
// the third becomes the replica (already no aggregator) and the next
// member becomes the third, handing its group on if it had one, as the
// third did before (aggRoundLocked's hand-on).
//
// Mixed versions: a member that does not speak protoChainAgg names the
// third an aggregator; while one is in the membership every member names
// aggregators as it does (aggState.thirdOut, decided with capable), so
// users, aggregators and owners agree on who aggregates a slot, as they
// must: an owner counts a group counter only from an aggregator its own
// ring names (groupCountLocked). chainRefusesLocked still guards those
// mixed clusters.
// (TestThirdAggregatesNoneOfItsKeys, TestThirdOfAnAggregatedKeyCounts.)

// protoChainAgg is the delegate protocol version of nodes that keep a
// key's third member out of its aggregators.
const protoChainAgg = protoAgg + 1

// aggregatorOf returns user's aggregator of (rule, key) on r, skip slots
// on from its own; thirdOut: the key's third is none (protoChainAgg).
func (r *ownerRing) aggregatorOf(rule, key, user string, skip int, thirdOut bool) string {
	owner, replica := r.owners(rule, key)
	third := ""
	if thirdOut {
		third = r.third(rule, key)
	}
	kh := keyHash(rule, key)
	k := aggFanIn(r.size())
	return r.aggregatorAt(kh, (aggSlot(kh, user, k)+skip)&(k-1), owner, replica, third)
}

// aggThirdOutLocked reports whether this node's ring keeps keys' third
// members out of their aggregators: every member speaks protoChainAgg.
// Caller holds s.mu.
func (s *Syncer) aggThirdOutLocked() bool {
	s.aggDecideLocked()
	return s.owner.agg.thirdOut
}

// aggregatorForLocked returns this node's aggregator of (rule, key), skip
// slots on from its own, on its ring. Caller holds s.mu.
func (s *Syncer) aggregatorForLocked(rule, key string, skip int) string {
	return s.owner.ring.aggregatorOf(rule, key, s.self, skip, s.aggThirdOutLocked())
}

// ThirdAggregates reports whether, on the ring of members names, the third
// member of (rule, key) (ownerchain.go) is at one of the key's aggregation
// points as members that do not speak protoChainAgg name them: the keys
// whose chain failover needs the third kept out of aggregation. For
// simulations choosing such a key; it builds a ring (not for hot paths).
func ThirdAggregates(names []string, rule, key string) bool {
	r := newOwnerRing(names)
	third := r.third(rule, key)
	_, _, aggs := r.aggregatorsOf(rule, key, false)
	return third != "" && slices.Contains(aggs, third)
}

// RingAggregator returns user's first aggregator of (rule, key) on the
// ring of members names, as members name it when thirdOut (every member
// speaks protoChainAgg: the key's third is none) or not (the third may be
// one). For tests and tools that check which member a node sends its
// counters of an aggregated key to; it builds a ring (not for hot paths).
func RingAggregator(names []string, rule, key, user string, thirdOut bool) string {
	return newOwnerRing(names).aggregatorOf(rule, key, user, 0, thirdOut)
}
