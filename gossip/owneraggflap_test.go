package gossip

import "testing"

// An aggregator that hands its group on and makes one again (its ring
// flapped) is charged what the others consumed once: the owner's answers to
// the handed group, which charge nothing, advance the subscription the
// re-made group's answers come on (the same owner, the same gen), and the
// re-made group's first answer charged only above where they left it. What
// the others consumed between the new aggregator's last answer and the
// re-made group's first was charged nowhere (1,000 simulated nodes,
// 10%/min churn, seed 1: 22 then 47 tokens lost over two flaps; ~20 nodes
// 41-63 under).
func TestRegroupAfterAHandOnChargesWhatTheHandedGroupToldUncharged(t *testing.T) {
	type step struct {
		what         string
		from         string // "owner" or "next"
		handed       bool   // an answer to the handed group
		regroup      bool   // the owner's first answer to the group made again
		prev, others uint64
		want         uint64
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"the handed group's answers ran ahead of the new aggregator's", []step{
			{what: "its new aggregator's answer", from: "next", prev: 1000, others: 1040, want: 40},
			{what: "the owner's answer to the handed group", from: "owner", handed: true, prev: 1000, others: 1060, want: 0},
			{what: "the owner's first answer to the re-made group", from: "owner", regroup: true, prev: 1060, others: 1080, want: 40},
			{what: "and on from there", from: "owner", prev: 1080, others: 1100, want: 20},
		}},
		{"no answer to the handed group", []step{
			{what: "its new aggregator's answer", from: "next", prev: 1000, others: 1040, want: 40},
			{what: "the owner's first answer to the re-made group", from: "owner", regroup: true, prev: 1000, others: 1080, want: 40},
			{what: "and on from there", from: "owner", prev: 1080, others: 1100, want: 20},
		}},
		{"its new aggregator told more after the handed group's answer", []step{
			{what: "its new aggregator's answer", from: "next", prev: 1000, others: 1040, want: 40},
			{what: "the owner's answer to the handed group", from: "owner", handed: true, prev: 1000, others: 1060, want: 0},
			{what: "its new aggregator's next answer", from: "next", prev: 1040, others: 1070, want: 30},
			{what: "the owner's first answer to the re-made group", from: "owner", regroup: true, prev: 1060, others: 1080, want: 10},
			{what: "and on from there", from: "owner", prev: 1080, others: 1100, want: 20},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net := newHandOnNet(t, handOnKey, noHandOnKey)
			a, clock, joiner, next, owner, k, answer := net.a, net.clock, net.member, net.next, net.owner, net.k, net.answer
			group := func() uint64 { // this node aggregates the key (its users' counters made the group)
				a.mu.Lock()
				defer a.mu.Unlock()
				return a.aggGroupLocked(k, a.sinceBorn()).epoch
			}
			handed := group()
			total := answer(owner, 7, 0, 1000, handed) // the owner's first answer to the group: the key at 1,000
			total += answer(owner, 8, 0, 0, 1)         // its own counter's, only acknowledged
			if total != 1000 {
				t.Fatalf("before the hand-on: charged %d, want 1000", total)
			}
			joinAndHandOn(t, a, joiner, k, *clock)
			regrouped := uint64(0)
			last := uint64(1000)
			for _, st := range tc.steps {
				if st.regroup {
					setAggMember(a, joiner, false)
					regrouped = group()
				}
				var got uint64
				switch {
				case st.from == "next":
					got = answer(next, 3, st.prev, st.others, 0)
				case st.handed:
					got = answer(owner, 7, st.prev, st.others, handed)
				default:
					got = answer(owner, 7, st.prev, st.others, regrouped)
				}
				total += got
				if got != st.want {
					t.Errorf("%s: charged %d, want %d", st.what, got, st.want)
				}
				if !st.handed {
					last = max(last, st.others)
				}
			}
			if total != last {
				t.Errorf("charged %d in all, want %d: what the others consumed, once", total, last)
			}
		})
	}
}
