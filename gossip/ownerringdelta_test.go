package gossip

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// A ring updated member by member is the ring built whole from the same
// members: same names, same points in the same order, through random joins
// and leaves (names that sort first, last and between, members re-added,
// removals of absent members and additions of present ones).
func TestOwnerRingDeltaIsTheRebuiltRing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		start   int
		changes int
	}{
		{"from empty", 0, 60},
		{"small", 3, 200},
		{"hundreds", 300, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(1, uint64(tc.start)))
			members := map[string]bool{}
			pool := make([]string, tc.start+20)
			for i := range pool {
				pool[i] = fmt.Sprintf("m%d", rnd.IntN(10*len(pool))) // duplicates: re-adds
			}
			for _, n := range pool[:tc.start] {
				members[n] = true
			}
			list := func() []string {
				var l []string
				for n, in := range members {
					if in {
						l = append(l, n)
					}
				}
				return l
			}
			r := newOwnerRing(list())
			for i := range tc.changes {
				name, add := pool[rnd.IntN(len(pool))], rnd.IntN(2) == 0
				before := r
				r = r.with(name, add)
				if members[name] == add && r != before {
					t.Fatalf("change %d: %s (add %v) was a no-op but made a new ring", i, name, add)
				}
				members[name] = add
				want := newOwnerRing(list())
				if !reflect.DeepEqual(r.names, want.names) || !slices.Equal(r.points, want.points) ||
					!slices.Equal(r.nameHashes, want.nameHashes) || !slices.Equal(r.index, want.index) || r.shift != want.shift {
					t.Fatalf("change %d (%s, add %v): the updated ring differs from the rebuilt one (%d/%d names, %d/%d points)",
						i, name, add, len(r.names), len(want.names), len(r.points), len(want.points))
				}
			}
		})
	}
}

// A syncer's ring after joins and leaves, updated from its last ring
// (fewer changes than ringDeltaMax between rounds) or rebuilt (more), is
// the ring of its members: the same owners as a ring built from them.
func TestOwnerRingFollowsTheMembers(t *testing.T) {
	clock := func() time.Time { return time.Unix(1e9, 0) }
	node := func(i int) memberlist.Node {
		return memberlist.Node{Name: fmt.Sprint("n", i), Port: uint16(i), DMax: protoOwner}
	}
	s, err := New(Config{NodeName: "n0", GossipMode: ModeOwner}, newMemLedger())
	if err != nil {
		t.Fatal(err)
	}
	_, ev, err := s.Simulate(nopMembership{node(0)}, clock, 1)
	if err != nil {
		t.Fatal(err)
	}
	members := map[int]bool{}
	rnd := rand.New(rand.NewPCG(2, 3))
	for _, batch := range []int{50, 1, 3, ringDeltaMax, ringDeltaMax + 1, 2, 40, 1} {
		for range batch {
			i := rnd.IntN(80)
			n := node(i)
			if members[i] {
				ev.NotifyLeave(&n)
			} else {
				ev.NotifyJoin(&n)
			}
			members[i] = !members[i]
		}
		names := []string{"n0"}
		for i, in := range members {
			if in {
				names = append(names, node(i).Name)
			}
		}
		want := newOwnerRing(names)
		for k := range 100 {
			key := fmt.Sprint("k", k)
			wo, wr := want.owners("r", key)
			if o, r := s.OwnerOf("r", key); o != wo || r != wr {
				t.Fatalf("after %d changes: %s owned by %s/%s, the members' ring says %s/%s", batch, key, o, r, wo, wr)
			}
		}
	}
}

// BenchmarkOwnerRingBuild is what a membership change costs a node in
// owner mode at each cluster size: the ring rebuilt whole (whole), as
// before ownerringdelta.go and still beyond ringDeltaMax changes at once,
// against the last ring updated for one member joining (join) or going
// (leave).
//
//	go test -run '^$' -bench BenchmarkOwnerRingBuild ./gossip
func BenchmarkOwnerRingBuild(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("n%05d", i)
		}
		r := newOwnerRing(names)
		b.Run(fmt.Sprintf("members=%d/whole", n), func(b *testing.B) {
			for b.Loop() {
				newOwnerRing(names)
			}
		})
		b.Run(fmt.Sprintf("members=%d/join", n), func(b *testing.B) {
			for b.Loop() {
				r.with("n99999", true)
			}
		})
		b.Run(fmt.Sprintf("members=%d/leave", n), func(b *testing.B) {
			for b.Loop() {
				r.with(names[n/2], false)
			}
		})
	}
}
