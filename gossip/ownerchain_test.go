package gossip

import (
	"fmt"
	"slices"
	"testing"
)

// The third member of a key on a ring is the key's owner on the ring
// without its owner and replica: the member the cluster's ring makes the
// owner once it declares both dead (ownerchain.go).
func TestRingThirdIsTheNextOwner(t *testing.T) {
	for _, tt := range []struct {
		name    string
		members int
	}{
		{"one member", 1},
		{"two members", 2},
		{"three members", 3},
		{"ten members", 10},
		{"a hundred members", 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			names := make([]string, tt.members)
			for i := range names {
				names[i] = fmt.Sprintf("n%03d", i)
			}
			ring := newOwnerRing(names)
			for i := range 200 {
				key := fmt.Sprint("k", i)
				owner, replica := ring.owners("api", key)
				third := ring.third("api", key)
				if tt.members < 3 {
					if third != "" {
						t.Fatalf("%s: third %q on a ring of %d", key, third, tt.members)
					}
					continue
				}
				var rest []string
				for _, n := range names {
					if n != owner && n != replica {
						rest = append(rest, n)
					}
				}
				if want, _ := newOwnerRing(rest).owners("api", key); third != want {
					t.Fatalf("%s: third %q, want %q (the owner without %s and %s)", key, third, want, owner, replica)
				}
			}
		})
	}
}

// keyChainedBy returns a key whose owner, replica and third are the given
// members.
func (n *failoverNet) keyChainedBy(owner, replica, third string) string {
	ring := newOwnerRing(n.names)
	for i := range 100000 {
		k := fmt.Sprint("k", i)
		if o, r := ring.owners("api", k); o == owner && r == replica && ring.third("api", k) == third {
			return k
		}
	}
	n.t.Fatalf("no key chained by %s, %s, %s", owner, replica, third)
	return ""
}

// An owner and its replica that both crash before memberlist declares
// either dead leave the key to its third member: every live node's
// counters, unanswered by the replica for ownerFailover rounds, go to the
// third too, which counts them and answers; every live node is charged
// what the live others consumed since the replica died, once, while both
// dead are still members and after the ring drops them (the third is then
// the owner). Before, nobody counted the key until the ring dropped both:
// the live nodes were charged nothing of each other's consumption (300
// simulated nodes: 524% of the allowed), and the next owner's first
// answers then charged all of it at once. The replica dying long after
// the owner (gap) must not make the third count its failover again: it
// counts from where the replica did (chainCounter).
func TestOwnerAndReplicaDeadFailOverToTheThird(t *testing.T) {
	for _, tt := range []struct {
		name string
		gap  int // rounds between the owner's death and the replica's
	}{
		{"replica dies at once", 1},
		{"replica dies after the failover", ownerFailover + 8},
		{"replica dies much later", 150},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newFailoverNet(t, "o", "r", "t", "x", "y", "z")
			n.key = n.keyChainedBy("o", "r", "t")
			live := []string{"t", "x", "y", "z"}
			for range 20 {
				n.round("", n.names...)
			}
			n.dead["o"] = true
			for range tt.gap {
				n.round("", "r", "t", "x", "y", "z")
			}
			n.dead["r"] = true
			base, usedAt := n.tally(live)
			// What the replica counted in its last round before it died, and
			// told nobody, and the last rounds not answered yet.
			slack := 2 * uint64(len(live))
			check := func(when string) {
				t.Helper()
				n.assertChargedSince(t, when, "the replica died", live, base, usedAt, slack)
			}
			for range 2*ownerFailover + 60 {
				n.round("", live...)
			}
			check("both dead, still members")
			if f := n.nodes["x"].owner.failover[[2]string{"api", n.key}]; f.third != "t" {
				t.Fatalf("x's failover %+v: not to the third", f)
			}
			n.bury("o")
			for range 60 {
				n.round("", live...)
			}
			check("the owner buried")
			n.bury("r")
			for range 60 {
				n.round("", live...)
			}
			for range 200 {
				n.round("")
			}
			check("both buried, settled")
		})
	}
}

// A replica that only answers late, for longer than ownerFailover rounds
// while the owner is dead, sends the live nodes to the third; once its
// answers come again the chain ends (counters go back to the replica), and
// every live node is charged what the others consumed once: the replica
// counted all the third did (every counter sent to the third went to it
// too), and a node charges the larger of the two accounts, not their sum.
func TestLateReplicaEndsTheChainAndChargesOnce(t *testing.T) {
	for _, tt := range []struct {
		name string
		late int // rounds the replica's packets are held
	}{
		{"late just over the failover", ownerFailover + 6},
		{"late 80 rounds", 80},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newFailoverNet(t, "o", "r", "t", "x", "y", "z")
			n.key = n.keyChainedBy("o", "r", "t")
			live := []string{"r", "t", "x", "y", "z"}
			for range 20 {
				n.round("", n.names...)
			}
			n.dead["o"] = true
			base, usedAt := n.tally(live)
			for range ownerFailover + 10 { // failed over to the replica
				n.round("", live...)
			}
			for range tt.late {
				n.round("r", live...)
			}
			chained := 0
			for _, name := range live {
				if n.nodes[name].owner.failover[[2]string{"api", n.key}].third == "t" {
					chained++
				}
			}
			if chained == 0 {
				t.Fatal("no node went to the third: the test does not test the chain")
			}
			n.release()
			for range 40 {
				n.round("", live...)
			}
			for _, name := range live {
				if f := n.nodes[name].owner.failover[[2]string{"api", n.key}]; f.third != "" {
					t.Errorf("%s still sends to the third after the replica answered: %+v", name, f)
				}
			}
			for range 300 {
				n.round("")
			}
			slack := 2 * uint64(len(live))
			for _, name := range live {
				got, others := n.since(name, live, base, usedAt)
				t.Logf("%s charged %d since the owner died, the live others consumed %d", name, got, others)
				if got < others || got > others+slack {
					t.Errorf("%s charged %d since the owner died, the live others consumed %d: want %d to %d", name, got, others, others, others+slack)
				}
			}
		})
	}
}

// Only the third this node's own counters went to may answer for the key
// beside the owner and replica: the ring's third before this node found
// the replica silent, or any other member, is refused (a lying member
// gains nothing by answering for a key it does not count).
func TestThirdAnswersOnlyWhenChained(t *testing.T) {
	for _, tt := range []struct {
		name    string
		chained bool   // x's counters went to the third
		from    string // the answer's sender
		taken   bool
	}{
		{"the third, chained", true, "t", true},
		{"the third, not chained", false, "t", false},
		{"another member, chained", true, "y", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newFailoverNet(t, "o", "r", "t", "x", "y")
			n.key = n.keyChainedBy("o", "r", "t")
			s := n.nodes["x"]
			k := [2]string{"api", n.key}
			s.mu.Lock()
			s.refreshRingLocked()
			if tt.chained {
				s.owner.failover = map[[2]string]failover{k: {at: 1, owner: "o", third: "t"}}
			}
			s.mu.Unlock()
			w := &answerWriter{limit: 1300, sender: tt.from, at: uint64(n.now.UnixNano())}
			charges, err := s.receiveAnswer(w.with(ownerAnswer{rule: "api", key: n.key, gen: 7, others: 25, ackEpoch: 1}))
			if err != nil {
				t.Fatal(err)
			}
			var got uint64
			for _, c := range charges {
				got += c.tokens
			}
			if refused := s.ownerRefused.Load() == 1; refused == tt.taken || (got > 0) != tt.taken {
				t.Fatalf("charged %d, refused %v: want taken %v", got, refused, tt.taken)
			}
		})
	}
}

// A failover that ends after its hold, owner and replica both dead, sends
// the counters back to the dead owner; when the ring then drops the owner,
// the dead replica is the owner and the third its replica, and the live
// nodes fail over to the third again within ownerFailover rounds. Before,
// the third's answers (to the counters it had been sent) acknowledged them
// as the replica's and restarted the wait for the dead owner at each: the
// live nodes never failed over, and nobody counted the key until the ring
// dropped the replica too (300 simulated nodes: 1,448 admitted in the
// second before, 14 times the limit).
func TestOnlyTheOwnersAnswersEndTheWaitForIt(t *testing.T) {
	n := newFailoverNet(t, "o", "r", "t", "x", "y", "z")
	n.key = n.keyChainedBy("o", "r", "t")
	live := []string{"t", "x", "y", "z"}
	for range 20 {
		n.round("", n.names...)
	}
	n.dead["o"], n.dead["r"] = true, true
	k := [2]string{"api", n.key}
	for i := 0; n.nodes["x"].owner.failover[k].ended == 0; i++ {
		if i > ownerFailoverHold+4*ownerFailover {
			t.Fatalf("x's failover %+v never ended", n.nodes["x"].owner.failover[k])
		}
		n.round("", live...)
	}
	n.bury("o")
	base, usedAt := n.tally(live)
	for range 3 * ownerFailover {
		n.round("", live...)
	}
	for _, name := range live {
		got, others := n.since(name, live, base, usedAt)
		t.Logf("%s charged %d of the %d the live others consumed since the owner was dropped", name, got, others)
		// The last rounds are not answered yet.
		if slack := 2 * uint64(len(live)); got+slack < others || got > others+slack {
			t.Errorf("%s charged %d of the %d the live others consumed since the owner was dropped: want within %d", name, got, others, slack)
		}
	}
}

// An aggregated key whose owner and replica both die is counted by its
// third: the aggregators' group counters, unanswered by the replica, go on
// to the third, which counts them (and is charged them once, paired with
// its own aggregator's answers), and every live node is charged what the
// others consumed since the replica died, while both dead are members and
// after the ring drops them. Before, no group was counted until then, and
// every group admitted on its aggregator's own balance (300 simulated
// nodes: 17 times the limit a second).
func TestAggregatedKeyFailsOverToTheThird(t *testing.T) {
	n := newFailoverNet(t, aggChainNames()...).withSends(4)
	c := n.failAggChain(false)
	if c.groups == 0 {
		t.Fatal("no aggregator failed over to the third: the test does not test it")
	}
	c.settle()
}

// aggChainNames are the members of an aggregated chain's net (failAggChain):
// an owner o, a replica r, a third t and ten users, enough for the key to
// be aggregated.
func aggChainNames() []string {
	names := []string{"o", "r", "t"}
	for i := range 10 {
		names = append(names, fmt.Sprintf("u%02d", i))
	}
	return names
}

// aggChain is an aggregated key whose owner and replica died (failAggChain):
// what its live members were charged and had consumed when the replica
// died, and the most group entries its third held since.
type aggChain struct {
	n            *failoverNet
	live         []string
	base, usedAt map[string]uint64
	groups       int
}

// failAggChain picks a key of n (made of aggChainNames) chained by o, r, t
// whose third is one of its aggregators as ring.aggregatorsOf names them
// with the third kept in (thirdAggregates) or none of them; runs 100 rounds
// of everyone consuming, kills the owner, 30 rounds of the others, kills
// the replica, runs 200 rounds of the live members consuming, and checks
// them while both dead are still members.
func (n *failoverNet) failAggChain(thirdAggregates bool) *aggChain {
	n.t.Helper()
	names := n.names
	ring := newOwnerRing(names)
	for i := 0; n.key == ""; i++ {
		k := fmt.Sprint("k", i)
		o, r := ring.owners("api", k)
		_, _, aggs := ring.aggregatorsOf("api", k, false)
		if o == "o" && r == "r" && ring.third("api", k) == "t" && slices.Contains(aggs, "t") == thirdAggregates {
			n.key = k
		}
		if i > 100000 {
			if thirdAggregates {
				n.t.Fatal("no key chained by o, r, t whose third was one of its aggregators")
			}
			n.t.Fatal("no key chained by o, r, t whose third aggregates none of it")
		}
	}
	c := &aggChain{n: n, live: names[2:]}
	for range 100 {
		n.round("", n.names...)
	}
	n.dead["o"] = true
	for range 30 {
		n.round("", names[1:]...)
	}
	n.dead["r"] = true
	c.base, c.usedAt = n.tally(c.live)
	for range 200 {
		n.round("", c.live...)
		c.groups = max(c.groups, n.nodes["t"].AggStats().GroupEntries)
	}
	c.check("both dead, still members")
	return c
}

// check has every live member charged what the others consumed since the
// replica died. As TestReplicaOfAnAggregatedKeyIsChargedOnce: a few rounds
// of the others' consumption in flight when groups moved.
func (c *aggChain) check(when string) {
	t := c.n.t
	t.Helper()
	slack := 3 * uint64(len(c.live)-1)
	for _, name := range c.live {
		got, others := c.n.since(name, c.live, c.base, c.usedAt)
		t.Logf("%s: %s charged %d since the replica died, the others consumed %d", when, name, got, others)
		if got > others+slack || got+slack < others {
			t.Errorf("%s: %s charged %d since the replica died, the others consumed %d: want within %d", when, name, got, others, slack)
		}
	}
}

// settle has the ring drop the owner and the replica, runs 40 rounds of
// the live members consuming and 600 of nobody, and checks them again.
func (c *aggChain) settle() {
	c.n.t.Helper()
	c.n.bury("o")
	c.n.bury("r")
	for range 40 {
		c.n.round("", c.live...)
	}
	for range 600 {
		c.n.round("")
	}
	c.check("both buried, settled")
}
