package gossip

import (
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

// The ring spreads keys evenly enough, gives every key a distinct replica,
// and moves only the keys of a member that goes.
func TestRingBalanceAndStability(t *testing.T) {
	for _, n := range []int{3, 10, 100} {
		t.Run(fmt.Sprintf("members=%d", n), func(t *testing.T) {
			names := make([]string, n)
			for i := range names {
				names[i] = "node-" + strconv.Itoa(i)
			}
			r := newOwnerRing(names)
			smaller := newOwnerRing(names[1:]) // node-0 went
			const keys = 50000
			load := map[string]int{}
			moved := 0
			for k := range keys {
				key := "key-" + strconv.Itoa(k)
				o, rep := r.owners("api", key)
				if o == "" || rep == "" || o == rep {
					t.Fatalf("key %s: owner %q, replica %q", key, o, rep)
				}
				load[o]++
				o2, _ := smaller.owners("api", key)
				if o2 != o {
					moved++
					if o != "node-0" {
						t.Fatalf("key %s moved from %s to %s though %s stayed", key, o, o2, o)
					}
					if o2 != rep {
						t.Fatalf("key %s of the member that went moved to %s, not its replica %s", key, o2, rep)
					}
				}
			}
			most := 0
			for _, v := range load {
				most = max(most, v)
			}
			ratio := float64(most) / (float64(keys) / float64(n))
			t.Logf("most loaded member owns %.2f× the average; %d of %d keys moved when one of %d went", ratio, moved, keys, n)
			if ratio > 1.5 {
				t.Fatalf("most loaded member owns %.2f× the average, want ≤ 1.5", ratio)
			}
			if moved != load["node-0"] {
				t.Fatalf("moved %d keys, node-0 owned %d", moved, load["node-0"])
			}
		})
	}
	if o, rep := newOwnerRing([]string{"solo"}).owners("api", "k"); o != "solo" || rep != "" {
		t.Fatalf("one member: owner %q replica %q", o, rep)
	}
	if o, _ := (*ownerRing)(nil).owners("api", "k"); o != "" {
		t.Fatalf("no ring: owner %q", o)
	}
}

// Answers round-trip; malformed ones are refused whole.
func TestAnswerWire(t *testing.T) {
	w := &answerWriter{limit: 300, sender: "owner-1", at: 42}
	var want []ownerAnswer
	for i := range 20 {
		a := ownerAnswer{rule: "api", key: "k" + strconv.Itoa(i), gen: 7, prev: uint64(i), others: uint64(2 * i), ackEpoch: 9, ackUsed: uint64(i)}
		if i%3 == 0 {
			a.window = uint64(i + 1)
		}
		want = append(want, a)
		w.add(a)
	}
	packets := w.packets()
	if len(packets) < 2 {
		t.Fatalf("20 answers in %d packets of at most 300 bytes", len(packets))
	}
	var got []ownerAnswer
	for _, p := range packets {
		if len(p) > 300 {
			t.Fatalf("packet of %d bytes, limit 300", len(p))
		}
		sender, at, as, err := decodeAnswer(p)
		if err != nil || sender != "owner-1" || at != 42 {
			t.Fatalf("decode: %q %d %v", sender, at, err)
		}
		got = append(got, as...)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	bad := map[string][]byte{
		"empty":       {},
		"counters":    encodeResets("n", nil, false),
		"prev>others": (&answerWriter{limit: 1300, sender: "o", at: 1}).with(ownerAnswer{rule: "r", key: "k", prev: 2, others: 1}),
		"truncated":   packets[0][:len(packets[0])-1],
		"trailing":    append(append([]byte(nil), packets[0]...), 0),
		"lying count": {0x94, msgOwnerAnswer, 0xa1, 'o', 0xdd, 0xff, 0xff, 0xff, 0xff},
	}
	for name, b := range bad {
		if _, _, _, err := decodeAnswer(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// with encodes one answer (tests).
func (w *answerWriter) with(a ownerAnswer) []byte {
	w.add(a)
	return w.packets()[0]
}

// answerCharged has s receive answer a from sender, stamped at, in one
// packet, and returns the tokens the answer charges (tests).
func answerCharged(t testing.TB, s *Syncer, sender string, at time.Time, a ownerAnswer) uint64 {
	t.Helper()
	charges, err := s.receiveAnswer((&answerWriter{limit: 1400, sender: sender, at: uint64(at.UnixNano())}).with(a))
	if err != nil {
		t.Fatal(err)
	}
	var tokens uint64
	for _, c := range charges {
		tokens += c.tokens
	}
	return tokens
}

// clockedAnswer returns a function that moves clock on one gossip interval
// and has s receive from sender an answer for key (acknowledging its use 1)
// stamped then, returning the tokens it charges (tests on
// newClockedAggSyncer).
func clockedAnswer(t testing.TB, s *Syncer, clock *time.Time, key string) func(from string, gen, prev, others, ackEpoch uint64) uint64 {
	return func(from string, gen, prev, others, ackEpoch uint64) uint64 {
		t.Helper()
		*clock = clock.Add(s.cfg.GossipInterval)
		return answerCharged(t, s, from, *clock, ownerAnswer{rule: "api", key: key, gen: gen, prev: prev, others: others, ackEpoch: ackEpoch, ackUsed: 1})
	}
}

// An owner-counters packet is a stamped counters packet under kind 4, and
// decodes back to its counters.
func TestOwnerCountersWire(t *testing.T) {
	pw := newPacketWriter("n1", 1300)
	pw.add("n1", Counter{Rule: "api", Key: "k", Epoch: 5, Prev: 1, Used: 3})
	ps, _ := pw.packets()
	p := toOwnerPacket(ps[0], 99)
	if p[1] != msgOwnerCounters {
		t.Fatalf("kind byte %d", p[1])
	}
	var got []Counter
	sender, err := decodeOwnerCounters(p, func(s string, at uint64, stamped bool) error {
		if !stamped || at != 99 {
			t.Fatalf("stamp %d %v", at, stamped)
		}
		return nil
	}, func(origin string, c Counter) { got = append(got, c) })
	if err != nil || sender != "n1" || len(got) != 1 || got[0].Used != 3 || got[0].Prev != 1 {
		t.Fatalf("decoded %q %v %v", sender, got, err)
	}
	if _, err := decodeOwnerCounters(ps[0], nil, func(string, Counter) {}); err == nil {
		t.Fatal("a plain counters packet decoded as an owner one")
	}
}

// newOwnerSyncer is a bare syncer in owner mode whose members are the
// given names (no network).
func newOwnerSyncer(self string, members ...string) (*Syncer, *memLedger) {
	l := newMemLedger()
	s := &Syncer{cfg: Config{MaxSeen: 100, MaxPending: 100, FanoutLimit: 1, GossipMode: ModeOwner, GossipInterval: 20 * time.Millisecond, SeenTTL: time.Minute},
		ledger: l, self: self, seen: map[counterKey]*seenRange{}, pending: map[pendingKey]*pendingCounter{}, resets: newResetState(),
		log: hclog.NewNullLogger(), peers: map[string]memberlist.Node{}}
	for _, m := range members {
		s.peers[m] = memberlist.Node{Name: m, DMax: protoOwner}
	}
	s.members.Store(int64(len(members) + 1))
	return s, l
}

// An owner counts each contributor's cumulative counter once however often
// and in whatever order it comes, per epoch, from prev (the contributor's
// last acknowledged value) up; its answers tell each contributor the
// others' total, cumulatively, and how far its own counter was counted.
func TestOwnerAggregatesOnceAndAnswersCumulatively(t *testing.T) {
	s, _ := newOwnerSyncer("o", "a", "b")
	add := func(origin string, epoch, prev, used uint64) uint64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.aggregateLocked(false, Allowance{}, origin, Counter{Rule: "api", Key: "k", Epoch: epoch, Prev: prev, Used: used}, time.Second, time.Second)
	}
	steps := []struct {
		origin           string
		epoch, prev, use uint64
		want             uint64
	}{
		{"a", 1, 0, 5, 5},   // first counter
		{"a", 1, 0, 5, 0},   // repeated
		{"a", 1, 0, 8, 3},   // resent from the last ack, grown
		{"a", 1, 0, 7, 0},   // reordered: older
		{"b", 1, 10, 14, 4}, // first heard midway: only from its prev
		{"a", 2, 0, 2, 2},   // a's bucket began a new epoch
		{"a", 1, 0, 9, 0},   // a late counter of the epoch left behind
		{"b", 1, 20, 25, 5}, // b's prev above what was counted: the gap went to another owner
	}
	for i, st := range steps {
		if got := add(st.origin, st.epoch, st.prev, st.use); got != st.want {
			t.Fatalf("step %d (%+v): counted %d, want %d", i, st, got, st.want)
		}
	}
	s.mu.Lock()
	out := s.answersLocked(time.Second, 1)
	o := s.owner.mine[aggKey{"api", "k", 0}]
	s.mu.Unlock()
	if o.total != 19 {
		t.Fatalf("total %d, want 19", o.total)
	}
	told := map[string]uint64{}
	for _, o := range out {
		for _, p := range o.packets {
			_, _, as, err := decodeAnswer(p)
			if err != nil || len(as) != 1 {
				t.Fatalf("answer to %s: %v %v", o.to.Name, as, err)
			}
			told[o.to.Name] = as[0].others
		}
	}
	if len(told) != 2 || told["a"] != 9 || told["b"] != 10 {
		t.Fatalf("told others %v, want a 9, b 10", told)
	}
	if a, b := o.subs["a"], o.subs["b"]; a.sent != 9 || b.sent != 10 || a.epoch != 2 || a.hi != 2 || b.hi != 25 {
		t.Fatalf("subs a %+v b %+v", *a, *b)
	}
}

// A node charges what each answer adds to the last it heard from the same
// aggregate, keeps two aggregates per key apart (two owners during a
// membership change), charges a new one from the prev it names, takes
// answers only from the key's owner or replica, and stops sending what an
// answer acknowledges.
func TestAnswersChargeIncrementsAndAck(t *testing.T) {
	s, l := newOwnerSyncer("me", "n1", "n2", "n3")
	s.mu.Lock()
	s.refreshRingLocked()
	owner, replica := s.owner.ring.owners("api", "k")
	s.mu.Unlock()
	stranger := ""
	for _, n := range []string{"me", "n1", "n2", "n3"} {
		if n != owner && n != replica && n != "me" {
			stranger = n
		}
	}
	s.pending[pendingKey{counterKey{"me", "api", "k"}, 0, 4}] = &pendingCounter{c: Counter{Rule: "api", Key: "k", Epoch: 4, Prev: 0, Used: 10}, transmits: 3}
	answer := func(from string, gen, prev, others, ackUsed uint64) {
		w := &answerWriter{limit: 1300, sender: from, at: uint64(time.Now().UnixNano())}
		w.add(ownerAnswer{rule: "api", key: "k", gen: gen, prev: prev, others: others, ackEpoch: 4, ackUsed: ackUsed})
		charges, err := s.receiveAnswer(w.packets()[0])
		if err != nil {
			t.Fatal(err)
		}
		s.charge(charges)
	}
	charged := func() uint64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.charged["api/k"]
	}
	steps := []struct {
		from                     string
		gen, prev, others, acked uint64
		want                     uint64 // total charged after
	}{
		{owner, 1, 0, 30, 4, 30},    // first answer of gen 1: all of it
		{owner, 1, 30, 30, 4, 30},   // nothing new
		{owner, 1, 30, 45, 6, 45},   // 15 more
		{owner, 1, 30, 40, 6, 45},   // reordered, older: nothing
		{replica, 2, 5, 12, 6, 52},  // a second aggregate: from its prev
		{owner, 1, 45, 50, 6, 57},   // the first still counts
		{stranger, 3, 0, 99, 6, 57}, // neither owner nor replica: refused
		{replica, 2, 12, 20, 10, 65},
	}
	for i, st := range steps {
		answer(st.from, st.gen, st.prev, st.others, st.acked)
		if got := charged(); got != st.want {
			t.Fatalf("step %d (%+v): charged %d, want %d", i, st, got, st.want)
		}
		p := s.pending[pendingKey{counterKey{"me", "api", "k"}, 0, 4}]
		switch {
		case st.acked >= 10 && p != nil:
			t.Fatalf("step %d: acknowledged counter still pending", i)
		case st.acked < 10 && (p == nil || p.c.Prev != max(4, st.acked)):
			t.Fatalf("step %d: pending %+v, want prev %d", i, p, st.acked)
		}
	}
	if s.ownerRefused.Load() != 1 {
		t.Fatalf("refused %d answers, want 1", s.ownerRefused.Load())
	}
}

// A contributor new to an established aggregate is not told its history;
// one new to a fresh aggregate (a new owner) is told all of it.
func TestNewContributorIsNotChargedHistory(t *testing.T) {
	for _, tt := range []struct {
		name  string
		age   time.Duration
		prev0 uint64
	}{{"fresh aggregate", 0, 0}, {"established aggregate", time.Hour, 100}} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newOwnerSyncer("o", "a", "b")
			now := time.Now()
			s.now = func() time.Time { return now }
			s.born = now
			s.mu.Lock()
			defer s.mu.Unlock()
			s.aggregateLocked(false, Allowance{}, "a", Counter{Rule: "api", Key: "k", Epoch: 1, Used: 100}, time.Second, time.Second)
			now = now.Add(tt.age)
			s.aggregateLocked(false, Allowance{}, "b", Counter{Rule: "api", Key: "k", Epoch: 1, Used: 1}, time.Second, time.Second)
			if got := s.owner.mine[aggKey{"api", "k", 0}].subs["b"].sent; got != tt.prev0 {
				t.Fatalf("b is told prev %d, want %d", got, tt.prev0)
			}
		})
	}
}

// FuzzDecodeOwnerMessages: owner answers, owner-counters packets and heard
// messages from peers never panic or allocate beyond what their bytes hold, and an
// answer that decodes re-encodes to an equal one.
func FuzzDecodeOwnerMessages(f *testing.F) {
	w := &answerWriter{limit: 1300, sender: "owner", at: 5}
	w.add(ownerAnswer{rule: "api", key: "k", gen: 1, prev: 2, others: 3, ackEpoch: 4, ackUsed: 5})
	w.add(ownerAnswer{rule: "w", key: "k2", window: 9, gen: 1, others: 3})
	f.Add(w.packets()[0])
	w.users = true // entries with the owner's view (ownershare.go)
	w.add(ownerAnswer{rule: "api", key: "k", gen: 1, prev: 2, others: 3, users: 40, balance: -2.5})
	w.add(ownerAnswer{rule: "api", key: "k3", gen: 1, users: 1, balance: math.NaN()})
	f.Add(w.packets()[0])
	for _, p := range samplePackets() {
		f.Add(toOwnerPacket(p, 7))
	}
	for _, b := range malformedPeerBytes {
		f.Add(b)
	}
	hw := &heardWriter{limit: 1300, sender: "n1", at: 6}
	hw.add(heardAck{rule: "api", key: "k", gen: 1, start: 2, last: 3})
	hw.add(heardAck{rule: "w", key: "k2", window: 9, gen: 1, last: 3})
	f.Add(hw.packets()[0])
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeOwnerCounters(b, nil, func(string, Counter) {})
		fuzzHeardRoundTrip(t, b) // ownerrepeat_test.go
		sender, at, as, err := decodeAnswer(b)
		if err != nil {
			return
		}
		w := &answerWriter{limit: 1 << 30, sender: sender, at: at}
		for _, a := range as {
			w.add(a)
		}
		if len(as) == 0 {
			return
		}
		s2, at2, as2, err := decodeAnswer(w.packets()[0])
		if err != nil || s2 != sender || at2 != at || len(as2) != len(as) {
			t.Fatalf("re-encoded answer: %q %d %d entries, %v", s2, at2, len(as2), err)
		}
		for i := range as {
			if !sameAnswer(as[i], as2[i]) {
				t.Fatalf("entry %d: %+v became %+v", i, as[i], as2[i])
			}
		}
	})
}

// An owner sends at most ownerAnswerBudget answers a round; the rest go
// out in the next rounds, each contributor answered once.
func TestOwnerAnswersAreBudgeted(t *testing.T) {
	members := make([]string, 2*ownerAnswerBudget+10)
	for i := range members {
		members[i] = "n" + strconv.Itoa(i)
	}
	s, _ := newOwnerSyncer("o", members...)
	s.cfg.MaxSeen = 1 << 20
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range members {
		s.aggregateLocked(false, Allowance{}, m, Counter{Rule: "api", Key: "hot", Epoch: 1, Used: 1}, time.Second, time.Second)
	}
	answered := map[string]int{}
	for round := range 4 {
		n := 0
		for _, o := range s.answersLocked(time.Second, uint64(round)) {
			answered[o.to.Name]++
			n++
		}
		if n > ownerAnswerBudget {
			t.Fatalf("round %d: %d answers, budget %d", round, n, ownerAnswerBudget)
		}
	}
	if len(answered) != len(members) {
		t.Fatalf("%d of %d contributors answered after 4 rounds", len(answered), len(members))
	}
	for m, k := range answered {
		if k != 1 {
			t.Fatalf("%s answered %d times", m, k)
		}
	}
}
