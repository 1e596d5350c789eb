package gossip

import (
	"testing"
	"time"
)

// An aggregator told by the owner's notice that its group starts from the
// owner's total (20: 19 others' tokens it was answered on its own counter's
// subscription, and its own 1) is charged those 19 once, whichever of the
// owner's two answers of one round it takes first: the one to its own
// counter (others 19), or the first to its group (prev 20, others 20).
// Group first, the own answer was charged nothing (aggOwnAnswerLocked):
// an aggregator of 20 in-process nodes, each using a key once, stayed at
// the burst while every other node was charged the 20 tokens
// (TestOwnerAggregationSwitchIsExact, on a loaded machine). A later answer
// on its own counter's subscription charges nothing still.
func TestAggregatorsLateOwnAnswerChargesWhatTheGroupTookAsHeard(t *testing.T) {
	for _, groupFirst := range []bool{false, true} {
		s, clock := newClockedAggSyncer(20)
		s.mu.Lock()
		owner, _ := s.owner.ring.owners("api", "k")
		g := s.aggGroupLocked(aggKey{"api", "k", 0}, s.sinceBorn())
		epoch := g.epoch
		s.mu.Unlock()

		nw := &noticeWriter{limit: 1400, sender: owner, at: uint64(clock.UnixNano())}
		nw.add(aggNotice{rule: "api", key: "k", total: 20, gen: 7, contrib: 1, ackEpoch: 5, ackUsed: 1})
		if err := s.receiveNotice(nw.packets()[0]); err != nil {
			t.Fatalf("receiving the notice: %v", err)
		}
		own := ownerAnswer{rule: "api", key: "k", gen: 7, prev: 0, others: 19, ackEpoch: 5, ackUsed: 1}
		group := ownerAnswer{rule: "api", key: "k", gen: 8, prev: 20, others: 20, ackEpoch: epoch}
		later := ownerAnswer{rule: "api", key: "k", gen: 7, prev: 19, others: 25, ackEpoch: 5, ackUsed: 1}
		order := []ownerAnswer{own, group, later}
		if groupFirst {
			order = []ownerAnswer{group, own, later}
		}
		var got uint64
		for _, a := range order {
			*clock = clock.Add(time.Millisecond)
			got += answerCharged(t, s, owner, *clock, a)
		}
		if got != 19 {
			t.Errorf("group's answer first %v: charged %d, want the 19 others' tokens once", groupFirst, got)
		}
	}
}

// A user whose own counter's subscription keeps answering after the
// owner's notice (the notice found it told 1; the owner then answered
// others 17) is charged the aggregated path's first answer only beyond
// what it heard there: 19 others' tokens in all, not 16 of them twice
// (TestOwnerAggregationSwitchIsExact on a loaded machine: a user of its
// first aggregator charged 16 more than the others consumed).
func TestAnswerAfterTheNoticeIsNotChargedTwice(t *testing.T) {
	s, clock := newClockedAggSyncer(20)
	s.mu.Lock()
	owner, _ := s.owner.ring.owners("api", "k")
	s.mu.Unlock()
	sentCounter(s, "api", "k") // ownerunsolicited.go
	send := func(from string, a ownerAnswer) uint64 {
		t.Helper()
		*clock = clock.Add(time.Millisecond)
		return answerCharged(t, s, from, *clock, a)
	}
	got := send(owner, ownerAnswer{rule: "api", key: "k", gen: 7, prev: 0, others: 1, ackEpoch: 5, ackUsed: 1})
	nw := &noticeWriter{limit: 1400, sender: owner, at: uint64(clock.UnixNano())}
	nw.add(aggNotice{rule: "api", key: "k", total: 2, gen: 7, contrib: 1, ackEpoch: 5, ackUsed: 1})
	if err := s.receiveNotice(nw.packets()[0]); err != nil {
		t.Fatalf("receiving the notice: %v", err)
	}
	got += send(owner, ownerAnswer{rule: "api", key: "k", gen: 7, prev: 1, others: 17, ackEpoch: 5, ackUsed: 1})
	s.mu.Lock()
	agg := s.owner.ring.aggregatorFor("api", "k", "m000", 0)
	s.mu.Unlock()
	if agg == "" || agg == "m000" || agg == owner {
		t.Fatalf("aggregator %q of m000 (owner %s)", agg, owner)
	}
	got += send(agg, ownerAnswer{rule: "api", key: "k", gen: 9, prev: 0, others: 20, ackEpoch: 5, ackUsed: 1})
	if got != 19 {
		t.Errorf("charged %d, want the 19 others' tokens once", got)
	}
}
