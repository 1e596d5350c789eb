package gossip

import (
	"fmt"
	"testing"

	"github.com/hashicorp/memberlist"
)

// Counters sent while the membership forms (issue 20, goal 4: no
// consumption lost for longer than one repair round). Real owner-mode
// processes started together, the load begun before every node had seen
// every other (sim --validate, 50 sluiced), lost 1-2 holder probes of 31-39:
// a holder's one token reached neither the other holders nor its own
// balance. Two ways a node's first counter can meet a membership that has
// not formed:
//
//   - the key's owner does not list the sender yet. It refuses the packet
//     whole (memberStampCheck: "sender is no member"), acknowledges
//     nothing, and the sender repeats it (ownerResends, then every
//     ownerBackoff rounds, to the owner even while failed over): counted
//     at most ownerBackoff rounds after the owner lists the sender
//     (TestCounterSentBeforeTheOwnerListsTheSenderIsCounted; true before
//     this file, a guard only);
//   - the sender does not list the key's owner yet: its ring names another
//     member (the key's replica, the next point on the ring), which counts
//     the counter and acknowledges it. Once the sender lists the owner it
//     has nothing pending and sends the owner nothing: the owner never
//     counts the token, the other users are never charged it, and the
//     sender, no contributor of the owner's aggregate, hears nothing of
//     theirs. Lost for good (TestCounterAcknowledgedOnARingNotFormedIsLost,
//     skipped: the loss is not fixed; /work/notes11/deferred.md).

// joinLateNet is a failoverNet of o, r, h, a, b whose nodes' ledgers bound
// (joinLedger) and whose key is owned by o with replica r.
func joinLateNet(t *testing.T) *failoverNet {
	n := newFailoverNet(t, "o", "r", "h", "a", "b")
	n.key = n.keyOwnedBy("o", "r")
	for name, s := range n.nodes {
		s.ledger = &joinLedger{n.ledgers[name], func() uint64 { return n.used[name] }}
	}
	return n
}

// listMember makes s list (or not) name as a member.
func listMember(s *Syncer, name string, listed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if listed {
		s.peers[name] = memberlist.Node{Name: name, DMax: protoOwner}
	} else {
		delete(s.peers, name)
	}
	s.ownerMemberLocked(name)
	s.members.Store(int64(len(s.peers) + 1))
}

// settleRounds runs rounds until every user (h, a, b) is charged the
// other two's token, and returns how many it took (-1: not in 600).
func (n *failoverNet) settleRounds() int {
	for i := range 600 {
		if n.ledgers["h"].charged["api/"+n.key] == 2 && n.ledgers["a"].charged["api/"+n.key] == 2 && n.ledgers["b"].charged["api/"+n.key] == 2 {
			return i
		}
		n.round("")
	}
	return -1
}

// h, a and b take a token each in the first round, while the nodes named
// (the owner among them) do not list h; after rounds more they do: every
// user is charged the other two's tokens within ownerBackoff rounds.
func TestCounterSentBeforeTheOwnerListsTheSenderIsCounted(t *testing.T) {
	tests := []struct {
		strangers []string // nodes that do not list h at first
		rounds    int      // rounds until they do
	}{
		{[]string{"o"}, 5},                           // before h fails over
		{[]string{"o"}, 40},                          // after: h sends the owner its counters too
		{[]string{"o", "r"}, 40},                     // the replica refuses them as well
		{[]string{"o", "r", "a", "b"}, 200},          // four seconds
		{[]string{"o", "r", "a", "b"}, ownerBackoff}, // at a resend's turn
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.strangers, tt.rounds), func(t *testing.T) {
			n := joinLateNet(t)
			for _, name := range tt.strangers {
				listMember(n.nodes[name], "h", false)
			}
			n.round("", "h", "a", "b")
			for range tt.rounds {
				n.round("")
			}
			for _, name := range tt.strangers {
				listMember(n.nodes[name], "h", true)
			}
			if got := n.settleRounds(); got < 0 || got > ownerBackoff {
				t.Errorf("settled %d rounds after the owner listed h, want within ownerBackoff (%d)", got, ownerBackoff)
			}
			for _, c := range n.settledCharges(t) {
				if c.name != "r" && c.charged != c.others {
					t.Errorf("%s charged %d, the others consumed %d", c.name, c.charged, c.others)
				}
			}
		})
	}
}

// h does not list the key's owner o when it takes its token: its ring
// names r, which counts and acknowledges it. Once h lists o, every user
// should be charged the other two's tokens (one repair round). On the code
// of this commit none ever is: r's aggregate holds h's token, o's only a's
// and b's, h has nothing pending (seen with a debug print: "h's ring: owner
// r replica h; h pending 0", "r's aggregate: h contrib 1 hi 1", o's: a, b
// only), and after 600 rounds h is charged 0 of 2, a and b 1 of 2.
func TestCounterAcknowledgedOnARingNotFormedIsLost(t *testing.T) {
	t.Skip("known loss, not fixed (issue 20; docs/GUARANTEES.md, Not proven yet): a counter acknowledged by the owner of a ring that lacked the key's owner")
	for _, rounds := range []int{5, 40} {
		t.Run(fmt.Sprint(rounds), func(t *testing.T) {
			n := joinLateNet(t)
			listMember(n.nodes["h"], "o", false)
			n.round("", "h", "a", "b")
			for range rounds {
				n.round("")
			}
			listMember(n.nodes["h"], "o", true)
			if got := n.settleRounds(); got < 0 || got > ownerBackoff {
				t.Errorf("settled %d rounds after h listed o, want within ownerBackoff (%d)", got, ownerBackoff)
			}
		})
	}
}

// joinLedger bounds a failoverNet node's ledger: a burst of 100 that does
// not refill, its balance the burst less what it was charged and used.
type joinLedger struct {
	*memLedger
	used func() uint64
}

func (l *joinLedger) Allowance(string, string) (Allowance, bool) { return Allowance{Burst: 100}, true }
func (l *joinLedger) Balance(rule, key string) (float64, Counter) {
	return 100 - float64(l.get(rule+"/"+key)) - float64(l.used()), Counter{}
}
