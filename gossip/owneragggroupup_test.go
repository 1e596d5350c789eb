package gossip

import (
	"fmt"
	"testing"
	"time"
)

// An aggregator takes its group's numbering from the owner's first answer
// to the group (its others, whatever its prev), so a lower prev of the same
// subscription arriving later (two answers sent within a few microseconds
// and reordered on the way) charges this node what it had not been charged,
// and adds nothing to the group: what lies below that first others is in
// the numbering already. It added it again: 1,000 simulated nodes, 10% churn
// a minute, seed 3: the owner answered a new group prev 0 then prev 88,
// others 88 both; they arrived the other way round, the group's numbering
// ran 88 above the owner's and each of its 31 users was charged 88 more
// than the cluster admitted. A later subscription of the group (another
// owner) is not so taken: its repair is news to the group too.
func TestReorderedFirstAnswerAddsNothingToTheGroup(t *testing.T) {
	s, clock := newClockedAggSyncer(20)
	s.mu.Lock()
	key, owner, replica := "", "", ""
	for i := range 1000 { // a key this node neither owns nor replicates
		if o, r := s.owner.ring.owners("api", fmt.Sprint("k", i)); o != s.self && r != s.self {
			key, owner, replica = fmt.Sprint("k", i), o, r
			break
		}
	}
	user := "m001"
	for user == owner || user == replica {
		user = fmt.Sprintf("m%03d", int(user[3]-'0')+1)
	}
	k := aggKey{"api", key, 0}
	g := s.aggGroupLocked(k, s.sinceBorn())
	s.aggregateLocked(false, Allowance{}, user, Counter{Rule: "api", Key: key, Epoch: 1, Used: 5}, s.sinceBorn(), s.sinceBorn())
	s.mu.Unlock()

	answer := func(from string, gen, prev, others uint64) uint64 {
		t.Helper()
		*clock = clock.Add(10 * time.Microsecond)
		return answerCharged(t, s, from, *clock, ownerAnswer{
			rule: "api", key: key, gen: gen, prev: prev, others: others, ackEpoch: g.epoch, ackUsed: 5})
	}
	told := func() uint64 { // what the group tells its user: others in the owner's numbering
		s.mu.Lock()
		defer s.mu.Unlock()
		o := s.owner.mine[k]
		return o.total - o.subs[user].contrib
	}
	steps := []struct {
		what                string
		from                string
		gen, prev, others   uint64
		charged, up, toUser uint64
	}{
		{"the owner's second answer arrives first", owner, 7, 88, 88, 0, 88, 88},
		{"its first answer after it: what it carried is charged here", owner, 7, 0, 88, 88, 88, 88},
		{"11 more", owner, 7, 88, 99, 11, 99, 99},
		{"the replica's first answer to the group (a failover): a new subscription", replica, 9, 120, 130, 10, 109, 109},
		{"its first prev arrives late: 20 more the replica told, news to the group too", replica, 9, 100, 130, 20, 129, 129},
	}
	var total uint64
	for _, st := range steps {
		got := answer(st.from, st.gen, st.prev, st.others)
		total += got
		s.mu.Lock()
		up := g.up
		s.mu.Unlock()
		if got != st.charged || up != st.up || told() != st.toUser {
			t.Errorf("%s: charged %d, group's numbering %d, its user told %d; want %d, %d, %d",
				st.what, got, up, told(), st.charged, st.up, st.toUser)
		}
	}
	if total != 129 {
		t.Errorf("charged %d in all, want the 129 the owner and the replica told", total)
	}
}
