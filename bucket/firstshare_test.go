package bucket

import (
	"math"
	"testing"
	"time"
)

// A new bucket in a cluster of ten is held to a tenth of its burst plus the
// rate since it was created, for the hold; then its balance alone decides.
// A cluster of one, a bucket learnt from a peer's balance and windowed
// algorithms are not held.
func TestNewBucketsAreHeldToTheirFirstShare(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	type take struct {
		at      time.Duration // after t0
		n       int           // takes of cost 1
		admit   int           // how many are admitted
		atLeast int           // if not 0, at least this many and at most admit
		minWait time.Duration // the last refusal's RetryAfter at least
	}
	tests := []struct {
		name    string
		members int
		algo    Algorithm
		adopt   bool // the bucket is first made by adopting a peer's balance of 99.5
		charge  int64
		takes   []take
	}{
		{name: "one member: the full burst", members: 1, takes: []take{{n: 120, admit: 100}}},
		{name: "ten members: a tenth of the burst and of the rate", members: 10, takes: []take{
			{n: 15, admit: 10, minWait: 10 * time.Millisecond},
			{at: 100 * time.Millisecond, n: 15, admit: 2, atLeast: 1}, // (100 + 10) / 10 rounded at random
			{at: 400 * time.Millisecond, n: 120, admit: 100}}},        // 88 or 89 left and 40 refilled, capped at the burst
		{name: "a peer's charge made it: held too", members: 10, charge: 5, takes: []take{{n: 15, admit: 10}}},
		{name: "learnt from a peer's balance: not held", members: 10, adopt: true, takes: []take{{n: 120, admit: 99}}},
		{name: "windowed: not held", members: 10, algo: AlgoFixedWindow, takes: []take{{n: 120, admit: 100}}},
		{name: "sliding window: not held, its counts intact", members: 10, algo: AlgoSlidingWindow, takes: []take{
			{n: 120, admit: 100}, {at: 500 * time.Millisecond, n: 10, admit: 0}}},
		{name: "GCRA: held", members: 10, algo: AlgoGCRA, takes: []take{{n: 15, admit: 10}}},
		{name: "leaky bucket: held", members: 10, algo: AlgoLeakyBucket, takes: []take{{n: 15, admit: 10}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := NewLimitOf(tt.algo, 100, time.Second, 100)
			if err != nil {
				t.Fatal(err)
			}
			s := NewStore(StoreConfig{TrackConsumption: true})
			s.SetFirstShare(tt.members, 400*time.Millisecond)
			key := []byte("k")
			if tt.adopt {
				s.Adopt(1, key, lim, 0, 99.5, t0)
			}
			if tt.charge > 0 {
				s.Charge(1, key, lim, tt.charge, t0)
			}
			for i, tk := range tt.takes {
				got := 0
				var last Result
				for range tk.n {
					r, err := s.Take(1, key, lim, 1, t0.Add(tk.at))
					if err != nil {
						t.Fatal(err)
					}
					if r.Allowed {
						got++
					} else {
						last = r
					}
				}
				if (tk.atLeast == 0 && got != tk.admit) || (tk.atLeast != 0 && (got < tk.atLeast || got > tk.admit)) {
					t.Fatalf("takes %d at +%s: admitted %d of %d, want %d", i, tk.at, got, tk.n, tk.admit)
				}
				if last.RetryAfter < tk.minWait {
					t.Fatalf("takes %d: a refusal said retry after %s, want at least %s", i, last.RetryAfter, tk.minWait)
				}
			}
		})
	}
}

// The check of the hold allocates nothing, whatever first contact counts
// (auto with its rule's crowd known, or not).
func TestFirstShareHoldAllocatesNothing(t *testing.T) {
	lim, _ := NewLimit(1_000_000, time.Second, 1_000_000)
	t0 := time.Unix(1_700_000_000, 0)
	for _, contact := range FirstContacts {
		for _, known := range []bool{false, true} {
			s := NewStore(StoreConfig{TrackConsumption: true, FirstContact: contact})
			s.SetFirstShare(10, time.Hour)
			if known {
				s.Take(1, []byte("before"), lim, 1, t0)
				s.SetOwnerView(1, []byte("before"), lim, OwnerView{Users: 3, Balance: math.NaN()}, t0)
			}
			key := []byte("k")
			s.Take(1, key, lim, 1, t0)
			if a := testing.AllocsPerRun(1000, func() { s.Take(1, key, lim, 1, t0) }); a != 0 {
				t.Fatalf("%v (crowd known: %v): a held take allocated %v times", contact, known, a)
			}
		}
	}
}
