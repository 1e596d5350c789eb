package gossip

import "testing"

// A group in the owner's numbering (its first answer told 1,000) whose
// aggregator the replica then answers on its own counter after a notice
// (others 90 in the replica's numbering, from the failover) and whose
// group subscription at the replica continues from there (first prev 90)
// tells its users all the replica counted: 1,120, not 1,030 (300 simulated
// nodes, 10%/min churn, the owner killed at 8 s, seed 22: 12 users of a
// joiner aggregator ended 83-89 tokens under what the others admitted).
// The aggregator itself is charged each token once either way; and a group
// subscription at the replica that started from 0 is added nothing twice.
func TestOwnAnswerOfAnotherOwnerReachesTheGroup(t *testing.T) {
	type step struct {
		group              bool // an answer to the group (else to its own counter)
		prev, others, want uint64
	}
	for _, tc := range []struct {
		name   string
		steps  []step
		wantUp uint64 // the group's others after the steps
	}{
		{name: "own counter first, group from there", wantUp: 1120,
			steps: []step{{false, 0, 90, 90}, {true, 90, 99, 9}, {true, 99, 120, 21}}},
		{name: "own counter in two answers", wantUp: 1099,
			steps: []step{{false, 0, 50, 50}, {false, 50, 90, 40}, {true, 90, 99, 9}}},
		{name: "group counted from 0 at the replica", wantUp: 1099,
			steps: []step{{true, 0, 60, 60}, {true, 60, 99, 39}, {false, 0, 90, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clock := newClockedAggSyncer(20)
			s.mu.Lock()
			owner, replica := s.owner.ring.owners("api", "k")
			k := aggKey{"api", "k", 0}
			g := s.aggGroupLocked(k, s.sinceBorn())
			epoch := g.epoch
			s.mu.Unlock()
			answer := clockedAnswer(t, s, clock, "k")
			if got := answer(owner, 7, 0, 1000, epoch); got != 1000 {
				t.Fatalf("the owner's first answer to the group charged %d, want 1000", got)
			}
			// The owner falls silent; the replica counts from the failover
			// and tells this node to aggregate (its total 91, 1 its own).
			nw := &noticeWriter{limit: 1400, sender: replica, at: uint64(clock.UnixNano())}
			nw.add(aggNotice{rule: "api", key: "k", total: 91, gen: 9, contrib: 1, ackEpoch: 5, ackUsed: 1})
			if err := s.receiveNotice(nw.packets()[0]); err != nil {
				t.Fatalf("receiving the notice: %v", err)
			}
			for i, st := range tc.steps {
				gen, ack := uint64(9), uint64(5)
				if st.group {
					gen, ack = 10, epoch
				}
				if got := answer(replica, gen, st.prev, st.others, ack); got != st.want {
					t.Errorf("step %d (group %v, others %d): charged %d, want %d", i, st.group, st.others, got, st.want)
				}
			}
			s.mu.Lock()
			up := g.up
			s.mu.Unlock()
			if up != tc.wantUp {
				t.Errorf("the group tells its users others %d, want %d", up, tc.wantUp)
			}
		})
	}
}
