package gossip

import (
	"fmt"
	"testing"
	"time"
)

// switchNet is a bare syncer of a 64-member ring, a user of key (told by
// the owner to aggregate, at the owner's total 1,000) whose aggregator is
// x, and y once joiner joins the ring.
type switchNet struct {
	t      *testing.T
	s      *Syncer
	clock  *time.Time
	key    string
	x, y   string
	joiner string
}

func newSwitchNet(t *testing.T) *switchNet {
	t.Helper()
	const n = 64 // 8 aggregators a key; 65 members: 16
	s, clock := newClockedAggSyncer(n)
	joiner := fmt.Sprintf("m%03d", n)
	s.mu.Lock()
	defer s.mu.Unlock()
	small := s.owner.ring
	large := newOwnerRing(append(append([]string{}, small.names...), joiner))
	for i := range 1000 {
		k := fmt.Sprint("k", i)
		owner, replica := small.owners("api", k)
		if owner == s.self || replica == s.self {
			continue
		}
		if o2, r2 := large.owners("api", k); o2 != owner || r2 != replica {
			continue
		}
		x, y := small.aggregatorFor("api", k, s.self, 0), large.aggregatorFor("api", k, s.self, 0)
		if x != y && x != s.self && y != s.self && y != joiner {
			s.owner.agg.hot = map[[2]string]*aggUse{{"api", k}: {used: s.sinceBorn(), baseSet: true, base: 1000}}
			return &switchNet{t: t, s: s, clock: clock, key: k, x: x, y: y, joiner: joiner}
		}
	}
	t.Fatal("no key whose aggregator moves when a member joins")
	return nil
}

// ring adds the joiner to the ring (join) or takes it out.
func (n *switchNet) ring(join bool) { setAggMember(n.s, n.joiner, join) }

// answer delivers an answer of the key from aggregator from, an interval
// on, and returns what it charged.
func (n *switchNet) answer(from string, gen, prev, others uint64) uint64 {
	n.t.Helper()
	*n.clock = n.clock.Add(n.s.cfg.GossipInterval)
	return answerCharged(n.t, n.s, from, *n.clock, ownerAnswer{rule: "api", key: n.key, gen: gen, prev: prev, others: others})
}

// A user whose aggregator moves when a member joins, and moves back when
// it goes, is charged what the other nodes consumed once: the new
// aggregator's first answer (a group it made before the owner first
// answered it tells the key's whole history) charges only what lies above
// what the old one told, and the old one's answer on the subscription the
// user comes back to charges only what lies above what the new one told
// (1,000 simulated nodes whose member count crossed 1,024: nodes charged
// the history, 1,212-1,270 tokens, then 340-397 again).
func TestSwitchedUserIsChargedOnce(t *testing.T) {
	net := newSwitchNet(t)
	x, y, ring, answer := net.x, net.y, net.ring, net.answer
	steps := []struct {
		what       string
		join, drop bool
		from       string
		gen        uint64
		prev       uint64
		others     uint64
		want       uint64
	}{
		{what: "first answer of its aggregator, from the notice's 1,000", from: x, gen: 1, prev: 0, others: 1000, want: 0},
		{what: "100 more", from: x, gen: 1, prev: 0, others: 1100, want: 100},
		{what: "a member joins: the new aggregator's first answer tells everything", join: true, from: y, gen: 2, prev: 0, others: 1150, want: 50},
		{what: "150 more from the new aggregator", from: y, gen: 2, prev: 0, others: 1300, want: 150},
		{what: "the member goes: the old aggregator's answer on the old subscription", drop: true, from: x, gen: 1, prev: 1100, others: 1350, want: 50},
		{what: "and on from there", from: x, gen: 1, prev: 1100, others: 1400, want: 50},
	}
	var total uint64
	for _, st := range steps {
		switch {
		case st.join:
			ring(true)
		case st.drop:
			ring(false)
		}
		got := answer(st.from, st.gen, st.prev, st.others)
		total += got
		if got != st.want {
			t.Errorf("%s: charged %d, want %d", st.what, got, st.want)
		}
	}
	if total != 400 {
		t.Errorf("charged %d in all; the others consumed 400 beyond the notice's total", total)
	}
}

// A user that becomes its key's owner (the owner died or left) counts the
// key itself: it no longer sends its counters through an aggregator nor
// takes an aggregator's answers (it took them, and was charged everything
// twice: 100 simulated nodes under churn, one ended 1,951 tokens over). A
// user of a key it does not own still does both.
func TestUserThatOwnsTheKeyLeavesItsAggregator(t *testing.T) {
	s, _ := newAggSyncer("m000", 20)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshRingLocked()
	for _, tc := range []struct {
		what string
		own  bool
	}{{"a key it owns", true}, {"a key another member owns", false}} {
		key := ""
		for i := range 1000 {
			k := fmt.Sprint("k", i)
			if owner, replica := s.owner.ring.owners("api", k); (owner == s.self) == tc.own && replica != s.self {
				key = k
				break
			}
		}
		agg := s.owner.ring.aggregatorFor("api", key, s.self, 0)
		if key == "" || agg == "" || agg == s.self {
			t.Fatalf("%s: no key (%q, aggregator %q)", tc.what, key, agg)
		}
		now := s.sinceBorn()
		s.owner.agg.hot = map[[2]string]*aggUse{{"api", key}: {used: now, heardFrom: agg}}
		k := pendingKey{counterKey{s.self, "api", key}, 0, 1}
		p := &pendingCounter{c: Counter{Rule: "api", Key: key, Epoch: 1, Used: 5}, transmits: ownerResends}
		s.pending[k] = p
		if sent := s.aggSendLocked(k, p, now, -100); sent == tc.own {
			t.Errorf("%s: counter sent through its aggregator %v, want %v", tc.what, sent, !tc.own)
		}
		if took := s.aggAcceptLocked("api", key, 0, agg); took == tc.own {
			t.Errorf("%s: took its aggregator's answer %v, want %v", tc.what, took, !tc.own)
		}
		delete(s.pending, k)
		clear(s.owner.agg.writers)
	}
}

// A user that the ring moves to a group in another numbering (a churn
// joiner made aggregator while the key was failed over: its group's first
// answer came from the replica, whose aggregate counts from the failover,
// hundreds of tokens below the owner's numbering its old aggregator went
// on in) is charged the others' consumption from its first answer on; it
// charged nothing until the new group's others passed what the old one
// had told it (300 simulated nodes, the owner killed, a joiner: users
// 887-890 tokens under what the others admitted). In the owner's
// numbering, a new group that lags the old one's by a few tokens charges
// nothing at its first answer, and those few tokens once more later.
func TestSwitchToAGroupInTheReplicasNumbering(t *testing.T) {
	for _, tc := range []struct {
		name string
		// The new aggregator's answers: its first (prev, others), then
		// its others at each of two later answers.
		prev, first, later1, later2 uint64
		want                        [3]uint64 // charged by each
	}{
		{name: "the replica's numbering, 800 below", prev: 250, first: 300, later1: 400, later2: 560, want: [3]uint64{0, 100, 160}},
		{name: "the replica's numbering, 1,050 below", prev: 0, first: 50, later1: 80, later2: 130, want: [3]uint64{0, 30, 50}},
		{name: "the owner's numbering, 5 behind: those 5 charged once more", prev: 1000, first: 1095, later1: 1195, later2: 1256, want: [3]uint64{0, 100, 61}},
		{name: "the owner's numbering, 40 ahead", prev: 1100, first: 1140, later1: 1240, later2: 1300, want: [3]uint64{40, 100, 60}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net := newSwitchNet(t)
			if got := net.answer(net.x, 1, 0, 1000); got != 0 {
				t.Fatalf("first answer of its aggregator, from the notice's 1,000: charged %d, want 0", got)
			}
			if got := net.answer(net.x, 1, 0, 1100); got != 100 {
				t.Fatalf("100 more: charged %d, want 100", got)
			}
			net.ring(true) // the joiner moves its slot to y
			var total, want uint64
			for i, a := range [][2]uint64{{tc.prev, tc.first}, {tc.prev, tc.later1}, {tc.prev, tc.later2}} {
				got := net.answer(net.y, 2, a[0], a[1])
				total += got
				want += tc.want[i]
				if got != tc.want[i] {
					t.Errorf("answer %d of the new aggregator (others %d): charged %d, want %d", i+1, a[1], got, tc.want[i])
				}
			}
			if consumed := tc.later2 - tc.first; total != want || total < consumed {
				t.Errorf("charged %d in all after the switch; the others consumed %d after its first answer", total, consumed)
			}
		})
	}
}

// A user that comes back to the subscription it left (the ring moved its
// slot to another group, then back) adds to where that subscription
// stopped what it charged through the other group meanwhile, whatever
// that group's numbering: it was charged again everything the other group
// told it when that group counted in a lower numbering (300 simulated
// nodes, 10%/min churn, the owner killed at 8 s, seed 9: users moved from
// an aggregator that told 1,660 to the old replica's group, told 0 to 302,
// and back: charged 344 for the others' 42; 10 users +299..+336). Over the
// round trip, every case charges what the others consumed once: in one
// numbering, the few tokens a lagging group charged once more at the
// switch are taken back on return.
func TestComingBackFromAGroupInALowerNumbering(t *testing.T) {
	for _, tc := range []struct {
		name string
		// The other group's answers: its first (prev, others), then its
		// others at two later answers; back is the old aggregator's others
		// on return, 40 consumed since the other's last answer.
		prev, first, later1, later2, back uint64
		want                              [4]uint64 // charged by each
	}{
		{name: "the replica's numbering, 1,100 below", prev: 0, first: 0, later1: 150, later2: 302, back: 1442, want: [4]uint64{0, 150, 152, 40}},
		{name: "the owner's numbering, 5 behind: taken back on return", prev: 1000, first: 1095, later1: 1195, later2: 1256, back: 1296, want: [4]uint64{0, 100, 61, 35}},
		{name: "the owner's numbering, 40 ahead", prev: 1100, first: 1140, later1: 1240, later2: 1300, back: 1340, want: [4]uint64{40, 100, 60, 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net := newSwitchNet(t)
			net.answer(net.x, 1, 0, 1000) // from the notice's 1,000: 0
			if got := net.answer(net.x, 1, 0, 1100); got != 100 {
				t.Fatalf("100 more: charged %d, want 100", got)
			}
			net.ring(true) // the joiner moves its slot to y
			var total uint64
			for i, a := range [][2]uint64{{tc.prev, tc.first}, {tc.prev, tc.later1}, {tc.prev, tc.later2}} {
				got := net.answer(net.y, 2, a[0], a[1])
				total += got
				if got != tc.want[i] {
					t.Errorf("answer %d of the other group (others %d): charged %d, want %d", i+1, a[1], got, tc.want[i])
				}
			}
			net.ring(false) // back to x, on the subscription it left
			got := net.answer(net.x, 1, 1100, tc.back)
			total += got
			if got != tc.want[3] {
				t.Errorf("the old aggregator's answer on return (others %d): charged %d, want %d", tc.back, got, tc.want[3])
			}
			if consumed := tc.back - 1100; total != consumed {
				t.Errorf("charged %d from the switch to the return; the others consumed %d (the old aggregator's numbering)", total, consumed)
			}
		})
	}
}
