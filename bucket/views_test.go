package bucket

import (
	"math"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// Owner's views live beside the keys (views.go): kept for a key of two
// users or more, dropped for one user or fewer, with the key's bucket,
// when stale, and never beyond the table's cap.
func TestOwnerViewsLiveBesideTheKeys(t *testing.T) {
	lim, _ := NewLimit(100, time.Second, 100)
	view := func(users uint64) OwnerView { return OwnerView{Users: users, Balance: math.NaN()} }
	newStore := func() *Store {
		s := NewStore(StoreConfig{TrackConsumption: true, Shards: 1, MaxKeys: 256, Seed: 1}) // at most minViews views
		s.SetFirstShare(10, time.Millisecond)
		return s
	}
	key := []byte("k")
	tests := []struct {
		name string
		run  func(s *Store) int // returns the views the store should hold
	}{
		{"two users: kept", func(s *Store) int {
			s.Take(1, key, lim, 1, t0)
			s.SetOwnerView(1, key, lim, view(2), t0)
			return 1
		}},
		{"one user: not kept", func(s *Store) int {
			s.Take(1, key, lim, 1, t0)
			s.SetOwnerView(1, key, lim, view(1), t0)
			return 0
		}},
		{"down to one user: dropped", func(s *Store) int {
			s.Take(1, key, lim, 1, t0)
			s.SetOwnerView(1, key, lim, view(5), t0)
			s.SetOwnerView(1, key, lim, view(1), t0)
			return 0
		}},
		{"owner lost: dropped", func(s *Store) int {
			s.Take(1, key, lim, 1, t0)
			s.SetOwnerView(1, key, lim, view(5), t0)
			s.SetOwnerView(1, key, lim, view(0), t0)
			return 0
		}},
		{"no bucket: nothing", func(s *Store) int {
			s.SetOwnerView(1, key, lim, view(5), t0)
			return 0
		}},
		{"windowed: nothing", func(s *Store) int {
			w := MustLimitOf(AlgoFixedWindow, 100, time.Second, 0)
			s.Take(1, key, w, 1, t0)
			s.SetOwnerView(1, key, w, view(5), t0)
			return 0
		}},
		{"the bucket reset: gone with it", func(s *Store) int {
			s.Take(1, key, lim, 1, t0)
			s.SetOwnerView(1, key, lim, view(5), t0)
			s.Reset(1, key, math.MaxUint64)
			return 0
		}},
		{"the bucket swept: gone with it", func(s *Store) int {
			s.Take(1, key, lim, 1, t0)
			s.SetOwnerView(1, key, lim, view(5), t0)
			s.DrainDirty(func(Consumption) {})
			s.Sweep(t0.Add(2 * time.Second))
			return 0
		}},
		{"stale: swept", func(s *Store) int {
			slow := MustLimit(1, time.Hour, 100)
			s.Charge(1, key, slow, 100, t0)
			s.SetOwnerView(1, key, slow, view(5), t0)
			s.DrainDirty(func(Consumption) {})
			s.Sweep(t0.Add(usersTTL + time.Second)) // the bucket is far from full
			if s.Len() != 1 {
				panic("the bucket was swept")
			}
			return 0
		}},
		{"fresh: kept by a sweep", func(s *Store) int {
			s.Take(1, key, lim, 100, t0)
			s.SetOwnerView(1, key, lim, view(5), t0)
			s.Sweep(t0.Add(100 * time.Millisecond))
			return 1
		}},
		{"capped", func(s *Store) int {
			for i := range 2 * minViews {
				k := []byte("key-" + strconv.Itoa(i))
				s.Take(1, k, lim, 1, t0)
				s.SetOwnerView(1, k, lim, view(5), t0)
			}
			return minViews
		}},
		{"capped, stale ones make room", func(s *Store) int {
			for i := range minViews {
				k := []byte("key-" + strconv.Itoa(i))
				s.Take(1, k, lim, 1, t0)
				s.SetOwnerView(1, k, lim, view(5), t0)
			}
			late := t0.Add(usersTTL + time.Second)
			s.Take(1, key, lim, 1, late)
			s.SetOwnerView(1, key, lim, view(5), late)
			return 1
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore()
			want := tt.run(s)
			if got := s.Views(); got != want {
				t.Fatalf("views held: %d, want %d", got, want)
			}
		})
	}
}

// A key touched (refused) and then admitted before the drain is reported
// once, with what it admitted since the last drain.
func TestTouchedThenAdmittedReportsTheAdmission(t *testing.T) {
	lim, _ := NewLimit(10, time.Second, 10)
	s := NewStore(StoreConfig{TrackConsumption: true, Seed: 1})
	key := []byte("k")
	for range 10 {
		s.Take(1, key, lim, 1, t0)
	}
	s.SetFirstShare(2, time.Millisecond) // a cluster: refusals touch
	s.DrainDirty(func(Consumption) {})
	later := t0.Add(10 * time.Millisecond)
	if r, _ := s.Take(1, key, lim, 1, later); r.Allowed {
		t.Fatal("admitted beyond the burst")
	}
	if c, _ := s.Local(1, key); c.Used != 10 || c.Prev != 10 {
		t.Fatalf("local after a touch: %+v, want used and prev 10", c)
	}
	if r, _ := s.Take(1, key, lim, 1, t0.Add(200*time.Millisecond)); !r.Allowed {
		t.Fatal("refused after a refill")
	}
	var got []Consumption
	s.DrainDirty(func(c Consumption) { got = append(got, c) })
	if len(got) != 1 || got[0].Used != 11 || got[0].Prev != 10 {
		t.Fatalf("drained %+v, want one entry of 10 → 11", got)
	}
}

// A decision allocates nothing on a key without a view in a shard that
// holds views, nor on a key with one.
func TestDecisionsBesideViewsAllocateNothing(t *testing.T) {
	lim, _ := NewLimit(1_000_000, time.Second, 1_000_000)
	s := NewStore(StoreConfig{TrackConsumption: true, Shards: 1, Seed: 3})
	s.SetFirstShare(10, time.Millisecond)
	viewed, plain := []byte("viewed"), []byte("plain")
	s.Take(1, viewed, lim, 1, t0)
	s.Take(1, plain, lim, 1, t0)
	s.SetOwnerView(1, viewed, lim, OwnerView{Users: 10, Balance: math.NaN()}, t0)
	now := t0.Add(time.Second)
	for _, key := range [][]byte{viewed, plain} {
		if a := testing.AllocsPerRun(1000, func() { s.Take(1, key, lim, 1, now) }); a != 0 {
			t.Fatalf("a take on %q allocated %v times", key, a)
		}
	}
}

// BenchmarkOwnerViewMemory reports the heap held per key with an owner's
// view, beyond the key itself (tracking=true of BenchmarkIdleKeyMemory):
// 100k keys, each with a view of ten users.
func BenchmarkOwnerViewMemory(b *testing.B) {
	const n = 100_000
	lim := MustLimit(1, time.Hour, 10)
	for range b.N {
		s := NewStore(StoreConfig{MaxKeys: 16 * n, TrackConsumption: true})
		key := []byte("user-0000000000")
		for i := range n {
			strconv.AppendInt(key[:5], int64(1_000_000_000+i), 10)
			s.Take(1, key, lim, 1, t0)
		}
		s.DrainDirty(func(Consumption) {})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			strconv.AppendInt(key[:5], int64(1_000_000_000+i), 10)
			s.SetOwnerView(1, key, lim, OwnerView{Users: 10, Balance: math.NaN()}, t0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if v := s.Views(); v != n {
			b.Fatalf("held %d views", v)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/view")
		runtime.KeepAlive(s)
	}
}

// With an owner's view the fair floor is shared by the key's users, its
// first token due at random in its first spacing, and only while the burst
// holds a token per user.
func TestViewFloorIsSharedByTheUsers(t *testing.T) {
	lim := MustLimit(100, time.Second, 100)
	s := NewStore(StoreConfig{TrackConsumption: true, Seed: 9})
	for _, tt := range []struct {
		users uint32
		ok    bool
	}{{2, true}, {100, true}, {101, false}, {1000, false}} {
		f, ok := s.viewFloor(view{users: tt.users}, &tracking{epoch: 1}, lim)
		if ok != tt.ok || (ok && (f.members != int64(tt.users) || f.depth != -float64(tt.users)-1)) {
			t.Errorf("%d users: floor %+v, %v; want members %d, depth %d, %v", tt.users, f, ok, tt.users, -int(tt.users)-1, tt.ok)
		}
	}
	lo, hi := 1.0, 0.0
	for e := range uint64(1000) {
		f, _ := s.viewFloor(view{users: 10}, &tracking{epoch: e}, lim)
		if f.phase <= 0 || f.phase > 1 {
			t.Fatalf("phase %v outside (0, 1]", f.phase)
		}
		lo, hi = min(lo, f.phase), max(hi, f.phase)
	}
	if lo > 0.05 || hi < 0.95 {
		t.Fatalf("phases of 1000 buckets from %.3f to %.3f, want them spread over (0, 1]", lo, hi)
	}
}
