package gossip

import (
	"fmt"
	"testing"
	"time"
)

// An aggregator tells its users (and its own ledger) the owner's balance
// from the owner's last answer to its group, plus the refill since, less
// what the group counted beyond that answer's acknowledgement: not its own
// balance, which lags the owner's (SCALING.md's fairness at 100 nodes: the
// owner 20-27% above its share). Until the owner says a balance, and once
// its last is older than aggBalanceFresh, it tells its own. A lying owner's
// balance is taken no higher than a full bucket, nor than this node's own
// plus 2 × viewLead, as any view.
func TestAggregatorTellsTheOwnersBalance(t *testing.T) {
	s, l := newAggSyncer("m000", 20)
	bl := &boundLedger{memLedger: l, a: Allowance{Burst: 100, PerSecond: 10}}
	s.ledger = bl
	now := time.Now()
	s.now = func() time.Time { return now }
	s.born = now.Add(-time.Second)
	s.mu.Lock()
	s.refreshRingLocked()
	key, owner := "", ""
	for i := range 1000 { // a key this node neither owns nor replicates
		o, r := s.owner.ring.owners("r", fmt.Sprintf("k%d", i))
		if o != "m000" && r != "m000" {
			key, owner = fmt.Sprintf("k%d", i), o
			break
		}
	}
	user := "m001"
	if user == owner {
		user = "m002"
	}
	k := aggKey{"r", key, 0}
	al := bl.a
	g := s.aggGroupLocked(k, s.sinceBorn())
	count := func(used uint64) {
		t.Helper()
		tokens := s.aggregateLocked(true, al, user, Counter{Rule: "r", Key: key, Epoch: 1, Prev: 0, Used: used}, s.sinceBorn(), s.sinceBorn())
		bl.Charge("r", key, 0, tokens)
	}
	balance := func() float64 {
		o := s.owner.mine[k]
		s.countUsersLocked(k, o, s.sinceBorn())
		return o.balance
	}
	count(10)
	if got := balance(); got != 90 {
		t.Fatalf("before the owner's answer the group is told %v, want this node's own balance 90", got)
	}
	s.mu.Unlock()

	// The owner answers the group: 30 consumed elsewhere, the group's 10
	// counted, a balance of 40 (its bucket lost less to the cap than this
	// node's: this node's own will be 100-10-30 = 60).
	answer := (&answerWriter{limit: 1300, sender: owner, at: uint64(now.UnixNano()), users: true}).with(ownerAnswer{
		rule: "r", key: key, gen: 7, prev: 0, others: 30, ackEpoch: g.epoch, ackUsed: 10, users: 50, balance: 40})
	charges, _, err := s.receiveAnswerViews(answer)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range charges {
		bl.Charge(c.rule, c.key, c.window, c.tokens)
	}
	s.mu.Lock()
	count(25) // 15 more in the group, not in the owner's balance yet
	if got, own := balance(), 100-10-30-15.0; got != 40-15 {
		t.Fatalf("the group is told %v, want the owner's 40 less the group's 15 since (its own balance is %v)", got, own)
	}
	// The aggregator's own share is of the same balance, its own
	// consumption counted as far as the group has.
	s.aggregateOwnLocked(Counter{Rule: "r", Key: key, Epoch: 3, Prev: 0, Used: 4}, s.sinceBorn())
	s.owner.selfViews = nil
	s.selfViewLocked(k, 50)
	if v := s.owner.selfViews; len(v) != 1 || v[0].view != (OwnerView{Users: 50, Balance: 40 - 19, AckEpoch: 3, AckUsed: 4}) {
		t.Fatalf("its own view %+v, want 50 users, a balance of 21, its own 4 of epoch 3 counted", v)
	}
	s.mu.Unlock()

	// Its users are told so.
	out := s.aggTakeQueued()
	if len(out) != 1 || out[0].to.Name != user {
		t.Fatalf("answers %+v, want one to %s", out, user)
	}
	_, _, as, err := decodeAnswer(out[0].packets[0])
	if err != nil || len(as) != 1 || as[0].balance != 21 || as[0].users != 50 {
		t.Fatalf("answer to its user %+v (%v), want 50 users and a balance of 21", as, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now = now.Add(100 * time.Millisecond)
	if got := balance(); got != 21+1 {
		t.Fatalf("100 ms later the group is told %v, want 22 (the refill since: 1)", got)
	}
	now = now.Add(aggBalanceFresh)
	if got, _ := bl.Balance("r", key); balance() != got {
		t.Fatalf("with the owner's balance stale the group is told %v, want this node's own %v", balance(), got)
	}
	s.mu.Unlock()

	// A lying owner: a balance of 10^300.
	lie := (&answerWriter{limit: 1300, sender: owner, at: uint64(now.UnixNano()), users: true}).with(ownerAnswer{
		rule: "r", key: key, gen: 7, prev: 0, others: 30, ackEpoch: g.epoch, ackUsed: 29, users: 50, balance: 1e300})
	if _, _, err := s.receiveAnswerViews(lie); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	if got := balance(); got != 100 {
		t.Fatalf("told %v after an owner's balance of 10^300, want at most a full bucket (100)", got)
	}
	bl.Charge("r", key, 0, 500) // this node's own far in debt
	own, _ := bl.Balance("r", key)
	if got, top := balance(), own+2*viewLead(al); got != top {
		t.Fatalf("told %v after an owner's balance of 10^300, want it bounded at %v (own %v + 2 × viewLead)", got, top, own)
	}
}
