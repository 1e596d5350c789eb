package gossip

import (
	"fmt"
	"testing"
	"time"
)

// An aggregator that hands its group on (a member joined and took its
// slots) and goes on as its new aggregator's user is charged what the
// others consumed once: it heard the key through its group, in the
// owner's numbering, so an answer after the hand-on charges only what lies
// above the group's total. Before, one that had been its new aggregator's
// user took that aggregator's answer on the subscription it had left and
// was charged everything its group had told it since (1,000 simulated
// nodes, 10%/min churn, seed 3: 28 nodes 108-439 tokens over); one that
// had never been a user was told the key's whole history by the owner's
// answer to its own counter, which the owner had only acknowledged while
// the group was active (one node 1,358 over); and one that aggregated the
// key again was charged by the owner's first answer to its new group what
// its aggregator had told it meanwhile (20 nodes 150-216 over).
func TestHandedOnAggregatorIsChargedOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		user bool // it was its new aggregator's user before it aggregated the key
	}{{"was the new aggregator's user", true}, {"never a user", false}} {
		t.Run(tc.name, func(t *testing.T) {
			net := newHandOnNet(t, handOnKey, noHandOnKey)
			a, clock, key, joiner, next, owner, k, answer := net.a, net.clock, net.key, net.member, net.next, net.owner, net.k, net.answer
			ring := func(join bool) { setAggMember(a, joiner, join) }
			group := func() uint64 { // this node aggregates the key (its users' counters made the group)
				a.mu.Lock()
				defer a.mu.Unlock()
				return a.aggGroupLocked(k, a.sinceBorn()).epoch
			}
			round := func() {
				a.mu.Lock()
				defer a.mu.Unlock()
				a.aggRoundLocked(a.sinceBorn(), uint64(clock.UnixNano()))
			}

			if tc.user {
				// Its new aggregator was its aggregator once: it told it 100.
				ring(true)
				a.mu.Lock()
				a.owner.agg.hot = map[[2]string]*aggUse{{"api", key}: {used: a.sinceBorn()}}
				a.mu.Unlock()
				if got := answer(next, 1, 0, 100, 0); got != 100 {
					t.Fatalf("its aggregator's first answer charged %d, want 100", got)
				}
				ring(false)
			}
			epoch := group()
			var total uint64
			total += answer(owner, 7, 0, 1000, epoch) // the owner's first answer to the group: the key at 1,000
			if !tc.user {
				total += answer(owner, 8, 0, 0, 1) // its own counter's, only acknowledged
			}
			if want := uint64(1000); total+100*b2u(tc.user) != want {
				t.Fatalf("before the hand-on: charged %d in all, want %d", total+100*b2u(tc.user), want)
			}
			ring(true)
			round() // hands the group on
			a.mu.Lock()
			g := a.owner.agg.groups[k]
			a.mu.Unlock()
			if g != nil {
				t.Fatal("the group was not handed on")
			}
			steps := []struct {
				what                    string
				from                    string
				gen, prev, others, ackE uint64
				want                    uint64
				regroup                 bool
			}{
				{what: "its new aggregator's answer: 40 beyond the group's total", from: next, gen: 1, prev: 100, others: 1040, want: 40},
				{what: "the owner's answer to its own counter, the group idle there", from: owner, gen: 8, prev: 0, others: 1040, ackE: 1, want: 0},
				{what: "its aggregator's next answer", from: next, gen: 1, prev: 1040, others: 1080, want: 40},
				{what: "the owner's first answer to the group it makes again", regroup: true, from: owner, gen: 7, prev: 1000, others: 1080, want: 0},
				{what: "and on from there", from: owner, gen: 7, prev: 1080, others: 1100, want: 20},
			}
			if !tc.user {
				steps[0].gen, steps[0].prev = 3, 1000 // a new subscription, not the one it left
				steps[2].gen = 3
			}
			regrouped := uint64(0)
			for _, st := range steps {
				ackE := st.ackE
				if st.regroup {
					ring(false)
					regrouped = group()
				}
				if st.from == owner && st.gen == 7 {
					ackE = regrouped // an answer to the group it made again
				}
				got := answer(st.from, st.gen, st.prev, st.others, ackE)
				if got != st.want {
					t.Errorf("%s: charged %d, want %d", st.what, got, st.want)
				}
			}
		})
	}
}

// handOnNet is a syncer of 20 members on a fixed clock with a key it
// aggregates that a membership change moves (find: handOnKey, a joiner
// takes its slots; replicaKey, a member's going makes it the replica),
// the member whose change that is, its aggregator next after it, the
// key's owner and replica, and answers to it from any sender
// (clockedAnswer).
type handOnNet struct {
	a                                 *Syncer
	clock                             *time.Time
	key, member, next, owner, replica string
	k                                 aggKey
	answer                            func(from string, gen, prev, others, ackEpoch uint64) uint64
}

func newHandOnNet(t *testing.T, find func(r *ownerRing, self string) (key, member, next string), none string) *handOnNet {
	t.Helper()
	a, clock := newClockedAggSyncer(20)
	a.mu.Lock()
	key, member, next := find(a.owner.ring, a.self)
	owner, replica := a.owner.ring.owners("api", key)
	a.mu.Unlock()
	if key == "" {
		t.Fatal(none)
	}
	return &handOnNet{a: a, clock: clock, key: key, member: member, next: next, owner: owner, replica: replica,
		k: aggKey{"api", key, 0}, answer: clockedAnswer(t, a, clock, key)}
}

// noHandOnKey is what newHandOnNet says when handOnKey finds no key.
const noHandOnKey = "no key this node aggregates whose slots a joiner takes"

// handOnKey returns a key that member self is its own aggregator of on
// ring r, and a joiner that takes its slots without changing the key's
// owner or replica; next is self's aggregator of the key once it joined.
func handOnKey(r *ownerRing, self string) (key, joiner, next string) {
	for i := range 2000 {
		k := fmt.Sprint("k", i)
		owner, replica := r.owners("api", k)
		if owner == self || replica == self || r.aggregatorFor("api", k, self, 0) != self {
			continue
		}
		for j := range 50 {
			name := fmt.Sprintf("j%03d", j)
			large := r.with(name, true)
			if o, rep := large.owners("api", k); o != owner || rep != replica {
				continue
			}
			named := false
			for slot := range aggFanIn(large.size()) {
				named = named || large.aggregatorAt(keyHash("api", k), slot, owner, replica, "") == self
			}
			if !named {
				return k, name, large.aggregatorFor("api", k, self, 0)
			}
		}
	}
	return "", "", ""
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// An aggregator whose ring makes it the key's replica (a member declared
// dead) drops its group and goes on as a user of its aggregator: it hands
// the group on, so the answer on the subscription it comes back to adds
// what it charged through its group meanwhile, whatever the group's
// numbering. It was charged again everything its group had told it
// (300 simulated nodes, 10%/min churn, the owner killed at 8 s, seed 9:
// the old replica, an aggregator of the joiner owner's lower numbering
// from 15.5 s to 18.9 s, told 0 to 324 there, then charged 347 by its old
// aggregator's answer for the others' 23; +501 at the end).
func TestAggregatorMadeReplicaComesBackOnce(t *testing.T) {
	net := newHandOnNet(t, replicaKey, "no key this node aggregates and becomes the replica of when a member goes")
	a, clock, key, dead, next, owner, k, answer := net.a, net.clock, net.key, net.member, net.next, net.owner, net.k, net.answer
	round := func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.aggRoundLocked(a.sinceBorn(), uint64(clock.UnixNano()))
	}

	// The replica, a user of next: told 1,000 by the notice, then 1,100.
	setAggMember(a, dead, false)
	a.mu.Lock()
	a.owner.agg.hot = map[[2]string]*aggUse{{"api", key}: {used: a.sinceBorn(), baseSet: true, base: 1000}}
	a.mu.Unlock()
	var total uint64
	for _, others := range []uint64{1000, 1100} {
		total += answer(next, 1, 0, others, 0)
	}
	// The member back (the ring names this node an aggregator of the
	// key): its group, which the owner answers in a numbering 1,100 below.
	setAggMember(a, dead, true)
	a.mu.Lock()
	epoch := a.aggGroupLocked(k, a.sinceBorn()).epoch
	a.mu.Unlock()
	for _, others := range []uint64{0, 150, 324} {
		total += answer(owner, 7, 0, others, epoch)
	}
	if total != 424 {
		t.Fatalf("before it is the replica again: charged %d in all, want 100 + 324", total)
	}
	// The member gone again: this node is the replica, its group goes.
	setAggMember(a, dead, false)
	round()
	a.mu.Lock()
	g := a.owner.agg.groups[k]
	a.mu.Unlock()
	if g != nil {
		t.Fatal("the replica kept its group")
	}
	if got := answer(next, 1, 1100, 1100+324+23, 0); got != 23 {
		t.Errorf("its old aggregator's answer on the subscription it left: charged %d, want the 23 consumed since its group's last answer", got)
	}
	if got := answer(owner, 7, 0, 330, epoch); got != 0 {
		t.Errorf("the owner's late answer to the group it dropped: charged %d, want 0", got)
	}
}

// replicaKey returns a key that member self aggregates on ring r, and a
// member dead whose going makes self the key's replica, its owner
// unchanged; next is self's aggregator of the key then.
func replicaKey(r *ownerRing, self string) (key, dead, next string) {
	for i := range 2000 {
		k := fmt.Sprint("k", i)
		owner, replica := r.owners("api", k)
		if owner == self || replica == self || r.aggregatorFor("api", k, self, 0) != self {
			continue
		}
		small := r.with(replica, false)
		if o, rep := small.owners("api", k); o != owner || rep != self {
			continue
		}
		if next := small.aggregatorFor("api", k, self, 0); next != "" && next != self {
			return k, replica, next
		}
	}
	return "", "", ""
}
