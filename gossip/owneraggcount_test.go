package gossip

import (
	"fmt"
	"maps"
	"testing"
	"time"
)

// aggCountsByName is aggUsersLocked's count as it was made before the
// ring kept its names' hashes: each member's name hashed and counted into
// a map by aggregator, one at a time (thirdOut: the key's third none,
// ownerchainagg.go).
func aggCountsByName(r *ownerRing, rule, key string, thirdOut bool) (map[string]int, int) {
	owner, kh, aggs := r.aggregatorsOf(rule, key, thirdOut)
	k := len(aggs)
	n, most := map[string]int{}, 0
	for _, m := range r.names {
		if m != owner {
			a := aggs[aggSlot(kh, m, k)]
			n[a]++
			most = max(most, n[a])
		}
	}
	return n, most
}

// newAggCountSyncer is an owner-mode syncer (simulated, on a fixed clock)
// whose ring holds members n0 .. n(members-1).
func newAggCountSyncer(tb testing.TB, members int) *Syncer {
	tb.Helper()
	s, err := New(Config{NodeName: "n0", GossipMode: ModeOwner}, newMemLedger())
	if err != nil {
		tb.Fatal(err)
	}
	names := make([]string, members)
	for i := range names {
		names[i] = fmt.Sprint("n", i)
	}
	s.owner.ring = newOwnerRing(names)
	return s
}

// What an owner's ring assigns each aggregator of a key, counted from the
// ring's name hashes, is what counting every member's name gave: rings of
// 2 to 3,000 members, with the owner among them or not.
func TestAggUsersCountEveryMember(t *testing.T) {
	for _, members := range []int{2, 3, 17, 64, 65, 333, 3000} {
		s := newAggCountSyncer(t, members)
		for k := range 60 {
			key := fmt.Sprint("key-", k)
			s.mu.Lock()
			want, most := aggCountsByName(s.owner.ring, "r", key, s.aggThirdOutLocked())
			for name := range want {
				if got := s.aggUsersLocked("r", key, name); got != want[name] {
					t.Fatalf("%d members, %s: %q counted %d, want %d", members, key, name, got, want[name])
				}
			}
			c := s.owner.agg.counts[[2]string{"r", key}]
			s.mu.Unlock()
			if !maps.Equal(c.n, want) || c.most != most {
				t.Fatalf("%d members, %s: counts %v (most %d), want %v (most %d)", members, key, c.n, c.most, want, most)
			}
		}
	}
}

// BenchmarkAggUsersCount measures what an aggregator or owner pays the
// first time it counts a key's members per aggregator on a ring (once per
// key and ring: again after every membership change): "hashes" from the
// ring's name hashes as now, "names" hashing every name into a map as
// before. Every iteration counts 16 keys at each size and way in turn.
// Reported: µs per key, and the ratio of the old way's to the new's at each
// size (xnames).
//
//	go test -run '^$' -bench BenchmarkAggUsersCount ./gossip
func BenchmarkAggUsersCount(b *testing.B) {
	const batch = 16
	type run struct {
		n          int
		s          *Syncer
		hash, name time.Duration
	}
	var runs []*run
	for _, n := range []int{50, 1000, 10000} {
		runs = append(runs, &run{n: n, s: newAggCountSyncer(b, n)})
	}
	k := 0
	for b.Loop() {
		for _, r := range runs {
			began := time.Now()
			r.s.mu.Lock()
			for i := range batch {
				key := fmt.Sprint("key-", k+i)
				r.s.aggUsersLocked("r", key, "n1")
			}
			clear(r.s.owner.agg.counts)
			r.s.mu.Unlock()
			r.hash += time.Since(began)
			began = time.Now()
			for i := range batch {
				aggCountsByName(r.s.owner.ring, "r", fmt.Sprint("key-", k+i), false)
			}
			r.name += time.Since(began)
		}
		k += batch
	}
	for _, r := range runs {
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N*batch) }
		b.ReportMetric(per(r.hash), fmt.Sprintf("µs/key@%d", r.n))
		b.ReportMetric(per(r.name), fmt.Sprintf("µs/key-names@%d", r.n))
		if r.hash > 0 {
			b.ReportMetric(float64(r.name)/float64(r.hash), fmt.Sprintf("xnames@%d", r.n))
		}
	}
	b.ReportMetric(0, "ns/op")
}
