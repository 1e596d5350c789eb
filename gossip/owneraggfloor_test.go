package gossip

import "testing"

// A member that hands its group on after the key failed over (the group
// in the owner's numbering, the replica's answers to it in the replica's,
// which counts from the failover) is charged by the replica's answers to
// its own counter only what the others consumed since: what the replica
// told the group, and what its new aggregator charged it since, are
// charged already. Before, the replica's first answer to its own counter
// charged the replica's whole count (the key's fourth member of 100
// simulated nodes, the owner killed at 8 s: 1,092 tokens at once, 1,108
// over what the others admitted). Nothing the others consumed is left
// uncharged: an answer at the floor charges nothing, and each token above
// it is charged once.
func TestHandedOnAfterFailoverIsChargedOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		viaAt uint64 // its new aggregator's answer before the replica's (0: none)
		steps []struct{ others, want uint64 }
	}{
		{name: "the replica answers first", steps: []struct{ others, want uint64 }{{300, 0}, {340, 40}, {345, 5}}},
		{name: "after its new aggregator's answer", viaAt: 1320, steps: []struct{ others, want uint64 }{{320, 0}, {330, 10}, {360, 30}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net := newHandOnNet(t, handOnKey, noHandOnKey)
			a, clock, joiner, next, owner, replica, k, answer := net.a, net.clock, net.member, net.next, net.owner, net.replica, net.k, net.answer
			a.mu.Lock()
			epoch := a.aggGroupLocked(k, a.sinceBorn()).epoch
			a.mu.Unlock()
			if got := answer(owner, 7, 0, 1000, epoch); got != 1000 {
				t.Fatalf("the owner's first answer to the group charged %d, want 1000", got)
			}
			// The owner falls silent: the replica counts the key from the
			// failover and tells the group 300 in its numbering.
			if got := answer(replica, 5, 0, 300, epoch); got != 300 {
				t.Fatalf("the replica's answer to the group charged %d, want 300", got)
			}
			joinAndHandOn(t, a, joiner, k, *clock)
			var via uint64
			if tc.viaAt > 0 {
				via = tc.viaAt - 1300 // above the group's total, in the owner's numbering
				if got := answer(next, 3, 1000, tc.viaAt, 0); got != via {
					t.Fatalf("its new aggregator's answer charged %d, want %d", got, via)
				}
			}
			prev := uint64(0) // the replica's new subscription of its own counter
			for _, st := range tc.steps {
				if got := answer(replica, 9, prev, st.others, 1); got != st.want {
					t.Errorf("the replica's answer to its own counter, others %d: charged %d, want %d", st.others, got, st.want)
				}
				prev = st.others
			}
		})
	}
}

// The replica's answers to the group acknowledge counting the group's sum
// (ackUsed): what the group consumed since the replica's first answer to
// it (40 here) is in the replica's aggregate, not in what it told the
// group (320), and its answers to this node's own counter after the
// hand-on start above both. Before, that consumption, this node's group's
// own, was charged here once more (the key's fourth member of 100
// simulated nodes, the owner killed at 8 s, seed 2 of the third-aggregates
// key: +96 over what the others admitted; +16 after, its drift before the
// kill). An answer at the floor charges nothing, each token above once.
func TestHandedOnAfterFailoverIsNotChargedItsGroupsOwn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		firstUsed uint64 // the group's sum the replica's first answer acknowledged
		lastUsed  uint64 // ... its last
		steps     []struct{ others, want uint64 }
	}{
		{name: "the group consumed 40 since the replica's first answer", firstUsed: 110, lastUsed: 150,
			steps: []struct{ others, want uint64 }{{360, 0}, {370, 10}}},
		{name: "nothing since", firstUsed: 150, lastUsed: 150,
			steps: []struct{ others, want uint64 }{{320, 0}, {330, 10}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net := newHandOnNet(t, handOnKey, noHandOnKey)
			a, clock, joiner, owner, replica, k, answer := net.a, net.clock, net.member, net.owner, net.replica, net.k, net.answer
			a.mu.Lock()
			epoch := a.aggGroupLocked(k, a.sinceBorn()).epoch
			a.mu.Unlock()
			group := func(from string, gen, prev, others, used, want uint64) {
				t.Helper()
				*clock = clock.Add(a.cfg.GossipInterval)
				if got := answerCharged(t, a, from, *clock, ownerAnswer{rule: "api", key: net.key, gen: gen, prev: prev, others: others, ackEpoch: epoch, ackUsed: used}); got != want {
					t.Fatalf("%s's answer to the group (others %d) charged %d, want %d", from, others, got, want)
				}
			}
			group(owner, 7, 0, 1000, 100, 1000)
			// The owner falls silent: the replica counts the key from the
			// failover, and the group's counters from its sum then.
			group(replica, 5, 0, 300, tc.firstUsed, 300)
			group(replica, 5, 300, 320, tc.lastUsed, 20)
			joinAndHandOn(t, a, joiner, k, *clock)
			prev := uint64(0) // the replica's new subscription of its own counter
			for _, st := range tc.steps {
				if got := answer(replica, 9, prev, st.others, 1); got != st.want {
					t.Errorf("the replica's answer to its own counter, others %d: charged %d, want %d", st.others, got, st.want)
				}
				prev = st.others
			}
		})
	}
}
