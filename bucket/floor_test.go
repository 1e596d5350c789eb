package bucket

import (
	"fmt"
	"testing"
	"time"
)

// A node whose own admissions of a key run below (1 − floorMargin) ×
// rate / members is admitted even when the shared balance, kept near zero
// by the others' consumption, refuses; a deep debt is not floored, and a
// node alone has no floor.
func TestFloorKeepsANodeNearItsShare(t *testing.T) {
	tests := []struct {
		name    string
		members int
		others  float64 // the others' demand per second, charged here when the balance has a token (always, with a start debt)
		start   float64 // debt charged at the start
		want    [2]int  // admitted over 10 s, at least and at most
	}{
		{name: "alone: the balance decides", members: 1, others: 1000, want: [2]int{0, 5}},
		{name: "three members: the floor", members: 3, others: 1000, want: floorOver10s(3)},
		{name: "ten members: the floor", members: 10, others: 1000, want: floorOver10s(10)},
		{name: "a deep debt is paid back first", members: 3, others: 100, start: 500, want: [2]int{0, 5}},
		{name: "no contention: the balance gives more", members: 3, others: 0, want: [2]int{1000, 1100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, _ := NewLimit(100, time.Second, 100)
			s := NewStore(StoreConfig{TrackConsumption: true})
			s.SetFirstShare(tt.members, 70*time.Millisecond)
			t0 := time.Unix(1_700_000_000, 0)
			key := []byte("k")
			s.Charge(1, key, lim, 100, t0) // the burst, spent by the others
			if tt.start > 0 {
				s.Charge(1, key, lim, int64(tt.start), t0)
			}
			got, owed := 0, 0.0
			for ms := 1; ms <= 10_000; ms++ { // a request every millisecond
				now := t0.Add(time.Duration(ms) * time.Millisecond)
				// The others win every race: they take a token as soon as the
				// balance has one, up to their demand.
				if owed = min(owed+tt.others/1000, 5); owed >= 1 {
					if b, _ := s.Balance(1, key, lim, now); b >= 1 || tt.start > 0 {
						s.Charge(1, key, lim, 1, now)
						owed--
					}
				}
				if r, _ := s.Take(1, key, lim, 1, now); r.Allowed {
					got++
				}
			}
			if got < tt.want[0] || got > tt.want[1] {
				t.Fatalf("admitted %d over 10 s, want %d to %d", got, tt.want[0], tt.want[1])
			}
		})
	}
}

// floorOver10s is what a floor of members admits over 10 s at 100/s after
// the test's 70 ms first-share hold: its rate for the time after the hold
// (the floor starts once the hold is over, with nothing: a token is due
// one spacing after the first refusal).
func floorOver10s(members int) [2]int {
	f := int((1 - floorMargin) * 100 * (10 - 0.070) / float64(members))
	return [2]int{f - 1, f + 1}
}

// BenchmarkClusterTake is a tracked Take (a daemon in a cluster) on one
// key with plenty of tokens, alone (the anchor: no hold, no floor) and
// with ten members (the hold over, the floor advanced on every admission).
func BenchmarkClusterTake(b *testing.B) {
	for _, members := range []int{1, 10} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			lim, _ := NewLimit(1_000_000_000, time.Second, 1_000_000_000)
			s := NewStore(StoreConfig{TrackConsumption: true})
			s.SetFirstShare(members, time.Millisecond)
			key := []byte("k")
			now := time.Unix(1_700_000_000, 0)
			s.Take(1, key, lim, 1, now)
			now = now.Add(time.Second)
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Nanosecond)
				s.Take(1, key, lim, 1, now)
			}
		})
	}
}

// Floors that stood aside (the owner counted more users than the burst
// has tokens: viewFloor) come back each at its own phase, spread over a
// spacing as they started, not all at once: left behind meanwhile, every
// node's floor came due while it stood aside, and when the count fell back
// to the burst every node admitted a token within a few milliseconds, in
// debt (100
// simulated nodes, limit 100/s burst 100, counted 101-103 users for 0.6 s
// then 100: 68 tokens in 0.1 s, 108% of the limit over 5 s).
func TestFloorsThatStoodAsideComeBackSpread(t *testing.T) {
	const nodes = 100
	lim, _ := NewLimit(100, time.Second, 100)
	t0 := time.Unix(1_700_000_000, 0)
	key := []byte("k")
	stores := make([]*Store, nodes)
	view := func(s *Store, users uint64, now time.Time) {
		// The cluster in debt: no share of a refill, the floor's depth
		// (a token a user) not reached.
		s.SetOwnerView(1, key, lim, OwnerView{Users: users, Balance: -20, Interval: 20 * time.Millisecond}, now)
	}
	for i := range stores {
		s := NewStore(StoreConfig{TrackConsumption: true, Seed: uint64(i + 1)})
		s.SetFirstShare(nodes, 50*time.Millisecond)
		s.Take(1, key, lim, 1, t0) // its first contact's share
		stores[i] = s
	}
	// A request every 20 ms on every node, the owner answering as often:
	// users as counted, over phases.
	admitted := func(users uint64, from, to time.Duration) int {
		n := 0
		for at := from; at < to; at += 20 * time.Millisecond {
			now := t0.Add(at)
			for _, s := range stores {
				view(s, users, now)
				if r, _ := s.Take(1, key, lim, 1, now); r.Allowed {
					n++
				}
			}
		}
		return n
	}
	admitted(nodes, 100*time.Millisecond, 300*time.Millisecond)             // the floors start
	aside := admitted(nodes+1, 300*time.Millisecond, 1800*time.Millisecond) // more users than tokens: no floor
	if aside != 0 {
		t.Fatalf("admitted %d while the floors stood aside, want 0 (the cluster is in debt)", aside)
	}
	// Back to 100 users: the floors admit a token per node per spacing
	// (1.05 s at 100 users), spread over it: about 10 in the first 100 ms
	// (10; left behind, 148: every floor, up to its slack).
	if got := admitted(nodes, 1800*time.Millisecond, 1900*time.Millisecond); got > 25 {
		t.Errorf("admitted %d in the first 100 ms after the floors came back, want about 10 (at most 25)", got)
	}
	if got := admitted(nodes, 1900*time.Millisecond, 2900*time.Millisecond); got > 100 {
		t.Errorf("admitted %d in the next second, want at most a token a node", got)
	}
}
