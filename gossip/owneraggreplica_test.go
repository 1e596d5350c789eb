package gossip

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// netMembership is a failover net's member table for one node: what the
// node sends outside its rounds is kept for the net to deliver.
type netMembership struct {
	nopMembership
	n *failoverNet
}

func (m netMembership) SendBestEffort(to *memberlist.Node, p []byte) error {
	m.n.sent = append(m.n.sent, [3]any{m.self.Name, to.Name, p})
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
// makes them send, up to a bound; the slowed node's is held.
func (n *failoverNet) deliverSent() {
	for i := 0; i < 10000 && len(n.sent) > 0; i++ {
		h := n.sent[0]
		n.sent = n.sent[1:]
		switch from, to := h[0].(string), h[1].(string); {
		case n.dead[to]:
		case from == n.slowing:
			n.held = append(n.held, [2]any{to, h[2]})
		default:
			n.nodes[to].receive(h[2].([]byte))
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
	base, usedAt := n.tally(live)
	groups := 0
	for range 200 {
		n.round("", live...)
		groups = max(groups, r.AggStats().GroupEntries)
	}
	if groups == 0 {
		t.Fatal("no aggregator failed over to the replica: the test does not test it")
	}
	mid, midUsed := n.tally(live)
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

// An owner that is late (alive: its machine stalled) for longer than
// ownerFailover rounds makes the key's aggregators fail over to the
// replica. Their group counters reach the owner as well meanwhile (as a
// user's counters do), and only the owner's answers acknowledge them: the
// owner counts the groups' consumption of the failover too, every node is
// charged what the others consumed (the failed-over aggregators charge the
// larger of the owner's and the replica's accounts, ownerchargeonce.go),
// and the owner's first answer after the stall ends the failover. Before,
// a group counter went to the replica alone and the replica's answers
// acknowledged it: the owner never counted the failover's consumption, and
// every node was charged less than the others consumed (12 nodes, the
// owner 60 rounds late: 2,728-2,904 for 3,212, admitting up to 484 tokens
// more); an owner whose answers were lost (silent, not just late) heard no
// group again, and the failover lasted its whole hold (ownerFailoverHold
// rounds, about 10 s at 20 ms).
func TestLateOwnerCountsTheFailedOverGroups(t *testing.T) {
	const lateRounds = 150 // 3 s: longer than an active TTL, after which an owner answers no idle group
	for _, tt := range []struct {
		name    string
		deliver bool // the owner's packets arrive late (else they are lost)
	}{{"late", true}, {"silent", false}} {
		t.Run(tt.name, func(t *testing.T) {
			names := []string{"o", "r"}
			for i := range 10 {
				names = append(names, fmt.Sprintf("u%02d", i))
			}
			n := newFailoverNet(t, names...).withSends(4)
			n.key = n.keyOwnedBy("o", "r")
			k := [2]string{"api", n.key}
			for range 100 {
				n.round("", n.names...)
			}
			if n.nodes["o"].AggStats().Aggregated == 0 {
				t.Fatal("the key is not aggregated: the test does not test aggregators")
			}
			// routing lists the aggregators whose group counters go to
			// the replica now.
			routing := func() []string {
				var out []string
				for _, name := range n.names {
					s := n.nodes[name]
					s.mu.Lock()
					f, ok := s.owner.failover[k]
					groups := 0
					for gk, g := range s.owner.agg.groups {
						if gk.rule == "api" && gk.key == n.key && g.o == s.owner.mine[gk] {
							groups++
						}
					}
					s.mu.Unlock()
					if ok && f.ended == 0 && groups > 0 {
						out = append(out, name)
					}
				}
				return out
			}
			failedOver := 0
			for range lateRounds {
				n.round("o", n.names...)
				failedOver = max(failedOver, len(routing()))
			}
			if failedOver == 0 {
				t.Fatalf("no aggregator failed over with the owner %d rounds late: the test does not test it", lateRounds)
			}
			if tt.deliver {
				n.release()
			}
			n.held = nil
			for range 2 * ownerFailover {
				n.round("", n.names...)
			}
			if r := routing(); len(r) > 0 {
				t.Errorf("aggregators %v still send their groups to the replica %d rounds after the owner answers again (%d failed over)", r, 2*ownerFailover, failedOver)
			}
			for range 100 {
				n.round("", n.names...)
			}
			slack := 3 * uint64(len(n.names)-1)
			for _, c := range n.settledCharges(t) {
				if c.charged > c.others+slack || c.charged+slack < c.others {
					t.Errorf("%s charged %d for the %d tokens the others consumed; want within %d", c.name, c.charged, c.others, slack)
				}
			}
		})
	}
}

// A replica that hears a key through aggregator A charges, while A's group
// is counted in its aggregate, the larger of what it counts of the others
// and what A's answers tell, not their sum, and nothing of A's own group
// counters (A's answers tell it that group; the rest is its own): a lying
// A that tells less gains nothing, one that tells more is charged as
// before. A's answers while its group is not counted here are another
// account, charged whole; a pair idle for an active TTL ends.
func TestEchoPairChargesTheLarger(t *testing.T) {
	type step struct {
		op     string // "count" (from origin), "told" (an answer of A), "stale" (A's group not heard lately), "wait"
		origin string
		tokens uint64
		want   uint64
	}
	const a, b = "m001", "m002" // the replica's aggregator, another aggregator
	tests := []struct {
		name  string
		steps []step
	}{
		{"an honest aggregator echoes what the replica counted: charged once", []step{
			{op: "count", origin: b, tokens: 50, want: 50},
			{op: "told", tokens: 30, want: 0},
			{op: "told", tokens: 25, want: 5}, // its own group's 5
			{op: "count", origin: b, tokens: 10, want: 5},
			{op: "told", tokens: 10, want: 5}, // 65 in all: the others' 60 and the group's 5
		}},
		{"its aggregator's group counter charges nothing", []step{
			{op: "count", origin: a, tokens: 40, want: 0},
			{op: "told", tokens: 40, want: 40},
		}},
		{"an aggregator that tells less gains nothing", []step{
			{op: "count", origin: b, tokens: 100, want: 100},
			{op: "told", tokens: 1, want: 0},
			{op: "count", origin: b, tokens: 20, want: 20},
		}},
		{"an aggregator that tells more is charged", []step{
			{op: "count", origin: b, tokens: 10, want: 10},
			{op: "told", tokens: 300, want: 290},
		}},
		{"an aggregator whose group is not counted here tells another account", []step{
			{op: "count", origin: b, tokens: 50, want: 50},
			{op: "stale"},
			{op: "told", tokens: 30, want: 30},
		}},
		{"a pair idle for an active TTL ends", []step{
			{op: "count", origin: b, tokens: 50, want: 50},
			{op: "wait"},
			{op: "told", tokens: 30, want: 30},
			{op: "count", origin: b, tokens: 5, want: 5},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newClockedAggSyncer(20)
			s.mu.Lock()
			defer s.mu.Unlock()
			now := s.sinceBorn()
			k := echoedKey(t, s, a, b, now)
			o := s.aggregateFor(k)
			o.subs[aggGroupPrefix+a] = &ownerSub{agg: &aggSub{group: true, heard: now}}
			for i, st := range tt.steps {
				var got uint64
				switch st.op {
				case "count":
					got = s.countedChargeLocked(k, st.origin, st.tokens, now)
				case "told":
					s.owner.heard[k].slots[0].at = now
					got = s.echoChargeLocked(k, a, st.tokens, now)
				case "stale":
					o.subs[aggGroupPrefix+a].agg.heard = now - s.activeTTL() - time.Millisecond
					continue
				case "wait":
					now += s.activeTTL() + time.Millisecond
					s.owner.heard[k].slots[0].at = now
					o.subs[aggGroupPrefix+a].agg.heard = now
					continue
				}
				if got != st.want {
					t.Errorf("step %d (%s %d): charged %d, want %d", i, st.op, st.tokens, got, st.want)
				}
			}
		})
	}
}

// echoedKey returns a key s replicates whose owner is neither agg nor
// other, and has s hear it through aggregator agg at now (its hot use and
// heard slot). Caller holds s.mu.
func echoedKey(t *testing.T, s *Syncer, agg, other string, now time.Duration) aggKey {
	t.Helper()
	for i := range 10000 {
		key := fmt.Sprint("k", i)
		if owner, replica := s.owner.ring.owners("api", key); replica == s.self && owner != agg && owner != other {
			k := aggKey{"api", key, 0}
			s.owner.agg.hot = map[[2]string]*aggUse{{"api", key}: {used: now, heardFrom: agg}}
			s.owner.heard = map[aggKey]*heardKey{k: {slots: [2]heardSlot{{owner: agg, gen: 1, at: now}}}}
			return k
		}
	}
	t.Fatal("no key this node replicates")
	return aggKey{}
}
