package gossip

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/memberlist"
)

// speaking has every node of n see every other advertise delegate protocol
// v, and rebuild its ring.
func (n *failoverNet) speaking(v uint8) *failoverNet {
	for _, s := range n.nodes {
		s.mu.Lock()
		for m := range s.peers {
			s.peers[m] = memberlist.Node{Name: m, DMax: v}
		}
		s.owner.ring = nil
		s.mu.Unlock()
	}
	return n
}

// Once every member speaks protoChainAgg no key's third member is one of
// its aggregators, on the user's side (aggregatorForLocked) as on the
// owner's (aggUsersLocked); while one member speaks only protoAgg every
// member names aggregators as it does (the third may be one), so that
// users and owners agree. Before ownerchainagg.go the third was at one of
// the aggregation points of 10-16% of keys at 100-300 members.
func TestThirdAggregatesNoneOfItsKeys(t *testing.T) {
	for _, tt := range []struct {
		name     string
		members  int
		old      bool // one member speaks only protoAgg
		thirdOut bool // want the third out of every key's aggregators
	}{
		{"13 members", 13, false, true},
		{"100 members", 100, false, true},
		{"300 members", 300, false, true},
		{"100 members, one older", 100, true, false},
		{"300 members, one older", 300, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newAggSyncer("m000", tt.members)
			s.mu.Lock()
			defer s.mu.Unlock()
			for m := range s.peers {
				s.peers[m] = memberlist.Node{Name: m, DMax: protoChainAgg}
			}
			if tt.old {
				s.peers["m001"] = memberlist.Node{Name: "m001", DMax: protoAgg}
			}
			s.owner.ring = nil
			s.refreshRingLocked()
			r := s.owner.ring
			const keys = 500
			collide := 0
			for i := range keys {
				key := fmt.Sprint("k", i)
				third := r.third("api", key)
				_, _, before := r.aggregatorsOf("api", key, false)
				if !slices.Contains(before, third) {
					continue
				}
				collide++
				users := s.aggUsersLocked("api", key, third)
				named := 0
				for _, m := range r.names {
					if r.aggregatorOf("api", key, m, 0, s.aggThirdOutLocked()) == third {
						named++
					}
				}
				if mine := s.aggregatorForLocked("api", key, 0); tt.thirdOut && (users != 0 || named != 0 || mine == third) {
					t.Errorf("key %s: its third %s aggregates %d members (%d name it; m000's aggregator %s)", key, third, users, named, mine)
				} else if !tt.thirdOut && (users == 0 || named == 0) {
					t.Errorf("key %s: its third %s aggregates %d members (%d name it) with an older member: want the older members' assignment", key, third, users, named)
				}
			}
			t.Logf("%d members: the third at an aggregation point of %d of %d keys before (%.1f%%)", tt.members, collide, keys, 100*float64(collide)/keys)
			if collide == 0 {
				t.Fatal("no key whose third was at one of its aggregation points: the test tests nothing")
			}
		})
	}
}

// An aggregated key whose third member was at one of its aggregation
// points is counted by that third when its owner and replica both die, as
// any key is (TestAggregatedKeyFailsOverToTheThird): every live node is
// charged what the others consumed since the replica died, while both dead
// are members and after the ring drops them. Before, the third held its
// group's aggregate under the key and refused the failed-over group
// counters: nobody counted the key until the ring dropped both, and every
// group admitted on its aggregator's own balance (300 simulated nodes:
// 17 times the limit a second; here every live node was charged 10-30%
// of the others' 2,000 tokens while both dead were members, and 29-84% of
// their 2,400 once the ring had dropped both and settled).
func TestThirdOfAnAggregatedKeyCounts(t *testing.T) {
	n := newFailoverNet(t, aggChainNames()...).withSends(4).speaking(protoChainAgg)
	c := n.failAggChain(true)
	if c.groups == 0 {
		t.Error("no aggregator failed over to the third")
	}
	c.settle()
}

// RingAggregator names the aggregator a node of that ring names
// (aggregatorForLocked) on either side of protoChainAgg, and with the
// third out it never names the key's owner, replica or third.
func TestRingAggregatorIsTheNodesAggregator(t *testing.T) {
	names := []string{"a", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"}
	for _, tt := range []struct {
		name  string
		speak uint8
	}{
		{"every member protoChainAgg", protoChainAgg},
		{"every member protoAgg", protoAgg},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newFailoverNet(t, names...).speaking(tt.speak)
			s := n.nodes["a"]
			for i := range 300 {
				key := fmt.Sprint("k", i)
				got := RingAggregator(names, "r", key, "a", tt.speak >= protoChainAgg)
				s.mu.Lock()
				s.refreshRingLocked()
				want := s.aggregatorForLocked("r", key, 0)
				s.mu.Unlock()
				if got != want {
					t.Fatalf("%s: RingAggregator %q, the node names %q", key, got, want)
				}
				if o, r, th := RingChain(names, "r", key); tt.speak >= protoChainAgg && (got == o || got == r || got == th) {
					t.Fatalf("%s: the aggregator %q is the owner, replica or third (%q %q %q)", key, got, o, r, th)
				}
			}
		})
	}
}
