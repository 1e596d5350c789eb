package gossip

import (
	"fmt"
	"testing"
)

// A user whose aggregator moves when a member joins, and moves back when
// it goes, is charged what the other nodes consumed once: the new
// aggregator's first answer (a group it made before the owner first
// answered it tells the key's whole history) charges only what lies above
// what the old one told, and the old one's answer on the subscription the
// user comes back to charges only what lies above what the new one told
// (1,000 simulated nodes whose member count crossed 1,024: nodes charged
// the history, 1,212-1,270 tokens, then 340-397 again).
func TestSwitchedUserIsChargedOnce(t *testing.T) {
	const n = 64 // 8 aggregators a key; 65 members: 16
	s, clock := newClockedAggSyncer(n)
	joiner := fmt.Sprintf("m%03d", n)
	s.mu.Lock()
	small := s.owner.ring
	large := newOwnerRing(append(append([]string{}, small.names...), joiner))
	key, x, y := "", "", ""
	for i := range 1000 {
		k := fmt.Sprint("k", i)
		owner, replica := small.owners("api", k)
		if owner == s.self || replica == s.self {
			continue
		}
		if o2, r2 := large.owners("api", k); o2 != owner || r2 != replica {
			continue
		}
		x, y = small.aggregatorFor("api", k, s.self, 0), large.aggregatorFor("api", k, s.self, 0)
		if x != y && x != s.self && y != s.self && y != joiner {
			key = k
			break
		}
	}
	if key == "" {
		s.mu.Unlock()
		t.Fatal("no key whose aggregator moves when a member joins")
	}
	// Told by the owner to aggregate, at the owner's total 1,000.
	s.owner.agg.hot = map[[2]string]*aggUse{{"api", key}: {used: s.sinceBorn(), baseSet: true, base: 1000}}
	s.mu.Unlock()
	ring := func(join bool) { setAggMember(s, joiner, join) }
	answer := func(from string, gen, prev, others uint64) uint64 {
		t.Helper()
		*clock = clock.Add(s.cfg.GossipInterval)
		return answerCharged(t, s, from, *clock, ownerAnswer{rule: "api", key: key, gen: gen, prev: prev, others: others})
	}
	steps := []struct {
		what       string
		join, drop bool
		from       string
		gen        uint64
		prev       uint64
		others     uint64
		want       uint64
	}{
		{what: "first answer of its aggregator, from the notice's 1,000", from: x, gen: 1, prev: 0, others: 1000, want: 0},
		{what: "100 more", from: x, gen: 1, prev: 0, others: 1100, want: 100},
		{what: "a member joins: the new aggregator's first answer tells everything", join: true, from: y, gen: 2, prev: 0, others: 1150, want: 50},
		{what: "150 more from the new aggregator", from: y, gen: 2, prev: 0, others: 1300, want: 150},
		{what: "the member goes: the old aggregator's answer on the old subscription", drop: true, from: x, gen: 1, prev: 1100, others: 1350, want: 50},
		{what: "and on from there", from: x, gen: 1, prev: 1100, others: 1400, want: 50},
	}
	var total uint64
	for _, st := range steps {
		switch {
		case st.join:
			ring(true)
		case st.drop:
			ring(false)
		}
		got := answer(st.from, st.gen, st.prev, st.others)
		total += got
		if got != st.want {
			t.Errorf("%s: charged %d, want %d", st.what, got, st.want)
		}
	}
	if total != 400 {
		t.Errorf("charged %d in all; the others consumed 400 beyond the notice's total", total)
	}
}

// A user that becomes its key's owner (the owner died or left) counts the
// key itself: it no longer sends its counters through an aggregator nor
// takes an aggregator's answers (it took them, and was charged everything
// twice: 100 simulated nodes under churn, one ended 1,951 tokens over). A
// user of a key it does not own still does both.
func TestUserThatOwnsTheKeyLeavesItsAggregator(t *testing.T) {
	s, _ := newAggSyncer("m000", 20)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshRingLocked()
	for _, tc := range []struct {
		what string
		own  bool
	}{{"a key it owns", true}, {"a key another member owns", false}} {
		key := ""
		for i := range 1000 {
			k := fmt.Sprint("k", i)
			if owner, replica := s.owner.ring.owners("api", k); (owner == s.self) == tc.own && replica != s.self {
				key = k
				break
			}
		}
		agg := s.owner.ring.aggregatorFor("api", key, s.self, 0)
		if key == "" || agg == "" || agg == s.self {
			t.Fatalf("%s: no key (%q, aggregator %q)", tc.what, key, agg)
		}
		now := s.sinceBorn()
		s.owner.agg.hot = map[[2]string]*aggUse{{"api", key}: {used: now, heardFrom: agg}}
		k := pendingKey{counterKey{s.self, "api", key}, 0, 1}
		p := &pendingCounter{c: Counter{Rule: "api", Key: key, Epoch: 1, Used: 5}, transmits: ownerResends}
		s.pending[k] = p
		if sent := s.aggSendLocked(k, p, now, -100); sent == tc.own {
			t.Errorf("%s: counter sent through its aggregator %v, want %v", tc.what, sent, !tc.own)
		}
		if took := s.aggAcceptLocked("api", key, 0, agg); took == tc.own {
			t.Errorf("%s: took its aggregator's answer %v, want %v", tc.what, took, !tc.own)
		}
		delete(s.pending, k)
		clear(s.owner.agg.writers)
	}
}
