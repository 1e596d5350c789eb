package gossip

import (
	"fmt"
	"testing"

	"github.com/hashicorp/memberlist"
)

// netMembership is a failover net's member table for one node: what the
// node sends outside its rounds is kept for the net to deliver.
type netMembership struct {
	nopMembership
	n *failoverNet
}

func (m netMembership) SendBestEffort(to *memberlist.Node, p []byte) error {
	m.n.sent = append(m.n.sent, [2]any{to.Name, p})
	return nil
}

// withSends gives every node of the net a membership whose sends the net
// delivers (deliverSent), and makes the key aggregated once it has above
// users: every member speaks protoAgg.
func (n *failoverNet) withSends(above int) *failoverNet {
	for name, s := range n.nodes {
		s.ml.Store(&membershipRef{netMembership{nopMembership{memberlist.Node{Name: name}}, n}})
		s.mu.Lock()
		for m := range s.peers {
			s.peers[m] = memberlist.Node{Name: m, DMax: protoAgg}
		}
		s.cfg.AggregateAbove = above
		s.owner.ring = nil
		s.mu.Unlock()
	}
	return n
}

// deliverSent delivers what nodes sent outside their rounds, and what that
// makes them send, up to a bound.
func (n *failoverNet) deliverSent() {
	for i := 0; i < 10000 && len(n.sent) > 0; i++ {
		h := n.sent[0]
		n.sent = n.sent[1:]
		if to := h[0].(string); !n.dead[to] {
			n.nodes[to].receive(h[1].([]byte))
		}
	}
	n.sent = nil
}

// The replica of an aggregated key whose owner dies is charged what the
// others consumed once while the key's aggregators fail over to it: it
// counts their group counters (and is charged them), and its own
// aggregator, whose group's view now comes from the replica's answers,
// tells it the same consumption again. Before the fix the replica of 12
// nodes was charged it twice until memberlist declared the owner dead (300
// simulated nodes, 1% churn a minute: the replica ended 1,050 tokens over
// what the others admitted).
func TestReplicaOfAnAggregatedKeyIsChargedOnce(t *testing.T) {
	names := []string{"o", "r"}
	for i := range 10 {
		names = append(names, fmt.Sprintf("u%02d", i))
	}
	n := newFailoverNet(t, names...).withSends(4)
	n.key = n.keyOwnedBy("o", "r")
	live := names[1:]
	for range 100 {
		n.round("", n.names...)
	}
	r := n.nodes["r"]
	r.mu.Lock()
	u := r.owner.agg.hot[[2]string{"api", n.key}]
	agg := ""
	if u != nil {
		agg = u.heardFrom
	}
	r.mu.Unlock()
	if agg == "" || agg == "r" {
		t.Fatalf("the replica hears the key through aggregator %q: the test does not test an aggregated key", agg)
	}
	n.dead["o"] = true
	base := map[string]uint64{}
	usedAt := map[string]uint64{}
	for _, name := range live {
		base[name] = n.ledgers[name].charged["api/"+n.key]
		usedAt[name] = n.used[name]
	}
	groups := 0
	for range 200 {
		n.round("", live...)
		groups = max(groups, r.AggStats().GroupEntries)
	}
	if groups == 0 {
		t.Fatal("no aggregator failed over to the replica: the test does not test it")
	}
	mid := map[string]uint64{}
	for _, name := range live {
		mid[name] = n.ledgers[name].charged["api/"+n.key]
	}
	midUsed := map[string]uint64{}
	for _, name := range live {
		midUsed[name] = n.used[name]
	}
	n.bury("o")
	for range 40 {
		n.round("", live...)
	}
	for range 600 {
		n.round("")
	}
	// A node charged less than the others consumed admits more (what the
	// dead owner counted and had not told: a round or two of the others);
	// one charged more admits less, and no failure may make it so beyond a
	// few rounds of the others' consumption (an aggregator's answers in
	// flight when its group moved).
	slack := 3 * uint64(len(live)-1)
	for _, name := range live {
		var others, othersMid uint64
		for _, m := range live {
			if m != name {
				others += n.used[m] - usedAt[m]
				othersMid += midUsed[m] - usedAt[m]
			}
		}
		got := n.ledgers[name].charged["api/"+n.key] - base[name]
		gotMid := mid[name] - base[name]
		t.Logf("%s: charged %d since the owner died (%d while it was a member), the others consumed %d (%d)", name, got, gotMid, others, othersMid)
		if got > others+slack || got+slack < others {
			t.Errorf("%s charged %d since the owner died, the others consumed %d: want within %d", name, got, others, slack)
		}
		if gotMid > othersMid+slack {
			t.Errorf("%s charged %d while the dead owner was a member, the others consumed %d: want at most %d more", name, gotMid, othersMid, slack)
		}
	}
}
