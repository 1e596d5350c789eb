package gossip

import (
	"fmt"
	"slices"
	"testing"
)

// RingOwners answers as a ring built from the same members does, whatever
// their order, and when the owner goes its replica owns the key: the
// failover a daemon makes before memberlist declares the owner dead is to
// the member that will own the key after.
func TestRingOwnersAgreesWithTheRingAndFailsOverToTheReplica(t *testing.T) {
	tests := []struct {
		name    string
		members []string
	}{
		{"none", nil},
		{"one", []string{"a"}},
		{"two", []string{"b", "a"}},
		{"ten", []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ring := newOwnerRing(tt.members)
			reversed := slices.Clone(tt.members)
			slices.Reverse(reversed)
			for i := range 200 {
				key := fmt.Sprint("k", i)
				owner, replica := RingOwners(tt.members, "r", key)
				wo, wr := ring.owners("r", key)
				if owner != wo || replica != wr {
					t.Fatalf("%s: RingOwners %q/%q, ring %q/%q", key, owner, replica, wo, wr)
				}
				if o2, r2 := RingOwners(reversed, "r", key); o2 != owner || r2 != replica {
					t.Fatalf("%s: members in another order give %q/%q, want %q/%q", key, o2, r2, owner, replica)
				}
				if len(tt.members) < 2 {
					if replica != "" || (len(tt.members) == 0) != (owner == "") {
						t.Fatalf("%s: %q/%q with %d members", key, owner, replica, len(tt.members))
					}
					continue
				}
				rest := slices.DeleteFunc(slices.Clone(tt.members), func(m string) bool { return m == owner })
				if after, _ := RingOwners(rest, "r", key); after != replica {
					t.Fatalf("%s: owner %s gone, the key moves to %s, not its replica %s", key, owner, after, replica)
				}
			}
		})
	}
}

// RingChain names the owner and replica RingOwners names, and as third
// the owner of the ring without those two (the member the cluster's ring
// makes the owner once it declares both dead); rings of fewer than three
// members have no third.
func TestRingChainIsTheRingWithoutTheFirstTwo(t *testing.T) {
	tests := []struct {
		name    string
		members []string
	}{
		{"two", []string{"a", "b"}},
		{"three", []string{"c", "a", "b"}},
		{"four", []string{"a", "r1", "r2", "r3"}},
		{"ten", []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 200 {
				key := fmt.Sprint("k", i)
				owner, replica, third := RingChain(tt.members, "r", key)
				if wo, wr := RingOwners(tt.members, "r", key); owner != wo || replica != wr {
					t.Fatalf("%s: RingChain %q/%q, RingOwners %q/%q", key, owner, replica, wo, wr)
				}
				if len(tt.members) < 3 {
					if third != "" {
						t.Fatalf("%s: a third %q on a ring of %d", key, third, len(tt.members))
					}
					continue
				}
				rest := slices.DeleteFunc(slices.Clone(tt.members), func(m string) bool { return m == owner || m == replica })
				if want, _ := RingOwners(rest, "r", key); third != want {
					t.Fatalf("%s: third %q, the owner without %q and %q is %q", key, third, owner, replica, want)
				}
			}
		})
	}
}
