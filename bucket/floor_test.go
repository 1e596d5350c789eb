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
