package bucket

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// A thousand nodes new to a key of burst 100, each calling once during its
// hold. With FirstContactShare each is admitted with probability 1/10 (its
// share rounded at random), so the cluster admits about one burst, not a
// thousand tokens; with FirstContactToken (the default) each admits one
// token, erring toward admitting. Either way a node asked again within its
// hold is not given another token.
func TestFirstShareBelowOneTokenIsRoundedAtRandom(t *testing.T) {
	lim, err := NewLimit(100, time.Second, 100)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	key := []byte("k")
	tests := []struct {
		name      string
		contact   FirstContact
		calls     int // per node, at the same instant
		low, high int // admitted by the thousand nodes
	}{
		{name: "share: one call each", contact: FirstContactShare, calls: 1, low: 70, high: 130},
		{name: "share: five calls each: no second chance", contact: FirstContactShare, calls: 5, low: 70, high: 130},
		{name: "token: one call each", contact: FirstContactToken, calls: 1, low: 1000, high: 1000},
		{name: "token: five calls each: one token each", contact: FirstContactToken, calls: 5, low: 1000, high: 1000},
		{name: "auto, rule not heard of: one call each", contact: FirstContactAuto, calls: 1, low: 70, high: 130},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admitted := 0
			for node := range 1000 {
				s := NewStore(StoreConfig{TrackConsumption: true, Seed: uint64(node + 1), FirstContact: tt.contact})
				s.SetFirstShare(1000, time.Second)
				got := 0
				for range tt.calls {
					if r, _ := s.Take(1, key, lim, 1, t0); r.Allowed {
						got++
					}
				}
				if got > 1 {
					t.Fatalf("node %d admitted %d during its hold, want at most 1", node, got)
				}
				admitted += got
			}
			if admitted < tt.low || admitted > tt.high {
				t.Fatalf("the cluster admitted %d, want %d to %d", admitted, tt.low, tt.high)
			}
		})
	}
}

// A host that calls a key now and then forgets it between calls (a bucket
// refused nothing refills and is swept), so it meets the key anew at every
// call. With FirstContactToken every such call is admitted; with
// FirstContactShare each is refused with probability 1 - burst/members,
// however far the key is from its limit; with FirstContactAuto (the
// default) each is admitted once the key's owner has said, at a first
// contact, that few nodes use it (here 5 of the 100 members, over the 1 s
// the rate takes to refill the burst).
func TestLightUsersAtFirstContact(t *testing.T) {
	lim, err := NewLimit(20, time.Second, 20)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	key := []byte("k")
	tests := []struct {
		contact   FirstContact
		owner     bool // the owner answers every call with 5 users
		low, high int  // of 200 calls
	}{
		{contact: FirstContactToken, low: 200, high: 200},
		{contact: FirstContactShare, low: 20, high: 60}, // 1 in 5 expected
		{contact: FirstContactShare, owner: true, low: 20, high: 60},
		{contact: FirstContactAuto, low: 20, high: 60}, // nothing heard: as share
		{contact: FirstContactAuto, owner: true, low: 199, high: 200},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v, owner answers %v", tt.contact, tt.owner), func(t *testing.T) {
			s := NewStore(StoreConfig{TrackConsumption: true, Seed: 7, FirstContact: tt.contact})
			s.SetFirstShare(100, 100*time.Millisecond)
			admitted := 0
			for call := range 200 {
				now := t0.Add(time.Duration(call) * 2 * time.Second) // the hold and a refill apart
				if r, _ := s.Take(1, key, lim, 1, now); r.Allowed {
					admitted++
				}
				if tt.owner {
					s.SetOwnerView(1, key, lim, OwnerView{Users: 5, Balance: 15}, now.Add(40*time.Millisecond))
				}
				s.DrainDirty(func(Consumption) {})
				s.Sweep(now.Add(time.Second + 500*time.Millisecond))
			}
			t.Logf("admitted %d of 200 calls", admitted)
			if admitted < tt.low || admitted > tt.high {
				t.Fatalf("admitted %d of 200 calls, want %d to %d", admitted, tt.low, tt.high)
			}
		})
	}
}

// A take held to its first share touches the key: DrainDirty reports it
// once, with nothing new admitted; so does a refusal after the hold, and
// nothing is touched in a cluster of one.
func TestRefusedTakesTouchTheKey(t *testing.T) {
	lim, _ := NewLimit(10, time.Second, 10)
	t0 := time.Unix(1_700_000_000, 0)
	key := []byte("k")
	drain := func(s *Store) []Consumption {
		var out []Consumption
		s.DrainDirty(func(c Consumption) { out = append(out, c) })
		return out
	}
	t.Run("held", func(t *testing.T) {
		s := NewStore(StoreConfig{TrackConsumption: true, Seed: 1})
		s.SetFirstShare(1000, time.Second)
		admitted := 0
		for range 3 {
			if r, _ := s.Take(1, key, lim, 1, t0); r.Allowed {
				admitted++
			}
		}
		got := drain(s)
		if len(got) != 1 || int(got[0].Used) != admitted {
			t.Fatalf("drained %+v after %d admitted, want one entry", got, admitted)
		}
		if admitted == 0 && got[0].Used != got[0].Prev {
			t.Fatalf("a touch reported consumption: %+v", got[0])
		}
		if got := drain(s); len(got) != 0 {
			t.Fatalf("drained again: %+v", got)
		}
	})
	t.Run("refused after the hold", func(t *testing.T) {
		s := NewStore(StoreConfig{TrackConsumption: true, Seed: 1})
		s.SetFirstShare(2, time.Millisecond)
		at := t0.Add(time.Second)
		s.Take(1, key, lim, 1, t0)
		for range 20 {
			s.Take(1, key, lim, 1, at)
		}
		drain(s)
		for range 5 {
			if r, _ := s.Take(1, key, lim, 1, at); r.Allowed {
				t.Fatal("admitted beyond the burst")
			}
		}
		got := drain(s)
		if len(got) != 1 || got[0].Used != got[0].Prev || got[0].Used != 11 {
			t.Fatalf("drained %+v, want one touch at 11", got)
		}
	})
	t.Run("alone", func(t *testing.T) {
		s := NewStore(StoreConfig{TrackConsumption: true, Seed: 1})
		for range 20 {
			s.Take(1, key, lim, 1, t0)
		}
		drain(s)
		s.Take(1, key, lim, 1, t0)
		if got := drain(s); len(got) != 0 {
			t.Fatalf("drained %+v in a cluster of one", got)
		}
	})
}

// With the owner's count of users, a node admits between two answers only
// its share of what the cluster may admit: (the balance at the answer +
// the rate since, at most the burst) / users, less what it admitted since,
// a share below one token rounded at random once
// per answer. Once the count is stale, or with one user, the balance alone
// decides; a lost owner (0 users) does not end a first-contact hold.
func TestTakesBeyondTheirShareAreRefused(t *testing.T) {
	lim, _ := NewLimit(100, time.Second, 100)
	t0 := time.Unix(1_700_000_000, 0)
	key := []byte("k")
	tests := []struct {
		name      string
		nodes     int // stores, each told the count, each taking
		users     uint64
		takes     int
		at        time.Duration // of the takes, after the answer
		low, high int           // admitted by all the nodes
	}{
		{name: "1000 users: about one burst over a thousand nodes", nodes: 1000, users: 1000, takes: 5, low: 70, high: 130},
		{name: "1000 users, half a second later: the refill too", nodes: 1000, users: 1000, takes: 5, at: 500 * time.Millisecond, low: 70, high: 130},
		{name: "ten users: a tenth", nodes: 1, users: 10, takes: 100, low: 9, high: 10},
		{name: "ten users, five seconds later: at most a tenth of the burst", nodes: 1, users: 10, takes: 200, at: 5 * time.Second, low: 10, high: 10},
		{name: "ten users, stale", nodes: 1, users: 10, takes: 200, at: 6 * time.Minute, low: 100, high: 100},
		{name: "the owner lost: the hold runs its time", nodes: 1, users: 0, takes: 200, low: 0, high: 1},
		{name: "one user", nodes: 1, users: 1, takes: 200, low: 99, high: 99}, // a peer charged one
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admitted := 0
			for node := range tt.nodes {
				s := NewStore(StoreConfig{TrackConsumption: true, Seed: uint64(node + 1)})
				s.SetFirstShare(1000, time.Hour)
				s.Charge(1, key, lim, 1, t0) // the bucket exists, held
				s.SetOwnerView(1, key, lim, OwnerView{Users: tt.users, Balance: math.NaN()}, t0)
				for range tt.takes {
					if r, _ := s.Take(1, key, lim, 1, t0.Add(tt.at)); r.Allowed {
						admitted++
					}
				}
			}
			if admitted < tt.low || admitted > tt.high {
				t.Fatalf("admitted %d, want %d to %d", admitted, tt.low, tt.high)
			}
		})
	}
}

// A take drawn against its share allocates nothing, nor does a touch.
func TestShareAllocatesNothing(t *testing.T) {
	lim, _ := NewLimit(1_000_000, time.Second, 1_000_000)
	s := NewStore(StoreConfig{TrackConsumption: true, Seed: 3})
	s.SetFirstShare(10, time.Hour)
	t0 := time.Unix(1_700_000_000, 0)
	key := []byte("k")
	s.Take(1, key, lim, 1, t0)
	s.SetOwnerView(1, key, lim, OwnerView{Users: 10_000_000, Balance: math.NaN()}, t0)
	if a := testing.AllocsPerRun(1000, func() { s.Take(1, key, lim, 1, t0) }); a != 0 {
		t.Fatalf("a take against a share allocated %v times", a)
	}
}

// BenchmarkShareTake: a take on a key with an owner's view (its share
// checked), against the anchor of a store alone (members=1) in the same
// run.
func BenchmarkShareTake(b *testing.B) {
	for _, tt := range []struct {
		name    string
		members int
		users   uint64
	}{{"members=1", 1, 0}, {"members=1000/view", 1000, 1000}} {
		b.Run(tt.name, func(b *testing.B) {
			lim, _ := NewLimit(1_000_000_000, time.Second, 1_000_000_000)
			s := NewStore(StoreConfig{TrackConsumption: true, Seed: 1})
			s.SetFirstShare(tt.members, time.Millisecond)
			key := []byte("k")
			now := time.Unix(1_700_000_000, 0)
			s.Take(1, key, lim, 1, now)
			if tt.users > 0 {
				s.SetOwnerView(1, key, lim, OwnerView{Users: tt.users, Balance: math.NaN()}, now)
			}
			now = now.Add(time.Second)
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Nanosecond)
				s.Take(1, key, lim, 1, now)
			}
		})
	}
}
