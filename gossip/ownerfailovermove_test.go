package gossip

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// moveRing is a key of a five-member ring (me and n1-n4) that me neither
// owns nor replicates, its owner and replica, and the members that make a
// joiner its owner or its replica.
type moveRing struct {
	key, owner, replica    string
	ownerJoin, replicaJoin string
}

func findMoveRing(t *testing.T, names []string) moveRing {
	t.Helper()
	ring := newOwnerRing(names)
	for i := range 1000 {
		k := fmt.Sprint("k", i)
		owner, replica := ring.owners("api", k)
		if owner == "me" || replica == "me" {
			continue
		}
		m := moveRing{key: k, owner: owner, replica: replica}
		for j := range 1000 {
			name := fmt.Sprint("j", j)
			o, r := newOwnerRing(append(append([]string{}, names...), name)).owners("api", k)
			switch {
			case o == name && r == owner && m.ownerJoin == "":
				m.ownerJoin = name
			case o == owner && r == name && m.replicaJoin == "":
				m.replicaJoin = name
			}
		}
		if m.ownerJoin != "" && m.replicaJoin != "" {
			return m
		}
	}
	t.Fatal("no key that a joiner can take from its owner and from its replica")
	return moveRing{}
}

// A node that failed a key over from its dead owner A to the replica B
// was charged what B counted through B's answers; those acknowledged
// nothing. When a joiner C takes A's place as the owner (A, not yet
// declared dead, its replica), or B's as the replica, the node's counters
// reach C with the prev B acknowledged: C counts from there. They reached
// it with A's, and C's fresh aggregate counted and told every node the
// whole failover a second time (300 simulated nodes, seed 9: every node
// 658-1,309 tokens over, the cluster admitting nothing for 5 s). An
// acknowledgement of A beyond what B counted (A was only late) stands.
func TestFailoverMovedToAJoinerCountsFromTheReplica(t *testing.T) {
	names := []string{"me", "n1", "n2", "n3", "n4"}
	m := findMoveRing(t, names)
	for _, tc := range []struct {
		name     string
		group    bool   // the counter is this node's group counter, not its own
		ownerAck bool   // A answers (acknowledging 4) before the move
		join     string // "owner", "replica" or "" (A declared dead instead)
		wantTo   string // "joiner", "owner" (A), "replica" (B)
		wantPrev uint64
	}{
		{name: "a joiner becomes the owner", join: "owner", wantTo: "joiner", wantPrev: 6},
		{name: "a joiner becomes the replica", join: "replica", wantTo: "joiner", wantPrev: 6},
		{name: "the owner declared dead: the replica owns the key", join: "", wantTo: "replica", wantPrev: 6},
		{name: "the owner acknowledged more before a joiner became the owner", ownerAck: true, join: "owner", wantTo: "joiner", wantPrev: 8},
		{name: "an aggregator's group counter, a joiner the owner", group: true, join: "owner", wantTo: "joiner", wantPrev: 6},
		{name: "an aggregator's group counter, a joiner the replica", group: true, join: "replica", wantTo: "joiner", wantPrev: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newOwnerSyncer("me", names[1:]...)
			clock := time.Unix(1_800_000_000, 0)
			s.now, s.born = func() time.Time { return clock }, clock.Add(-time.Minute)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.refreshRingLocked()
			k := [2]string{"api", m.key}
			now := s.sinceBorn()
			epoch := uint64(1)
			var g *aggGroup
			if tc.group {
				g = s.aggGroupLocked(aggKey{"api", m.key, 0}, now)
				g.o.total, g.upSet, g.acked = 10, true, 2
				epoch = g.epoch
			} else {
				s.pending[pendingKey{counterKey{"me", "api", m.key}, 0, 1}] = &pendingCounter{c: Counter{Rule: "api", Key: m.key, Epoch: 1, Prev: 2, Used: 10}, transmits: 3}
			}
			// Failed over from A: B's answer acknowledges 6, withheld.
			s.owner.round = 5
			s.owner.failover = map[[2]string]failover{k: {at: 1, owner: m.owner}}
			s.ownerForLocked("api", m.key) // a send to the replica
			fromReplica := ownerAnswer{rule: "api", key: m.key, ackEpoch: epoch, ackUsed: 6}
			s.ackFromLocked(fromReplica, m.replica, m.owner)
			if tc.group {
				s.aggHeardLocked(m.replica, fromReplica, 0, 0, now, s.acksLocked("api", m.key, m.replica, m.owner))
			}
			if tc.ownerAck {
				fromOwner := ownerAnswer{rule: "api", key: m.key, ackEpoch: epoch, ackUsed: 8}
				s.ackFromLocked(fromOwner, m.owner, m.owner)
				if tc.group {
					s.aggHeardLocked(m.owner, fromOwner, 0, 0, now, true)
				}
			}
			joiner := ""
			switch tc.join {
			case "owner":
				joiner = m.ownerJoin
			case "replica":
				joiner = m.replicaJoin
			}
			if joiner != "" {
				s.peers[joiner] = memberlist.Node{Name: joiner, DMax: protoOwner}
				s.ownerMemberLocked(joiner)
			} else {
				delete(s.peers, m.owner)
				s.ownerMemberLocked(m.owner)
			}
			s.refreshRingLocked()
			want := map[string]string{"joiner": joiner, "owner": m.owner, "replica": m.replica}[tc.wantTo]
			var to string
			var prev uint64
			if tc.group {
				var c Counter
				var ok bool
				to, c, _, ok = s.groupCounterLocked(aggKey{"api", m.key, 0}, g, now)
				if !ok {
					t.Fatal("the group counter is not sent")
				}
				prev = c.Prev
			} else {
				to = s.ownerForLocked("api", m.key)
				p := s.pending[pendingKey{counterKey{"me", "api", m.key}, 0, 1}]
				if p == nil {
					t.Fatal("the pending counter was dropped")
				}
				prev = p.c.Prev
			}
			if to != want {
				t.Errorf("sent to %q, want %q (%s)", to, want, tc.wantTo)
			}
			if prev != tc.wantPrev {
				t.Errorf("counter sent with prev %d, want %d", prev, tc.wantPrev)
			}
		})
	}
}

// Five bare syncers and a joiner: the key's owner dies, the others fail it
// over to the replica, then the joiner, which the ring makes the owner
// (the dead owner, still a member, its replica), joins. Every live node is
// charged what the others consumed since the owner died once: the joiner's
// fresh aggregate told them the failover again.
func TestJoinerOwnerOfAFailedOverKeyChargesOnce(t *testing.T) {
	names := []string{"o", "r", "x", "y", "z"}
	ring := newOwnerRing(names)
	key, joiner := "", ""
	for i := 0; i < 10000 && key == ""; i++ {
		k := fmt.Sprint("k", i)
		if o, r := ring.owners("api", k); o != "o" || r != "r" {
			continue
		}
		for j := range 200 {
			name := fmt.Sprint("j", j)
			if o, r := newOwnerRing(append(append([]string{}, names...), name)).owners("api", k); o == name && r == "o" {
				key, joiner = k, name
				break
			}
		}
	}
	if key == "" {
		t.Fatal("no key owned by o, replicated by r, that a joiner would own")
	}
	n := newFailoverNet(t, append(append([]string{}, names...), joiner)...)
	n.key = key
	n.bury(joiner) // not yet a member
	n.dead[joiner] = true
	live := []string{"r", "x", "y", "z"}
	for range 20 {
		n.round("", names...)
	}
	n.dead["o"] = true
	base, usedAt := n.tally(live)
	for range ownerFailover + 100 {
		n.round("", live...)
	}
	n.dead[joiner] = false
	for other, s := range n.nodes { // the joiner joins
		if other != joiner {
			setOwnerMember(s, joiner)
		}
	}
	for range 40 {
		n.round("", live...)
	}
	for range 600 {
		n.round("")
	}
	slack := uint64(2 * (len(live) - 1))
	for _, name := range live {
		var others uint64
		for _, m := range live {
			if m != name {
				others += n.used[m] - usedAt[m]
			}
		}
		got := n.ledgers[name].charged["api/"+key] - base[name]
		t.Logf("%s: charged %d since the owner died, the live others consumed %d", name, got, others)
		if got+slack < others || got > others+slack {
			t.Errorf("%s charged %d since the owner died, the live others consumed %d (slack %d)", name, got, others, slack)
		}
	}
}

// setOwnerMember has s see member name, which speaks owner mode, join.
func setOwnerMember(s *Syncer, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peers[name] = memberlist.Node{Name: name, DMax: protoOwner}
	s.ownerMemberLocked(name)
	s.members.Store(int64(len(s.peers) + 1))
}
