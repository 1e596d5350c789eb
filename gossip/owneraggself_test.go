package gossip

import (
	"fmt"
	"testing"
	"time"
)

// A user that becomes an aggregator of its key (another user's counters
// reach it) stays among its old aggregator's users for a users window
// after its last counter there; its own group counts it only after that,
// so the groups' counts, which the owner sums, hold it once. They held it
// twice for the window: 100 simulated nodes, burst 100, the owner counted
// 101-103 users for 0.6 s at the start of aggregation (each double one such
// an aggregator) and the fair floors stood aside meanwhile.
func TestUserThatBecomesAnAggregatorIsCountedOnce(t *testing.T) {
	const n = 20
	a, clock := newClockedAggSyncer(n)
	a.mu.Lock()
	r := a.owner.ring
	key, b, c := "", "", ""
	for i := range 1000 { // a key this node aggregates, whose own aggregator is another member
		k := fmt.Sprint("k", i)
		owner, replica := r.owners("api", k)
		if owner == a.self || replica == a.self || a.aggUsersLocked("api", k, a.self) == 0 {
			continue
		}
		agg := r.aggregatorFor("api", k, a.self, 0)
		if agg == "" || agg == a.self {
			continue
		}
		for _, m := range r.names {
			if m != owner && m != replica && m != a.self && m != agg && r.aggregatorFor("api", k, m, 0) == a.self {
				key, b, c = k, agg, m
				break
			}
		}
		if key != "" {
			break
		}
	}
	a.mu.Unlock()
	if key == "" {
		t.Fatal("no key this node aggregates whose own aggregator is another member")
	}
	bs, _ := newAggSyncer(b, n)
	bs.now, bs.born = a.now, a.born
	k := aggKey{"api", key, 0}

	var used uint64
	own := func() { // this node's counter: to its aggregator b, or into its own group once it has one
		t.Helper()
		used++
		a.mu.Lock()
		if a.owner.agg.hot == nil {
			a.owner.agg.hot = map[[2]string]*aggUse{{"api", key}: {used: a.sinceBorn()}}
		}
		pk := pendingKey{counterKey{a.self, "api", key}, 0, 1}
		p := &pendingCounter{c: Counter{Rule: "api", Key: key, Epoch: 1, Prev: used - 1, Used: used}, transmits: ownerResends}
		a.pending[pk] = p
		if !a.aggSendLocked(pk, p, a.sinceBorn(), -1000) {
			a.mu.Unlock()
			t.Fatal("its counter did not go through aggregation")
		}
		delete(a.pending, pk)
		w := a.owner.agg.writers[b]
		delete(a.owner.agg.writers, b)
		a.mu.Unlock()
		if w != nil {
			packets, _ := aggPackets(w, uint64(clock.UnixNano()), msgAggUsers)
			for _, p := range packets {
				bs.receiveAgg(msgAggUsers, p)
			}
		}
	}
	user := func(used uint64) { // user c's counter to this node, its aggregator
		w := newPacketWriter(c, 1400)
		w.add(c, Counter{Rule: "api", Key: key, Epoch: 1, Prev: used - 1, Used: used})
		packets, _ := aggPackets(w, uint64(clock.UnixNano()), msgAggUsers)
		for _, p := range packets {
			a.receiveAgg(msgAggUsers, p)
		}
	}
	reported := func(s *Syncer) uint64 { // the users its group counter tells the owner
		s.mu.Lock()
		defer s.mu.Unlock()
		g := s.owner.agg.groups[k]
		if g == nil || g.o != s.owner.mine[k] {
			return 0
		}
		return s.groupUsersLocked(k, g, s.sinceBorn())
	}

	own() // a user of b
	if got := reported(bs); got != 1 {
		t.Fatalf("b's group reports %d users after this node's counter, want 1", got)
	}
	worst := uint64(0)
	for step := 1; step <= 20; step++ { // every 100 ms for 2 s: c's counters reach this node, which aggregates
		*clock = clock.Add(100 * time.Millisecond)
		user(uint64(step))
		own()
		got := reported(a) + reported(bs)
		worst = max(worst, got)
		if got != 2 {
			t.Errorf("at %v: the groups report %d users (b's %d, this node's %d), want 2: this node and c",
				time.Duration(step)*100*time.Millisecond, got, reported(bs), reported(a))
		}
	}
	if worst > 2 {
		t.Errorf("the owner summed up to %d users of 2", worst)
	}
}
