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

// At the cap an evicted entry is reused for the next new key, but never one
// still on the dirty list: gossip must read what the evicted key consumed.
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
	// (the sample of 8 is the whole shard), their entries reused.
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
	// A new key at the cap, once the list is drained, allocates its key
	// string and nothing else: the entry is a reused one.
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
