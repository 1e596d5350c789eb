package gossip

import (
	"fmt"
	"testing"
	"time"
)

// failoverNet is a few bare owner-mode syncers on one fake clock: the test
// runs their rounds in turn and delivers their packets at once, except the
// packets of the node it slows, which it holds back and delivers late.
type failoverNet struct {
	t       *testing.T
	names   []string
	nodes   map[string]*Syncer
	ledgers map[string]*memLedger
	now     time.Time
	key     string
	used    map[string]uint64
	held    [][2]any        // [to, packet] of the slowed node, in order
	dead    map[string]bool // runs no round, hears nothing
	// sent holds [to, packet] that nodes sent outside their rounds (an
	// aggregator's answers and forwards as packets arrive), when the net
	// gives its nodes a membership (withSends); delivered after each
	// delivery.
	sent    [][3]any
	slowing string // the node slowed in this round: what it sends outside rounds is held too
}

func newFailoverNet(t *testing.T, names ...string) *failoverNet {
	n := &failoverNet{t: t, names: names, nodes: map[string]*Syncer{}, ledgers: map[string]*memLedger{},
		now: time.Unix(1_700_000_000, 0), used: map[string]uint64{}, dead: map[string]bool{}}
	born := n.now
	for _, self := range names {
		var others []string
		for _, m := range names {
			if m != self {
				others = append(others, m)
			}
		}
		s, l := newOwnerSyncer(self, others...)
		s.now, s.born = func() time.Time { return n.now }, born
		n.nodes[self], n.ledgers[self] = s, l
	}
	return n
}

// keyOwnedBy returns a key whose owner is owner and replica replica.
func (n *failoverNet) keyOwnedBy(owner, replica string) string {
	ring := newOwnerRing(n.names)
	for i := range 10000 {
		k := fmt.Sprint("k", i)
		if o, r := ring.owners("api", k); o == owner && r == replica {
			return k
		}
	}
	n.t.Fatalf("no key owned by %s with replica %s", owner, replica)
	return ""
}

// round advances the clock one interval; every node in consumers takes a
// token of the key, then every node runs its owner round, its packets
// delivered at once unless it is slow.
func (n *failoverNet) round(slow string, consumers ...string) {
	n.now = n.now.Add(20 * time.Millisecond)
	n.slowing = slow
	for _, c := range consumers {
		n.used[c]++
		n.ledgers[c].add(Counter{Rule: "api", Key: n.key, Epoch: 1, Used: n.used[c], Prev: n.used[c] - 1})
	}
	for _, name := range n.names {
		if n.dead[name] {
			continue
		}
		for _, o := range ownRound(n.nodes[name]) {
			for _, p := range o.packets {
				switch {
				case n.dead[o.to.Name]:
					continue
				case name == slow:
					n.held = append(n.held, [2]any{o.to.Name, p})
					continue
				}
				n.nodes[o.to.Name].receive(p)
				n.deliverSent()
			}
		}
	}
}

// ownRound queues what s's ledger admitted since its last round and runs
// its owner round, returning the packets it sends.
func ownRound(s *Syncer) []ownerOut {
	var own []Counter
	s.ledger.Drain(func(c Counter) { own = append(own, c) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range own {
		s.queueLocked(s.self, c, ownTransmits(c, ownerResends))
	}
	return s.ownerRoundLocked()
}

// release delivers the slowed node's held packets, late.
func (n *failoverNet) release() {
	held := n.held
	n.held, n.slowing = nil, ""
	for _, h := range held {
		n.nodes[h[0].(string)].receive(h[1].([]byte))
		n.deliverSent()
	}
}

// An owner that is alive but answers late, for longer than ownerFailover
// rounds, makes its contributors fail over to the replica; once its answers
// come, every node is still charged all that every other node consumed
// (none is charged less: a node charged less admits above the cluster's
// limit). Before the fix, the contributors stayed with the replica for
// ownerFailoverHold rounds and the owner never heard what they consumed
// there: the key's accounting was split in two.
func TestLateOwnerFailoverKeepsOneAccount(t *testing.T) {
	for _, tt := range []struct {
		name       string
		late       int // rounds the owner's packets are held
		consumeFor int // rounds the nodes consume
	}{
		{"late-40-rounds", 40, 100},
		{"late-100-rounds", 100, 150},
		{"late-just-over-failover", ownerFailover + 4, 60},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newFailoverNet(t, "o", "r", "x", "y", "z")
			n.key = n.keyOwnedBy("o", "r")
			all := n.names
			for i := range tt.consumeFor {
				slow := ""
				if i >= 10 && i < 10+tt.late {
					slow = "o"
				}
				if i == 10+tt.late {
					n.release()
				}
				n.round(slow, all...)
			}
			n.release()
			failedOver := 0
			for _, name := range n.names {
				if _, ok := n.nodes[name].owner.failover[[2]string{"api", n.key}]; ok {
					failedOver++
				}
			}
			if failedOver == 0 {
				t.Fatalf("no node failed over with the owner %d rounds late: the test does not test the failover", tt.late)
			}
			for _, c := range n.settledCharges(t) {
				name, got, others := c.name, c.charged, c.others
				if got < others {
					t.Errorf("%s charged %d of the %d tokens the others consumed: it admits %d above the limit", name, got, others, others-got)
				}
				// Over-charge (admitting less) is bounded by what the
				// others consumed while the owner was late.
				if slack := uint64(tt.late * (len(n.names) - 1)); got > others+slack {
					t.Errorf("%s charged %d, more than the %d the others consumed plus the late rounds' %d", name, got, others, slack)
				}
			}
		})
	}
}

// nodeCharge is what a node was charged of the failover net's key and what
// the others consumed of it.
type nodeCharge struct {
	name            string
	charged, others uint64
}

// settledCharges runs rounds until every answer, repeat and heard message
// is delivered, then returns each node's charge of n.key against what the
// others consumed, logging both.
func (n *failoverNet) settledCharges(t *testing.T) []nodeCharge {
	t.Helper()
	for range 600 {
		n.round("")
	}
	var total uint64
	for _, u := range n.used {
		total += u
	}
	out := make([]nodeCharge, 0, len(n.names))
	for _, name := range n.names {
		c := nodeCharge{name, n.ledgers[name].charged["api/"+n.key], total - n.used[name]}
		t.Logf("%s: charged %d, others consumed %d", c.name, c.charged, c.others)
		out = append(out, c)
	}
	return out
}

// bury makes every live node see name leave (memberlist declared it dead).
func (n *failoverNet) bury(name string) {
	for other, s := range n.nodes {
		if other == name {
			continue
		}
		s.mu.Lock()
		delete(s.peers, name)
		s.ownerMemberLocked(name)
		s.members.Store(int64(len(s.peers) + 1))
		s.mu.Unlock()
	}
}

// tally returns what each of names has been charged for n.key and has
// consumed so far.
func (n *failoverNet) tally(names []string) (charged, used map[string]uint64) {
	charged, used = map[string]uint64{}, map[string]uint64{}
	for _, name := range names {
		charged[name] = n.ledgers[name].charged["api/"+n.key]
		used[name] = n.used[name]
	}
	return charged, used
}

// since returns what name has been charged for n.key since base and what
// the others of live have consumed since usedAt (base and usedAt as tally
// returned them).
func (n *failoverNet) since(name string, live []string, base, usedAt map[string]uint64) (got, others uint64) {
	for _, m := range live {
		if m != name {
			others += n.used[m] - usedAt[m]
		}
	}
	return n.ledgers[name].charged["api/"+n.key] - base[name], others
}

// assertChargedSince asserts that every node of live was charged, since
// base, what the others of live consumed since usedAt (see since), within
// slack tokens; event names what happened at base (as in "since the owner
// died") and when the moment of the check.
func (n *failoverNet) assertChargedSince(t *testing.T, when, event string, live []string, base, usedAt map[string]uint64, slack uint64) {
	t.Helper()
	for _, name := range live {
		got, others := n.since(name, live, base, usedAt)
		t.Logf("%s: %s charged %d since %s, the live others consumed %d", when, name, got, event, others)
		if got+slack < others || got > others+slack {
			t.Errorf("%s: %s charged %d since %s, the live others consumed %d: want within %d", when, name, got, event, others, slack)
		}
	}
}

// An owner that dies (kill -9: it sends and hears nothing) is still failed
// over from within ownerFailover rounds: its contributors send to the
// replica, which answers them, and every live node is charged what the
// others consumed after the owner's last answers, both while the dead owner
// is still a member (before memberlist's failure detection) and after the
// ring drops it.
func TestDeadOwnerIsFailedOver(t *testing.T) {
	n := newFailoverNet(t, "o", "r", "x", "y", "z")
	n.key = n.keyOwnedBy("o", "r")
	live := []string{"r", "x", "y", "z"}
	const before = 20
	for range before {
		n.round("", n.names...)
	}
	n.dead["o"] = true
	// What each live node was charged and the others had consumed when the
	// owner died: an answer covers at most the round before.
	base, usedAt := n.tally(live)
	check := func(when string, slack uint64) {
		t.Helper()
		for _, name := range live {
			got, others := n.since(name, live, base, usedAt)
			t.Logf("%s: %s: charged %d since the owner died, the live others consumed %d", when, name, got, others)
			if got+slack < others {
				t.Errorf("%s: %s charged %d since the owner died, the live others consumed %d (slack %d)", when, name, got, others, slack)
			}
		}
	}
	for range ownerFailover + 40 {
		n.round("", live...)
	}
	// Still a member: what the last rounds consumed may not be answered yet.
	check("owner dead, still a member", 2*uint64(len(live)-1)+uint64(len(live)))
	n.bury("o")
	for range 40 {
		n.round("", live...)
	}
	for range 600 {
		n.round("")
	}
	check("owner gone from the ring, settled", uint64(len(live)-1)*2)
}

// Only the owner's answers acknowledge a node's counters while the key is
// failed over (and lately was); the owner's ends the failover; with no
// failover the replica's acknowledge as before (the old owner's late
// answers after a membership change).
func TestOnlyTheOwnerAcknowledgesAFailedOverKey(t *testing.T) {
	for _, tt := range []struct {
		name     string
		failover *failover // nil: none
		from     string    // "owner" or "replica"
		wantPrev uint64    // the pending counter's prev after the answer
		wantEnd  bool      // the failover ended
	}{
		{"no failover, owner", nil, "owner", 6, false},
		{"no failover, replica", nil, "replica", 6, false},
		{"failed over, replica", &failover{at: 1}, "replica", 2, false},
		{"failed over, owner", &failover{at: 1}, "owner", 6, true},
		{"failover ended lately, replica", &failover{at: 1, ended: 3}, "replica", 2, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newOwnerSyncer("me", "n1", "n2", "n3")
			s.mu.Lock()
			defer s.mu.Unlock()
			s.refreshRingLocked()
			owner, replica := s.owner.ring.owners("api", "k")
			if owner == "me" || replica == "me" {
				t.Skip("this ring makes me the owner or replica of k")
			}
			s.owner.round = 5
			k := [2]string{"api", "k"}
			if tt.failover != nil {
				f := *tt.failover
				f.owner = owner
				s.owner.failover = map[[2]string]failover{k: f}
			}
			pk := pendingKey{counterKey{"me", "api", "k"}, 0, 1}
			s.pending[pk] = &pendingCounter{c: Counter{Rule: "api", Key: "k", Epoch: 1, Prev: 2, Used: 10}, transmits: 3}
			from := owner
			if tt.from == "replica" {
				from = replica
			}
			s.ackFromLocked(ownerAnswer{rule: "api", key: "k", ackEpoch: 1, ackUsed: 6}, from, owner)
			if p := s.pending[pk]; p == nil || p.c.Prev != tt.wantPrev {
				t.Fatalf("pending %+v, want prev %d", p, tt.wantPrev)
			}
			f, ok := s.owner.failover[k]
			if ended := ok && f.ended != 0; tt.failover != nil && ended != tt.wantEnd {
				t.Fatalf("failover %+v (held %v), want ended %v", f, ok, tt.wantEnd)
			}
			if got := s.failoverAlsoLocked("api", "k", replica); (got[0] != "") != (tt.failover != nil && !tt.wantEnd) || got[1] != "" {
				t.Fatalf("also sent to %q", got)
			}
		})
	}
}
