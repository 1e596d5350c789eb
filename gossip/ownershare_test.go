package gossip

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// sameAnswer compares two answers, a NaN balance equal to itself.
func sameAnswer(a, b ownerAnswer) bool {
	ab, bb := a.balance, b.balance
	a.balance, b.balance = 0, 0
	return a == b && math.Float64bits(ab) == math.Float64bits(bb)
}

// Answers to a receiver that reads the owner's view carry users and the
// owner's balance (window 0 included); older receivers' entries are as
// before; an infinite balance is refused.
func TestAnswerViewWire(t *testing.T) {
	for _, tt := range []struct {
		name   string
		users  bool
		in     ownerAnswer
		fields byte
	}{
		{"older receiver", false, ownerAnswer{rule: "api", key: "k", gen: 1, others: 3, users: 9, balance: 4}, 0x97},
		{"view", true, ownerAnswer{rule: "api", key: "k", gen: 1, others: 3, users: 9, balance: -4.5}, 0x9a},
		{"view, windowed", true, ownerAnswer{rule: "api", key: "k", window: 7, gen: 1, others: 3, users: 2, balance: 1}, 0x9a},
		{"view, no balance", true, ownerAnswer{rule: "api", key: "k", gen: 1, others: 3, users: 2, balance: math.NaN()}, 0x9a},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := &answerWriter{limit: 1300, sender: "o", at: 1, users: tt.users}
			p := w.with(tt.in)
			entry := p[1+1+2+1] // header, kind, "o", entries' array header
			if entry != tt.fields {
				t.Fatalf("entry header %#x, want %#x", entry, tt.fields)
			}
			_, _, as, err := decodeAnswer(p)
			if err != nil || len(as) != 1 {
				t.Fatalf("decode: %v %v", as, err)
			}
			want := tt.in
			if !tt.users {
				want.users, want.balance = 0, 0
			} else {
				want.view = true
			}
			if !sameAnswer(as[0], want) {
				t.Fatalf("decoded %+v, want %+v", as[0], want)
			}
		})
	}
	w := &answerWriter{limit: 1300, sender: "o", at: 1, users: true}
	if _, _, _, err := decodeAnswer(w.with(ownerAnswer{rule: "r", key: "k", users: 1, balance: math.Inf(1)})); err == nil {
		t.Fatal("an infinite balance was accepted")
	}
}

// A touch (a counter with nothing new admitted) is queued only in owner
// mode, at most once per keep-alive (half the users window) since the
// key's last own counter; counters always are.
func TestTouchesAreKeptAlive(t *testing.T) {
	s, _ := newOwnerSyncer("me", "o")
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }
	s.born = now
	touch := Counter{Rule: "api", Key: "k", Epoch: 1, Prev: 5, Used: 5}
	counter := Counter{Rule: "api", Key: "k", Epoch: 1, Prev: 5, Used: 6}
	steps := []struct {
		after time.Duration
		c     Counter
		owner bool
		want  bool
	}{
		{0, touch, false, false},  // another mode: dropped
		{0, counter, false, true}, // another mode: counters as ever
		{0, touch, true, true},    // first: sent
		{100 * time.Millisecond, touch, true, false},
		{100 * time.Millisecond, counter, true, true},
		{600 * time.Millisecond, touch, true, true}, // half the window (1 s) after the counter
	}
	for i, st := range steps {
		now = now.Add(st.after)
		s.mu.Lock()
		got := s.ownSendLocked(st.c, st.owner)
		s.mu.Unlock()
		if got != st.want {
			t.Fatalf("step %d (%+v): queued %v, want %v", i, st, got, st.want)
		}
	}
}

// viewLedger records the owner's views it is told.
type viewLedger struct {
	*memLedger
	mu    sync.Mutex
	views map[string]OwnerView
}

func (l *viewLedger) OwnerView(rule, key string, _ uint64, v OwnerView) {
	l.mu.Lock()
	l.views[rule+"/"+key] = v
	l.mu.Unlock()
}

// An owner counts as users the contributors heard within the users window,
// by counter or touch; it answers a touch at once even from a contributor
// that has gone idle (one that has not admitted for ownerActiveTTL); it
// tells receivers of this version the count and its balance, and older
// ones neither; and its own ledger hears its own count.
func TestOwnerCountsUsersAndAnswersTouches(t *testing.T) {
	s, ml := newOwnerSyncer("o", "a", "b", "c", "old")
	vl := &viewLedger{memLedger: ml, views: map[string]OwnerView{}}
	s.ledger = vl
	for _, m := range []string{"a", "b", "c"} {
		s.peers[m] = memberlist.Node{Name: m, DMax: protoOwnerShare}
	}
	k := aggKey{"api", "k", 0}
	count := func(origin string, used, prev uint64, at time.Duration) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if origin == "o" {
			s.aggregateOwnLocked(Counter{Rule: "api", Key: "k", Epoch: 1, Prev: prev, Used: used}, at)
			return
		}
		s.aggregateLocked(false, Allowance{}, origin, Counter{Rule: "api", Key: "k", Epoch: 1, Prev: prev, Used: used}, at, at)
	}
	answers := func(at time.Duration) map[string]ownerAnswer {
		s.mu.Lock()
		out := s.answersLocked(at, 1)
		self := s.owner.selfViews
		s.owner.selfViews = nil
		s.mu.Unlock()
		s.tellViews(self)
		got := map[string]ownerAnswer{}
		for _, o := range out {
			for _, p := range o.packets {
				_, _, as, err := decodeAnswer(p)
				if err != nil || len(as) != 1 {
					t.Fatalf("answer to %s: %v %v", o.to.Name, as, err)
				}
				got[o.to.Name] = as[0]
			}
		}
		return got
	}
	count("a", 3, 0, time.Second)
	count("b", 0, 0, time.Second) // a touch: a newcomer refused
	count("old", 2, 0, time.Second)
	count("o", 1, 0, time.Second)
	got := answers(time.Second)
	if len(got) != 3 || got["a"].users != 4 || got["b"].users != 4 || !got["a"].view || got["old"].view {
		t.Fatalf("first answers %+v: want a, b and old answered, users 4 told to a and b only", got)
	}
	if v := vl.views["api/k"]; v.Users != 4 || !math.IsNaN(v.Balance) {
		t.Fatalf("the owner's own view %+v, want 4 users", v)
	}
	// Five seconds on: b touches again (idle: it has admitted nothing), a
	// admits; old and o are gone from the window.
	count("a", 4, 3, 6*time.Second)
	count("b", 0, 0, 6*time.Second)
	got = answers(6 * time.Second)
	if _, ok := got["b"]; !ok || got["b"].users != 2 || got["a"].users != 2 {
		t.Fatalf("answers %+v: want the idle b answered at once, 2 users", got)
	}
	if o := s.owner.mine[k]; o.subs["b"].heard != time.Second {
		t.Fatalf("a touch made b active: heard %s", o.subs["b"].heard)
	}
	// c is told nothing: it never used the key.
	if _, ok := got["c"]; ok {
		t.Fatal("c answered")
	}
}

// A receiver passes the owner's view of each answered key to its ledger;
// a node whose counters went unanswered for ownerFailover rounds, and that
// heard no answer for the key for ownerLostAfter, is told its owner is
// lost (users 0).
func TestOwnerViewReachesTheLedger(t *testing.T) {
	s, ml := newOwnerSyncer("me", "n1", "n2", "n3")
	vl := &viewLedger{memLedger: ml, views: map[string]OwnerView{}}
	s.ledger = vl
	now := time.Now()
	s.now = func() time.Time { return now }
	s.born = now
	s.mu.Lock()
	s.refreshRingLocked()
	owner, _ := s.owner.ring.owners("api", "k")
	s.mu.Unlock()
	sentCounter(s, "api", "k") // ownerunsolicited.go
	w := &answerWriter{limit: 1300, sender: owner, at: uint64(time.Now().UnixNano()), users: true}
	w.add(ownerAnswer{rule: "api", key: "k", gen: 1, others: 30, ackEpoch: 4, ackUsed: 2, users: 12, balance: 7.5})
	charges, users, err := s.receiveAnswerViews(w.packets()[0])
	if err != nil {
		t.Fatal(err)
	}
	s.charge(charges)
	s.tellViews(users)
	if v := vl.views["api/k"]; v != (OwnerView{Users: 12, Balance: 7.5, AckEpoch: 4, AckUsed: 2, Interval: 20 * time.Millisecond}) {
		t.Fatalf("view %+v", v)
	}
	fail := func() []keyView {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.owner.failover, [2]string{"api", "k"})
		for range ownerFailover + 1 {
			s.owner.round++
			s.ownerForLocked("api", "k")
		}
		lost := s.owner.selfViews
		s.owner.selfViews = nil
		return lost
	}
	if lost := fail(); len(lost) != 0 {
		t.Fatalf("an answer just heard, then %d unanswered rounds: %+v, want the owner still there (late)", ownerFailover, lost)
	}
	now = now.Add(2 * ownerLostAfter)
	if lost := fail(); len(lost) != 1 || lost[0].view.Users != 0 || lost[0].key != "k" {
		t.Fatalf("no answer for %s and %d unanswered rounds: %+v, want the owner lost", 2*ownerLostAfter, ownerFailover, lost)
	}
}
