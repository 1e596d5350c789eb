package bucket

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

func drain(s *Store) map[string]Consumption {
	got := map[string]Consumption{}
	s.DrainDirty(func(c Consumption) { got[c.Key] = c })
	return got
}

func TestTrackingReportsLocalConsumptionOnce(t *testing.T) {
	s := NewStore(StoreConfig{TrackConsumption: true, EpochBase: 1000})
	lim := MustLimit(10, time.Second, 10)
	s.Take(1, []byte("a"), lim, 2, t0)
	s.Take(1, []byte("a"), lim, 3, t0)
	s.Charge(1, []byte("peer-only"), lim, 4, t0) // a peer's consumption is not ours to report
	s.Take(1, []byte("denied"), lim, 10, t0)
	s.Take(1, []byte("denied"), lim, 1, t0) // denied: not consumption

	got := drain(s)
	if len(got) != 2 {
		t.Fatalf("drained %v, want a and denied", got)
	}
	a := got["a"]
	if a.Used != 5 || a.Prev != 0 || a.Epoch <= 1000 || a.NS != 1 {
		t.Fatalf("a = %+v", a)
	}
	if got := drain(s); len(got) != 0 {
		t.Fatalf("second drain without new consumption: %v", got)
	}
	s.Take(1, []byte("a"), lim, 1, at(time.Second))
	s.Record(1, []byte("a"), lim, 2, at(time.Second))
	if again := drain(s)["a"]; again.Used != 8 || again.Prev != 5 || again.Epoch != a.Epoch {
		t.Fatalf("after more consumption: %+v", again)
	}
}

func TestEvictedAndRecreatedBucketGetsNewEpoch(t *testing.T) {
	s := NewStore(StoreConfig{TrackConsumption: true})
	lim := MustLimit(10, time.Second, 10)
	s.Take(1, []byte("k"), lim, 1, t0)
	first := drain(s)["k"]
	if n := s.Sweep(at(time.Second)); n != 1 {
		t.Fatalf("sweep evicted %d", n)
	}
	s.Take(1, []byte("k"), lim, 1, at(time.Second))
	second := drain(s)["k"]
	if second.Epoch <= first.Epoch || second.Used != 1 || second.Prev != 0 {
		t.Fatalf("recreated bucket %+v after %+v", second, first)
	}
}

func TestSweepKeepsUndrainedBuckets(t *testing.T) {
	s := NewStore(StoreConfig{TrackConsumption: true})
	lim := MustLimit(10, time.Second, 10)
	s.Take(1, []byte("k"), lim, 1, t0)
	if n := s.Sweep(at(time.Hour)); n != 0 {
		t.Fatal("swept a bucket whose consumption was not yet reported")
	}
	drain(s)
	if n := s.Sweep(at(time.Hour)); n != 1 {
		t.Fatal("did not sweep once reported")
	}
}

func TestAdoptOnlyFillsMissingBuckets(t *testing.T) {
	s := NewStore(StoreConfig{TrackConsumption: true})
	lim := MustLimit(4, time.Second, 4)
	if !s.Adopt(1, []byte("new"), lim, 0, -8, t0) {
		t.Fatal("Adopt refused a missing key")
	}
	if b, _ := s.Balance(1, []byte("new"), lim, t0); b != -8 {
		t.Fatalf("adopted balance %v, want -8", b)
	}
	s.Take(1, []byte("mine"), lim, 1, t0)
	if s.Adopt(1, []byte("mine"), lim, 0, 3.5, t0) {
		t.Fatal("Adopt raised a balance (3 → 3.5)")
	}
	if !s.Adopt(1, []byte("mine"), lim, 0, -8, t0) {
		t.Fatal("Adopt did not lower a balance to a peer's lower one")
	}
	if b, _ := s.Balance(1, []byte("mine"), lim, t0); b != -8 {
		t.Fatalf("after adopting -8: %v", b)
	}
	if s.Adopt(1, []byte("full"), lim, 0, 4, t0) {
		t.Fatal("Adopt created a bucket for a full balance")
	}
	var seen []string
	s.Snapshot(t0, func(Namespace, string) (Limit, bool) { return lim, true }, func(c Consumption, _ Limit, bal float64) bool {
		seen = append(seen, c.Key)
		return true
	})
	if len(seen) != 2 {
		t.Fatalf("snapshot listed %v, want the two non-full buckets", seen)
	}
}

// At the cap a new key takes an evicted key's place, but the evicted key's
// block (key and tracking) is never reused: gossip must read what the
// evicted key consumed, and the key strings it was handed stay as they were.
func TestEvictedEntriesReusedOnlyOnceDrained(t *testing.T) {
	s := NewStore(StoreConfig{TrackConsumption: true, MaxKeys: 8, Shards: 1})
	lim := MustLimit(1, time.Hour, 5)
	take := func(prefix string, n int, cost int64) {
		for i := range n {
			if _, err := s.Take(1, []byte(fmt.Sprint(prefix, i)), lim, cost, t0); err != nil {
				t.Fatal(err)
			}
		}
	}
	take("a", 8, 2)
	take("b", 8, 2) // evicts dirty a's: they must still drain as a's
	got := drain(s)
	for _, prefix := range []string{"a", "b"} {
		for i := range 8 {
			k := fmt.Sprint(prefix, i)
			if c, ok := got[k]; !ok || c.Used != 2 || c.Key != k {
				t.Fatalf("drain lost or garbled %s: %+v (drained %d keys)", k, c, len(got))
			}
		}
	}
	// The c's spend more, so the b's are nearer to full and evicted first
	// (the sample of 8 is the whole shard), their slots taken by the c's.
	take("c", 8, 3)
	got = drain(s)
	if len(got) != 8 || s.Len() != 8 {
		t.Fatalf("after reuse: drained %d keys (want the 8 c's), held %d", len(got), s.Len())
	}
	for i := range 8 {
		k := fmt.Sprint("c", i)
		if c := got[k]; c.Used != 3 || c.Prev != 0 || c.Key != k {
			t.Fatalf("reused entry carried state into %s: %+v", k, c)
		}
		if b, held := s.Balance(1, []byte(k), lim, t0); !held || b != 2 {
			t.Fatalf("%s: balance %v held %v, want 2 of a fresh bucket", k, b, held)
		}
	}
	// A new key at the cap, once the list is drained, allocates its block
	// (its key and tracking, together) and nothing else: the slot is the
	// evicted key's.
	buf := []byte("d-0000000000")
	n := int64(0)
	allocs := testing.AllocsPerRun(200, func() {
		n++
		s.Take(1, strconv.AppendInt(buf[:2], 1_000_000+n, 10), lim, 1, t0)
		s.DrainDirty(func(Consumption) {})
	})
	if allocs > 1 {
		t.Fatalf("a new key at the cap allocates %v times; want 1 (the key)", allocs)
	}
}

// A tracked key's block holds its bytes and its tracking side by side, at an
// offset that depends on the key's length: every length around the inline
// limit and the 8-byte padding drains, reports locally and snapshots as
// itself, evicted or held, and a key string drained stays as it was after
// its key is evicted and its slot taken by another.
func TestTrackedKeysOfEveryLengthDrainAsThemselves(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, maxShortKey, maxShortKey + 1, 17, 24, 25, DefaultMaxKeyLen} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			s := NewStore(StoreConfig{TrackConsumption: true, MaxKeys: 4, Shards: 1})
			lim := MustLimit(1, time.Hour, 5)
			keyOf := func(i int) []byte {
				k := []byte(fmt.Sprintf("%0*d", n, i))
				return k[len(k)-n:]
			}
			for i := range 4 {
				if _, err := s.Take(1, keyOf(i), lim, int64(i+1), t0); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 4 {
				c, ok := s.Local(1, keyOf(i))
				if !ok || c.Key != string(keyOf(i)) || c.Used != uint64(i+1) {
					t.Fatalf("Local(%q) = %+v, %v", keyOf(i), c, ok)
				}
			}
			var drained []Consumption
			s.DrainDirty(func(c Consumption) { drained = append(drained, c) })
			if len(drained) != 4 {
				t.Fatalf("drained %d keys, want 4", len(drained))
			}
			// Four more keys evict the first four, dirty: they still drain as themselves.
			for i := 4; i < 8; i++ {
				s.Take(1, keyOf(i), lim, 5, t0)
			}
			evictedDirty := map[string]uint64{}
			s.Take(1, keyOf(0), lim, 1, t0) // evicts one of the new keys, dirty
			s.DrainDirty(func(c Consumption) { evictedDirty[c.Key] = c.Used })
			for i := 4; i < 8; i++ {
				if used, ok := evictedDirty[string(keyOf(i))]; !ok || used != 5 {
					t.Fatalf("key %q drained %v (%v), want 5: %v", keyOf(i), used, ok, evictedDirty)
				}
			}
			for _, c := range drained { // key i was charged i+1
				if c.Key != string(keyOf(int(c.Used)-1)) {
					t.Fatalf("a drained key changed after its eviction: %q, used %d", c.Key, c.Used)
				}
			}
			seen := 0
			s.Snapshot(t0, func(Namespace, string) (Limit, bool) { return lim, true }, func(c Consumption, _ Limit, _ float64) bool {
				if len(c.Key) != n || c.Epoch == 0 {
					t.Fatalf("snapshot listed %+v", c)
				}
				seen++
				return true
			})
			if seen != s.Len() {
				t.Fatalf("snapshot listed %d of %d keys", seen, s.Len())
			}
		})
	}
}
