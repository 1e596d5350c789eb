package gossip

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// starveRound is a round of the failover net in which every node stalled
// (until[name] later than round) runs no round and handles nothing: what
// is sent to it waits in its inbox, in order, and it handles it all when
// its stall ends, before its next round. A starved process, as 50
// in-process daemons held to 0.12 of a core were.
func (n *failoverNet) starveRound(round int, until map[string]int, inbox map[string][][]byte, consumers ...string) {
	n.now = n.now.Add(n.nodes[n.names[0]].cfg.GossipInterval)
	for _, c := range consumers {
		n.used[c]++
		n.ledgers[c].add(Counter{Rule: "api", Key: n.key, Epoch: 1, Used: n.used[c], Prev: n.used[c] - 1})
	}
	var send func(to string, p []byte)
	flush := func() {
		for i := 0; i < 10000 && len(n.sent) > 0; i++ {
			h := n.sent[0]
			n.sent = n.sent[1:]
			send(h[1].(string), h[2].([]byte))
		}
	}
	send = func(to string, p []byte) {
		if until[to] > round {
			inbox[to] = append(inbox[to], p)
			return
		}
		n.nodes[to].receive(p)
		flush()
	}
	for _, name := range n.names {
		if until[name] <= round {
			q := inbox[name]
			inbox[name] = nil
			for _, p := range q {
				n.nodes[name].receive(p)
				flush()
			}
		}
	}
	for _, name := range n.names {
		if until[name] > round {
			continue
		}
		for _, o := range ownRound(n.nodes[name]) {
			for _, p := range o.packets {
				send(o.to.Name, p)
			}
		}
	}
}

// Stalls begin once every node has had its first answers: a node first
// heard late is a newcomer, told the key's debt, not its history
// (newcomerPrevLocked), which this net's unbounded ledgers make nothing.
//
// A starved replica handles what queued while it did not run at once: the
// owner's answers sent before its stall, and the counters the failed-over
// nodes sent it during the owner's. It judges whether the owner was late
// by when both were sent, not when they reached it, so its own
// aggregate's charges of those counters pair with the owner's answers that
// carry the same consumption (ownerchargeonce.go). Before the fix, ten
// bare syncers stalled at random (5-44 rounds, 4% of rounds) left the
// replica charged 95-313 tokens above what the others consumed (about
// 5,400 each): it admitted less.
func TestStarvedReplicaChargesOnce(t *testing.T) {
	names := []string{"o", "r", "x", "y", "z", "u", "v", "w", "p", "q"}
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			n := newFailoverNet(t, names...).withSends(1 << 30)
			n.key = n.keyOwnedBy("o", "r")
			rng := rand.New(rand.NewPCG(seed, 9))
			until, inbox := map[string]int{}, map[string][][]byte{}
			failovers := 0
			for i := range 600 {
				for _, w := range names {
					if i >= 50 && i < 500 && until[w] <= i && rng.Float64() < 0.04 {
						until[w] = i + 5 + rng.IntN(40)
					}
				}
				n.starveRound(i, until, inbox, names...)
				for _, name := range names {
					if f, ok := n.nodes[name].owner.failover[[2]string{"api", n.key}]; ok && f.at == n.nodes[name].owner.round {
						failovers++
					}
				}
			}
			t.Logf("%d failovers", failovers)
			if failovers < 10 {
				t.Fatalf("%d failovers: the test does not test a starved cluster's failovers", failovers)
			}
			for i := 600; i < 700; i++ {
				n.starveRound(i, until, inbox)
			}
			for _, c := range n.settledCharges(t) {
				if c.charged < c.others || c.charged > c.others+uint64(len(names)-1) {
					t.Errorf("%s charged %d for the %d tokens the others consumed; want %d to %d", c.name, c.charged, c.others, c.others, c.others+uint64(len(names)-1))
				}
			}
		})
	}
}
