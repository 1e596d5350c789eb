package gossip

import (
	"slices"
	"testing"
)

// keyWalked returns a key whose owner, replica and third are o, r and t,
// its fourth member on the ring, and the members but those three.
func (n *failoverNet) keyWalked() (key, fourth string, live []string) {
	key = n.keyChainedBy("o", "r", "t")
	for _, m := range n.names {
		if m != "o" && m != "r" && m != "t" {
			live = append(live, m)
		}
	}
	return key, newOwnerRing(n.names).nth("api", key, 3), live
}

// A key's owner, replica and third all crashing before memberlist declares
// any of them dead leave the key to its fourth member: every live node's
// counters, unanswered by the third for ownerFailover rounds, go on to the
// fourth, which counts them and answers; every live node is charged what
// the live others consumed since the owner died, once, while the three
// dead are members and as the ring drops them one by one (the fourth is
// then the owner; the ring's dropping the owner carries the chain over,
// chainCarriedLocked). Before ownerchainwalk.go the chain stopped at the
// third: nobody counted the key until the ring dropped all three (the
// live nodes were charged nothing of each other's consumption; 300
// simulated nodes admitted 499-507% of the allowed). With one member
// below protoChainWalk the chain stops at the third, as that member's
// does.
func TestWalkPassesTheSilentThird(t *testing.T) {
	for _, tt := range []struct {
		name  string
		proto uint8 // every member's delegate protocol
		gap   int   // rounds between the replica's death and the third's
		walks bool  // the live nodes go on to the fourth
	}{
		{"third dies at once", protoChainWalk, 1, true},
		{"third dies after the chain reached it", protoChainWalk, 2*ownerFailover + 8, true},
		{"third dies much later", protoChainWalk, 150, true},
		{"a member below protoChainWalk: the chain stops at the third", protoChainAgg, ownerFailover + 8, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newFailoverNet(t, "o", "r", "t", "w", "x", "y", "z").speaking(tt.proto)
			var fourth string
			var live []string
			n.key, fourth, live = n.keyWalked()
			user := live[0] // a live node that is not the fourth
			if user == fourth {
				user = live[1]
			}
			for range 20 {
				n.round("", n.names...)
			}
			n.dead["o"] = true
			// From here only the live consume: what a dead member admitted
			// and told nobody is not known to anyone.
			base, usedAt := n.tally(live)
			n.round("", live...)
			n.dead["r"] = true
			for range tt.gap {
				n.round("", live...)
			}
			n.dead["t"] = true
			slack := 2 * uint64(len(live)) // the last rounds, not answered yet
			check := func(when string) {
				t.Helper()
				n.assertChargedSince(t, when, "the owner died", live, base, usedAt, slack)
			}
			for range 3*ownerFailover + 60 {
				n.round("", live...)
			}
			f := n.nodes[user].owner.failover[[2]string{"api", n.key}]
			if walked := f.third == fourth; walked != tt.walks {
				t.Fatalf("%s's failover %+v: walked to the fourth (%s) %v, want %v", user, f, fourth, walked, tt.walks)
			}
			if !tt.walks {
				return // nobody counts the key until the ring drops the three: the old chain's gap
			}
			check("three dead, still members")
			for _, dead := range []string{"o", "r", "t"} {
				n.bury(dead)
				n.round("", live...)
				// The ring's dropping the owner carries the chain over: the
				// counters still go to the fourth, now the ring's third,
				// with no wait for the (dead) new owner and replica.
				if f := n.nodes[user].owner.failover[[2]string{"api", n.key}]; dead == "o" && (f.third != fourth || f.owner != "r") {
					t.Errorf("%s's failover after the owner was buried %+v: want from r to %s", user, f, fourth)
				}
				for range 60 {
					n.round("", live...)
				}
				check(dead + " buried")
			}
			for range 200 {
				n.round("")
			}
			check("all three buried, settled")
		})
	}
}

// A node sends a key's counters to at most one member past its replica,
// and takes answers only from the member its own failover record names:
// once the walk moved on from the third, the third's answers are refused,
// the fourth's taken.
func TestWalkTakesAnswersOnlyFromItsMember(t *testing.T) {
	n := newFailoverNet(t, "o", "r", "t", "w", "x", "y", "z").speaking(protoChainWalk)
	var fourth string
	var live []string
	n.key, fourth, live = n.keyWalked()
	for range 20 {
		n.round("", n.names...)
	}
	n.dead["o"], n.dead["r"], n.dead["t"] = true, true, true
	for range 3*ownerFailover + 20 {
		n.round("", live...)
	}
	user := live[0]
	if user == fourth {
		user = live[1]
	}
	u := n.nodes[user]
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, sender := range n.names {
		want := sender == fourth || sender == "o" || sender == "r" // the owner and replica are taken elsewhere (owners)
		if sender == "o" || sender == "r" || sender == user {
			continue
		}
		if got := u.chainFromLocked("api", n.key, sender); got != want {
			t.Errorf("an answer of %s taken as the chain's: %v, want %v (the fourth: %s)", sender, got, want, fourth)
		}
	}
	to := u.ownerForLocked("api", n.key)
	if also := u.failoverAlsoLocked("api", n.key, to); to != fourth || also != [2]string{"o", "r"} {
		t.Errorf("%s sends its counters to %s and %v, want the fourth (%s), the owner and the replica", user, to, also, fourth)
	}
}

// The k-th member of a key's chain is the key's owner on the ring without
// the k members before it: the member the cluster's ring makes the owner
// once it declares them dead (TestRingThirdIsTheNextOwner for k = 2), so
// a walk that reached it goes on counting as the ring hands the key on.
// depth is nth's inverse, and neither allocates (receive paths call it).
func TestRingNthIsTheNextOwner(t *testing.T) {
	for _, tt := range []struct {
		name    string
		members int
	}{
		{"three members", 3},
		{"nine members", 9},
		{"a hundred members", 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			names := make([]string, tt.members)
			for i := range names {
				names[i] = "n" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			}
			ring := newOwnerRing(names)
			for i := range 100 {
				key := "k" + string(rune('a'+i%26)) + string(rune('a'+i/26))
				rest := names
				for k := range min(chainMax, tt.members) {
					want, _ := newOwnerRing(rest).owners("api", key)
					if got := ring.nth("api", key, k); got != want {
						t.Fatalf("%s: member %d %q, want %q (the owner without the %d before)", key, k, got, want, k)
					}
					if d := ring.depth("api", key, want); d != k {
						t.Fatalf("%s: depth of %q %d, want %d", key, want, d, k)
					}
					rest = slices.DeleteFunc(slices.Clone(rest), func(n string) bool { return n == want })
				}
				if got := ring.nth("api", key, min(chainMax, tt.members)); got != "" {
					t.Fatalf("%s: member past the chain %q", key, got)
				}
			}
			if allocs := testing.AllocsPerRun(100, func() { ring.depth("api", "k", names[0]) }); allocs != 0 {
				t.Errorf("depth allocates %.0f times", allocs)
			}
		})
	}
}
