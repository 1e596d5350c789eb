package gossip

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// binarySearch is the place of hash h on r as the ring found it before its
// index: the first point whose hash is at or after h.
func (r *ownerRing) binarySearch(h uint64) int {
	i, _ := slices.BinarySearchFunc(r.points, h, func(p ringPoint, h uint64) int { return cmp.Compare(p.hash, h) })
	return i
}

// ownersBySearch is owners as it was before the index: a binary search.
func (r *ownerRing) ownersBySearch(rule, key string) (owner, replica string) {
	if r.size() == 0 {
		return "", ""
	}
	i := r.binarySearch(keyHash(rule, key))
	first := r.points[i%len(r.points)].node
	owner = r.names[first]
	for j := 1; j < len(r.points) && len(r.names) > 1; j++ {
		if n := r.points[(i+j)%len(r.points)].node; n != first {
			return owner, r.names[n]
		}
	}
	return owner, ""
}

// The index finds every hash's place on the ring where the binary search
// does: random hashes, the points' own hashes and their neighbours, the
// ends of the hash space; rings of 1 to 3,000 members, built whole or
// updated for a join or a leave.
func TestOwnerRingIndexIsTheSearch(t *testing.T) {
	rnd := rand.New(rand.NewPCG(4, 5))
	for _, n := range []int{1, 2, 3, 7, 50, 333, 1000, 3000} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprint("m", i)
		}
		whole := newOwnerRing(names)
		rings := map[string]*ownerRing{"whole": whole, "joined": whole.with("joiner", true)}
		if n > 1 {
			rings["left"] = whole.with(names[n/2], false)
		}
		for how, r := range rings {
			hashes := []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 1, 1 << 63}
			for _, p := range r.points {
				hashes = append(hashes, p.hash, p.hash-1, p.hash+1)
			}
			for range 2000 {
				hashes = append(hashes, rnd.Uint64())
			}
			for _, h := range hashes {
				if got, want := r.search(h), r.binarySearch(h); got != want {
					t.Fatalf("%d members, %s: hash %#x at %d, the binary search says %d", n, how, h, got, want)
				}
			}
			for k := range 500 {
				key := fmt.Sprint("k", k)
				o, rep := r.owners("r", key)
				if wo, wr := r.ownersBySearch("r", key); o != wo || rep != wr {
					t.Fatalf("%d members, %s: %s owned by %s/%s, by the binary search %s/%s", n, how, key, o, rep, wo, wr)
				}
			}
		}
	}
}

// BenchmarkOwnerRingLookup measures a key's owner lookup (once per counter
// sent, and per aggregator found) as the membership grows: "index" as the
// ring looks up now, "search" by binary search over the points as before.
// Every iteration times 4,096 lookups of each size and way in turn, so all
// share the machine's state. Reported: ns per lookup of each, and the
// ratio against 50 members in the same run (x50).
//
//	go test -run '^$' -bench BenchmarkOwnerRingLookup ./gossip
func BenchmarkOwnerRingLookup(b *testing.B) {
	const batch = 4096
	keys := make([]string, 1<<14)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	type run struct {
		name   string
		n      int
		lookup func(rule, key string) (string, string)
		took   time.Duration
	}
	var runs []*run
	for _, n := range []int{50, 1000, 10000} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("n%05d", i)
		}
		r := newOwnerRing(names)
		runs = append(runs, &run{"index", n, r.owners, 0}, &run{"search", n, r.ownersBySearch, 0})
	}
	k := 0
	for b.Loop() {
		for _, r := range runs {
			began := time.Now()
			for range batch {
				_, _ = r.lookup("hot", keys[k&(len(keys)-1)])
				k++
			}
			r.took += time.Since(began)
		}
	}
	base := map[string]float64{}
	for _, r := range runs {
		ns := float64(r.took.Nanoseconds()) / float64(b.N*batch)
		b.ReportMetric(ns, fmt.Sprintf("ns/%s@%d", r.name, r.n))
		if r.n == 50 {
			base[r.name] = ns
		} else if base[r.name] > 0 {
			b.ReportMetric(ns/base[r.name], fmt.Sprintf("x50/%s@%d", r.name, r.n))
		}
	}
	b.ReportMetric(0, "ns/op")
}
