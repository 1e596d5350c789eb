package gossip

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// newAggSyncer is newOwnerSyncer whose members all speak aggregation.
func newAggSyncer(self string, n int) (*Syncer, *memLedger) {
	members := make([]string, 0, n-1)
	for i := range n {
		if name := fmt.Sprintf("m%03d", i); name != self {
			members = append(members, name)
		}
	}
	s, l := newOwnerSyncer(self, members...)
	for _, m := range members {
		s.peers[m] = memberlist.Node{Name: m, DMax: protoAgg}
	}
	s.cfg.AggregateAbove = DefaultAggregateAbove
	return s, l
}

// newClockedAggSyncer is newAggSyncer("m000", n) on a fixed clock the test
// moves through the pointer it returns, born a minute before, its ring
// built.
func newClockedAggSyncer(n int) (*Syncer, *time.Time) {
	s, _ := newAggSyncer("m000", n)
	clock := new(time.Time)
	*clock = time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return *clock }
	s.born = clock.Add(-time.Minute)
	s.mu.Lock()
	s.refreshRingLocked()
	s.mu.Unlock()
	return s, clock
}

// setAggMember has s see member name, which speaks aggregation, join (in)
// or leave, and rebuilds its ring.
func setAggMember(s *Syncer, name string, in bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in {
		s.peers[name] = memberlist.Node{Name: name, DMax: protoAgg}
	} else {
		delete(s.peers, name)
	}
	s.ownerMemberLocked(name)
	s.refreshRingLocked()
}

// joinAndHandOn has s see joiner join (it takes over the aggregation point
// s held for key k), runs one aggregation round at now, which hands s's
// group on, and fails t if s still holds a group of k.
func joinAndHandOn(t *testing.T, s *Syncer, joiner string, k aggKey, now time.Time) {
	t.Helper()
	setAggMember(s, joiner, true)
	s.mu.Lock()
	s.aggRoundLocked(s.sinceBorn(), uint64(now.UnixNano()))
	g := s.owner.agg.groups[k]
	s.mu.Unlock()
	if g != nil {
		t.Fatal("the group was not handed on")
	}
}

func TestAggFanIn(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{1, 2}, {4, 2}, {5, 4}, {16, 4}, {17, 8}, {100, 16}, {1000, 32}, {3000, 64}, {10000, 128},
	} {
		if got := aggFanIn(tc.n); got != tc.want {
			t.Errorf("aggFanIn(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// Every user's aggregator of a key is one of the key's k slot aggregators,
// never its owner or replica; the owner's count of the members its ring
// assigns to each aggregator is exactly who chooses it; and the groups are
// about N/k each.
func TestAggregatorChoiceMatchesTheOwnersCount(t *testing.T) {
	const n = 300
	s, _ := newAggSyncer("m000", n)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.aggCapableLocked() {
		t.Fatal("a ring of members that all speak protoAgg is not capable")
	}
	r := s.owner.ring
	k := aggFanIn(n)
	for key := range 20 {
		key := fmt.Sprintf("key-%d", key)
		owner, replica := r.owners("api", key)
		chosen := map[string]int{}
		for _, m := range r.names {
			if m == owner {
				continue
			}
			a := r.aggregatorFor("api", key, m, 0)
			if a == "" || a == owner || a == replica {
				t.Fatalf("%s: member %s's aggregator %q (owner %s, replica %s)", key, m, a, owner, replica)
			}
			if a2 := r.aggregatorFor("api", key, m, 0); a2 != a {
				t.Fatalf("%s: aggregator of %s not stable: %s then %s", key, m, a, a2)
			}
			chosen[a]++
		}
		if len(chosen) > k {
			t.Fatalf("%s: %d aggregators, want at most %d", key, len(chosen), k)
		}
		most := 0
		for a, c := range chosen {
			if got := s.aggUsersLocked("api", key, a); got != c {
				t.Fatalf("%s: owner counts %d members for %s, %d chose it", key, got, a, c)
			}
			most = max(most, c)
		}
		if most > 4*n/k {
			t.Fatalf("%s: an aggregator has %d users, N/k = %d", key, most, n/k)
		}
		if got := s.aggUsersLocked("api", key, owner); got != 0 {
			t.Fatalf("%s: the owner counted as an aggregator of %d", key, got)
		}
	}
}

func TestAggWire(t *testing.T) {
	w := &noticeWriter{limit: 1300, sender: "o", at: 42}
	w.add(aggNotice{"api", "k1", 7, 1, 2, 0, 5, 6})
	w.add(aggNotice{"api", "k2", 1 << 40, 3, 4, 1 << 33, 9, 1 << 50})
	ps := w.packets()
	if len(ps) != 1 {
		t.Fatalf("%d notice packets", len(ps))
	}
	sender, at, keys, err := decodeNotice(ps[0])
	if err != nil || sender != "o" || at != 42 || len(keys) != 2 || keys[1] != (aggNotice{"api", "k2", 1 << 40, 3, 4, 1 << 33, 9, 1 << 50}) {
		t.Fatalf("notice decoded as %q %d %v %v", sender, at, keys, err)
	}
	for i := range len(ps[0]) - 1 {
		if _, _, _, err := decodeNotice(ps[0][:i]); err == nil {
			t.Fatalf("a notice cut at %d bytes decoded", i)
		}
	}
	pw := newPacketWriter("a", 1300)
	pw.add("a", Counter{Rule: "api", Key: "k", Epoch: 3, Prev: 1, Used: 9})
	plain, _ := pw.packets()
	gw := newPacketWriter("a", 1300) // a group counter carries its users
	gw.addEntry("a", Counter{Rule: "api", Key: "k", Epoch: 3, Prev: 1, Used: 9}, 37, true)
	gw.addEntry("a", Counter{Rule: "api", Key: "w", Epoch: 3, Prev: 1, Used: 9, Window: 1 << 33}, 1<<40, true)
	group, _ := gw.packets()
	for _, tt := range []struct {
		kind  byte
		plain []byte
		users []uint64
	}{{msgAggUsers, plain[0], []uint64{0}}, {msgAggGroup, group[0], []uint64{37, 1 << 40}}} {
		kind := tt.kind
		p := toAggPacket(tt.plain, 11, kind)
		var got []Counter
		var users []uint64
		sender, err := decodeAggCounters(p, kind, func(_ string, at uint64, stamped bool) error {
			if !stamped || at != 11 {
				t.Fatalf("kind %d: stamp %d %v", kind, at, stamped)
			}
			return nil
		}, func(_ string, c Counter, u uint64) { got, users = append(got, c), append(users, u) })
		if err != nil || sender != "a" || len(got) != len(tt.users) || got[0].Used != 9 || !slices.Equal(users, tt.users) {
			t.Fatalf("kind %d decoded as %q %v users %v %v", kind, sender, got, users, err)
		}
		if kind == msgAggGroup && got[1].Window != 1<<33 {
			t.Fatalf("group counter's window decoded as %d", got[1].Window)
		}
		other := msgAggUsers + msgAggGroup - kind
		if _, err := decodeAggCounters(p, other, nil, func(string, Counter, uint64) {}); err == nil {
			t.Fatalf("a packet of kind %d decoded as kind %d", kind, other)
		}
	}
	if _, err := decodeAggCounters(toAggPacket(plain[0], 11, msgAggGroup), msgAggGroup, nil, func(string, Counter, uint64) {}); err == nil {
		t.Fatal("a group counter without its users decoded")
	}
	if _, err := decodeAggCounters(toOwnerPacket(plain[0], 1), msgAggUsers, nil, func(string, Counter, uint64) {}); err == nil {
		t.Fatal("an owner-counters packet decoded as a user's to its aggregator")
	}
}

// An owner counts a group counter only from a member its ring names as an
// aggregator of the key, once (cumulative, per group epoch), and no more
// than the allowance of 2n+2 origins (n the members assigned to it): a
// forged aggregate cannot drain the key beyond what those users could
// have admitted.
func TestGroupCountersAreBoundedAndOnlyFromAggregators(t *testing.T) {
	const n = 100
	s, _ := newAggSyncer("m000", n)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshRingLocked()
	key := ""
	for i := range 1000 { // a key this node owns
		if o, _ := s.owner.ring.owners("api", fmt.Sprintf("k%d", i)); o == "m000" {
			key = fmt.Sprintf("k%d", i)
			break
		}
	}
	if key == "" {
		t.Fatal("no key owned by m000")
	}
	owner, replica := s.owner.ring.owners("api", key)
	agg, stranger := "", ""
	for _, m := range s.owner.ring.names {
		switch {
		case m == owner || m == replica:
		case s.aggUsersLocked("api", key, m) > 0 && agg == "":
			agg = m
		case s.aggUsersLocked("api", key, m) == 0 && stranger == "":
			stranger = m
		}
	}
	users := s.aggUsersLocked("api", key, agg)
	al := Allowance{Burst: 100, PerSecond: 100}
	count := func(from string, epoch, prev, used uint64, at time.Duration) (uint64, bool) {
		tokens, _, ok := s.groupCountLocked(true, al, from, Counter{Rule: "api", Key: key, Epoch: epoch, Prev: prev, Used: used}, 1, at, at)
		return tokens, ok
	}
	if _, ok := count(stranger, 1, 0, 50, time.Second); ok {
		t.Fatalf("a group counter from %s, no aggregator of the key, was counted", stranger)
	}
	if got, ok := count(agg, 1, 0, 50, time.Second); !ok || got != 50 {
		t.Fatalf("first group counter: counted %d (%v), want 50", got, ok)
	}
	if got, _ := count(agg, 1, 0, 50, time.Second); got != 0 {
		t.Fatalf("a repeated group counter counted %d", got)
	}
	if got, _ := count(agg, 1, 50, 60, time.Second); got != 10 {
		t.Fatalf("a grown group counter counted %d, want 10", got)
	}
	most := s.owner.agg.counts[[2]string{"api", key}].most
	limit := float64(2*users+2*most+2) * (al.Burst + al.PerSecond*firstSlack.Seconds())
	got, _ := count(agg, 1, 60, 1<<40, time.Second)
	if float64(got+60) > limit+1 || got == 0 {
		t.Fatalf("a forged aggregate of 2^40 from an aggregator of %d users counted %d; its users' allowance is %.0f", users, got, limit)
	}
	if s.stats.SuspiciousReports.Load() < 2 {
		t.Fatalf("suspicious reports %d, want the stranger's and the forged one", s.stats.SuspiciousReports.Load())
	}
	o := s.owner.mine[aggKey{"api", key, 0}]
	if sub := o.subs[aggGroupPrefix+agg]; sub == nil || o.total != sub.contrib {
		t.Fatalf("the group is not counted apart from %s's own consumption: %+v", agg, o.subs)
	}
	// The rings disagree for a moment (a member died): agg is no aggregator
	// of the key on this node's ring any more. Its group, counted already,
	// is counted on (its users' consumption is not lost); a stranger's is not.
	s.owner.agg.counts[[2]string{"api", key}].n[agg] = 0
	if got, ok := count(agg, 2, 0, 5, 20*time.Second); !ok || got != 5 {
		t.Fatalf("the group of an aggregator the ring no longer names: counted %d (%v), want 5", got, ok)
	}
	if _, ok := count(stranger, 1, 0, 5, 20*time.Second); ok {
		t.Fatalf("a group counter from %s, no aggregator of the key, was counted after a ring change", stranger)
	}
}

// A user told to aggregate starts its first subscription on the
// aggregated path from the owner's total in the notice (exact: the
// aggregator's numbering is the owner's); any later one charges only the
// debt the sender sees beyond its own.
func TestFirstAggregatedAnswerStartsFromTheNotice(t *testing.T) {
	s, _ := newAggSyncer("m000", 20)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshRingLocked()
	k := [2]string{"api", "k"}
	s.owner.agg.hot = map[[2]string]*aggUse{k: {baseSet: true, base: 500}}
	a := s.aggFirstLocked("agg1", ownerAnswer{rule: "api", key: "k", gen: 1, prev: 0, others: 530}, false)
	if a.prev != 500 {
		t.Fatalf("first answer's prev %d, want the notice's 500 (charge 30)", a.prev)
	}
	// memLedger is no BoundedLedger: a later subscription keeps the sender's prev.
	a = s.aggFirstLocked("agg2", ownerAnswer{rule: "api", key: "k", gen: 2, prev: 520, others: 540}, false)
	if a.prev != 520 {
		t.Fatalf("second subscription's prev %d, want the sender's 520", a.prev)
	}
	// The owner's answers to this node's own counters are left alone.
	a = s.aggFirstLocked("m001", ownerAnswer{rule: "api", key: "k", gen: 3, prev: 0, others: 999}, true)
	if a.prev != 0 {
		t.Fatalf("an owner's answer changed: prev %d", a.prev)
	}
}

// An aggregator that makes its group after it heard the key through
// another aggregator takes the owner's first answer to its group from what
// that one told it, not from what the owner last told it directly: it is
// not charged twice what it heard there.
func TestGroupsFirstAnswerStartsFromWhatItsAggregatorTold(t *testing.T) {
	s, _ := newAggSyncer("m000", 20)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshRingLocked()
	owner, _ := s.owner.ring.owners("api", "k")
	k := aggKey{"api", "k", 0}
	now := s.sinceBorn()
	g := s.aggGroupLocked(k, now)
	s.owner.agg.hot = map[[2]string]*aggUse{{"api", "k"}: {used: now, heardFrom: "agg1"}}
	s.owner.heard = map[aggKey]*heardKey{k: {slots: [2]heardSlot{{owner: owner, gen: 1, last: 400, at: now}, {owner: "agg1", gen: 2, last: 600, at: now}}}}
	a := s.aggFirstLocked(owner, ownerAnswer{rule: "api", key: "k", gen: 3, prev: 500, others: 650, ackEpoch: g.epoch}, true)
	if a.prev != 600 {
		t.Fatalf("group's first answer: prev %d, want what agg1 told (600: charge 50, not 150)", a.prev)
	}
	// Heard long ago (a ring change since, perhaps): the owner's prev.
	s.owner.heard[k].slots[1].at = now - 10*s.activeTTL()
	a = s.aggFirstLocked(owner, ownerAnswer{rule: "api", key: "k", gen: 4, prev: 500, others: 650, ackEpoch: g.epoch}, true)
	if a.prev != 500 {
		t.Fatalf("group's first answer after a stale aggregator: prev %d, want the owner's 500", a.prev)
	}
}

// A notice acknowledges what the owner counted of the user's counter: the
// owner's answer saying so may wait for its answer budget (thousands of
// users) while the user already sends to its aggregator, which would
// count that part a second time (the cluster then admitted 95.8% of the
// limit at 3,000 simulated nodes, 101.0% with the notice's ack).
func TestNoticeAcknowledgesWhatTheOwnerCounted(t *testing.T) {
	s, _ := newAggSyncer("m000", 20)
	s.mu.Lock()
	s.refreshRingLocked()
	owner, _ := s.owner.ring.owners("api", "k")
	p := &pendingCounter{c: Counter{Rule: "api", Key: "k", Epoch: 4, Prev: 2, Used: 10}, transmits: ownerResends}
	k := pendingKey{counterKey{"m000", "api", "k"}, 0, 4}
	s.pending[k] = p
	s.mu.Unlock()

	// The owner's side: a user whose counter it counted to 8 and has not
	// answered yet.
	o, _ := newAggSyncer(owner, 20)
	o.mu.Lock()
	ak := aggKey{"api", "k", 0}
	agg := o.aggregateFor(ak)
	o.aggregateLocked(false, Allowance{}, "m000", Counter{Rule: "api", Key: "k", Epoch: 4, Prev: 2, Used: 8}, time.Second, time.Second)
	o.aggNoticeLocked("m000", ak)
	var notices [][]byte
	o.aggNoticesLocked(uint64(o.clock().UnixNano()), func(_ string, ps [][]byte, _ []int) { notices = append(notices, ps...) })
	o.mu.Unlock()
	if len(notices) != 1 || agg.subs["m000"].hi != 8 {
		t.Fatalf("%d notices, owner counted %d", len(notices), agg.subs["m000"].hi)
	}
	if err := s.receiveNotice(notices[0]); err != nil {
		t.Fatalf("receiving the notice: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.c.Prev != 8 {
		t.Fatalf("pending counter's prev %d after the notice, want the owner's 8 (only 9..10 left to send)", p.c.Prev)
	}
	if u := s.owner.agg.hot[[2]string{"api", "k"}]; u == nil {
		t.Fatal("the notice did not route the key through aggregators")
	}
}

// A notice to a node whose group already counts in the owner's numbering
// (it aggregates the key, and the owner answered its group) leaves no base
// for the aggregated path's first answer: one left set, at 0, made the
// owner's next answer to the group whose slot this node had lost (three
// subscriptions of the key, two slots, during a failover) start from 0 and
// charge the key's whole history (100 simulated nodes, the owner silent
// 4 s: an aggregator charged 562 tokens too many, its 8 users 552-559 over
// what the others admitted).
func TestNoticeToAnAggregatorSetsNoBase(t *testing.T) {
	s, _ := newAggSyncer("m000", 20)
	s.mu.Lock()
	s.refreshRingLocked()
	owner, _ := s.owner.ring.owners("api", "k")
	k := aggKey{"api", "k", 0}
	g := s.aggGroupLocked(k, s.sinceBorn())
	g.upSet, g.up = true, 900
	s.mu.Unlock()

	o, _ := newAggSyncer(owner, 20)
	o.mu.Lock()
	o.aggregateFor(k)
	o.aggregateLocked(false, Allowance{}, "m000", Counter{Rule: "api", Key: "k", Epoch: 4, Prev: 2, Used: 8}, time.Second, time.Second)
	o.aggNoticeLocked("m000", k)
	var notices [][]byte
	o.aggNoticesLocked(uint64(o.clock().UnixNano()), func(_ string, ps [][]byte, _ []int) { notices = append(notices, ps...) })
	o.mu.Unlock()
	if len(notices) != 1 {
		t.Fatalf("%d notices", len(notices))
	}
	if err := s.receiveNotice(notices[0]); err != nil {
		t.Fatalf("receiving the notice: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.owner.agg.hot[[2]string{"api", "k"}]; u == nil || u.baseSet {
		t.Fatalf("after the notice: %+v, want a key routed through aggregators with no base", u)
	}
	a := s.aggFirstLocked(owner, ownerAnswer{rule: "api", key: "k", gen: 7, prev: 950, others: 960, ackEpoch: g.epoch}, true)
	if a.prev != 950 {
		t.Fatalf("the owner's answer to the group on a lost slot: prev %d, want the owner's 950 (charged 10, not %d)", a.prev, a.others-a.prev)
	}
}

// An answer of the owner (or replica) to an aggregator's own counter
// charges it nothing while it aggregates the key: it hears the key through
// its group's answers (the owner only acknowledges its own counters). A
// replica answered an aggregator's own counter with the whole failover
// once its group stopped sending there: 415 tokens charged again, and as
// many of the owner's answers to the group swallowed by the charge-once
// pair (100 simulated nodes, the owner silent 4 s). The group's answers
// are charged as before.
func TestAggregatorsOwnCounterAnswerChargesNothing(t *testing.T) {
	s, clock := newClockedAggSyncer(20)
	s.mu.Lock()
	owner, _ := s.owner.ring.owners("api", "k")
	g := s.aggGroupLocked(aggKey{"api", "k", 0}, s.sinceBorn())
	g.upSet, g.up = true, 100
	s.mu.Unlock()
	for _, tc := range []struct {
		what     string
		ackEpoch uint64
		gen      uint64
		want     uint64
	}{
		{"an answer to its own counter", 5, 7, 0},
		{"an answer to its group", g.epoch, 8, 415},
	} {
		*clock = clock.Add(s.cfg.GossipInterval)
		got := answerCharged(t, s, owner, *clock, ownerAnswer{rule: "api", key: "k", gen: tc.gen, prev: 0, others: 415, ackEpoch: tc.ackEpoch})
		if got != tc.want {
			t.Errorf("%s: charged %d, want %d", tc.what, got, tc.want)
		}
	}
}

// An aggregator's group subscriptions keep their heard slots: a new
// subscription takes the slot of an answer to its own counter, and a new
// answer to its own counter takes no slot while both hold group
// subscriptions (the owner's group slot, the oldest while the owner is
// silent, was taken, and the silence was never charged from the owner).
// Without own answers, the older slot as before.
func TestAggregatorKeepsItsGroupsHeardSlots(t *testing.T) {
	slot := func(owner string, at time.Duration, own bool) heardSlot {
		return heardSlot{owner: owner, at: at, own: own}
	}
	for _, tc := range []struct {
		name   string
		slots  [2]heardSlot
		own    bool
		want   int
		wantOK bool
	}{
		{"no own answers: the older", [2]heardSlot{slot("o", 5, false), slot("r", 3, false)}, false, 1, true},
		{"an empty slot first", [2]heardSlot{slot("o", 5, false), {}}, true, 1, true},
		{"a group's answer takes an own one's slot", [2]heardSlot{slot("o", 1, false), slot("r", 9, true)}, false, 1, true},
		{"an own answer takes no group's slot", [2]heardSlot{slot("o", 1, false), slot("r", 9, false)}, true, 0, false},
		{"an own answer takes the own slot", [2]heardSlot{slot("o", 1, true), slot("r", 9, false)}, true, 0, true},
		{"an own answer takes the own slot, even the newer", [2]heardSlot{slot("o", 1, false), slot("r", 9, true)}, true, 1, true},
		{"both own: the older", [2]heardSlot{slot("o", 4, true), slot("r", 2, true)}, true, 1, true},
	} {
		h := &heardKey{slots: tc.slots}
		if got, ok := aggHeardSlot(h, tc.own); got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: slot %d (%v), want %d (%v)", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}

// FuzzDecodeAggMessages: notices and counters to aggregators and owners
// from peers never panic or allocate beyond what their bytes hold, and a
// notice that decodes re-encodes to an equal one.
func FuzzDecodeAggMessages(f *testing.F) {
	w := &noticeWriter{limit: 1300, sender: "o", at: 3}
	w.add(aggNotice{"api", "k", 9, 1, 1, 0, 2, 3})
	f.Add(w.packets()[0])
	for _, p := range samplePackets() {
		f.Add(toAggPacket(p, 7, msgAggUsers))
		f.Add(toAggPacket(p, 7, msgAggGroup))
	}
	gw := newPacketWriter("a", 1300)
	gw.addEntry("a", Counter{Rule: "api", Key: "k", Epoch: 3, Prev: 1, Used: 9, Window: 5}, 12, true)
	gps, _ := gw.packets()
	for _, p := range gps {
		f.Add(toAggPacket(p, 7, msgAggGroup))
	}
	for _, b := range malformedPeerBytes {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, kind := range []byte{msgAggUsers, msgAggGroup} {
			_, _ = decodeAggCounters(b, kind, nil, func(string, Counter, uint64) {})
		}
		sender, at, keys, err := decodeNotice(b)
		if err != nil || len(keys) == 0 {
			return
		}
		w := &noticeWriter{limit: 1 << 30, sender: sender, at: at}
		for _, k := range keys {
			w.add(k)
		}
		s2, at2, keys2, err := decodeNotice(w.packets()[0])
		if err != nil || s2 != sender || at2 != at || len(keys2) != len(keys) {
			t.Fatalf("re-encoded notice: %q %d %d entries, %v", s2, at2, len(keys2), err)
		}
		for i := range keys {
			if keys[i] != keys2[i] {
				t.Fatalf("entry %d: %+v became %+v", i, keys[i], keys2[i])
			}
		}
	})
}

// Aggregation needs every member to speak it: with one member of an
// earlier version (protocol 2, owner mode; protocol 3, owner mode with
// shares, no aggregation) no node aggregates, and a key told to aggregate
// goes to its owner as before; a ring too small, or AggregateAbove
// negative, turns it off too.
func TestAggregationNeedsEveryMember(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members int
		old     uint8 // one member's protocol; 0: every member speaks protoAgg
		above   int
		want    bool
	}{
		{"all new", 20, 0, DefaultAggregateAbove, true},
		{"one owner-mode member (2)", 20, protoOwner, DefaultAggregateAbove, false},
		{"one member without aggregation (3)", 20, protoAgg - 1, DefaultAggregateAbove, false},
		{"ring too small", aggMinMembers - 1, 0, DefaultAggregateAbove, false},
		{"turned off", 20, 0, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newAggSyncer("m000", tc.members)
			s.cfg.AggregateAbove = tc.above
			if tc.old != 0 {
				s.peers["m001"] = memberlist.Node{Name: "m001", DMax: tc.old}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if got := s.aggCapableLocked(); got != tc.want {
				t.Fatalf("capable %v, want %v", got, tc.want)
			}
			s.owner.agg.hot = map[[2]string]*aggUse{{"api", "k"}: {}}
			k := pendingKey{counterKey{"m000", "api", "k"}, 0, 1}
			p := &pendingCounter{c: Counter{Rule: "api", Key: "k", Epoch: 1, Used: 3}, transmits: ownerResends}
			s.pending[k] = p
			if got := s.aggSendLocked(k, p, time.Second, -1000); got != tc.want {
				t.Fatalf("sent through an aggregator: %v, want %v", got, tc.want)
			}
		})
	}
}

// An owner counts an aggregated key's users as its groups report them
// (kind 7 carries them) and its direct users, a user told to go through
// aggregators not twice; a lying aggregator's count is taken at most as
// what the ring assigns it and its largest neighbour, plus itself (so it
// shrinks the others' shares by no more than that), and a stranger's not
// at all.
func TestGroupUsersAreBoundedByTheRing(t *testing.T) {
	const n = 100
	s, _ := newAggSyncer("m000", n)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshRingLocked()
	key := ""
	for i := range 1000 { // a key this node owns
		if o, _ := s.owner.ring.owners("api", fmt.Sprintf("k%d", i)); o == "m000" {
			key = fmt.Sprintf("k%d", i)
			break
		}
	}
	if key == "" {
		t.Fatal("no key owned by m000")
	}
	owner, replica := s.owner.ring.owners("api", key)
	var aggs []string
	stranger, direct := "", ""
	for _, m := range s.owner.ring.names {
		switch {
		case m == owner || m == replica:
		case s.aggUsersLocked("api", key, m) > 0:
			aggs = append(aggs, m)
		case stranger == "":
			stranger = m
		case direct == "":
			direct = m
		}
	}
	if len(aggs) < 2 {
		t.Fatalf("aggregators of %s: %v", key, aggs)
	}
	al := Allowance{Burst: 100, PerSecond: 100}
	now := time.Second
	count := func(from string, users uint64) bool {
		_, _, ok := s.groupCountLocked(true, al, from, Counter{Rule: "api", Key: key, Epoch: 1, Prev: 0, Used: 1}, users, now, now)
		return ok
	}
	k := aggKey{"api", key, 0}
	users := func() uint64 {
		o := s.owner.mine[k]
		s.countUsersLocked(k, o, now)
		return o.users
	}
	if !count(aggs[0], 7) {
		t.Fatal("an aggregator's group counter was refused")
	}
	if got := users(); got != 7 {
		t.Fatalf("one group of 7 users: the owner counts %d users, want 7", got)
	}
	// A direct user counts once; once told to go through aggregators, its
	// group counts it.
	s.aggregateOwnLocked(Counter{Rule: "api", Key: key, Epoch: 1, Prev: 0, Used: 1}, now) // the owner uses the key
	o := s.owner.mine[k]
	sub := s.subFor(o, direct, Counter{Rule: "api", Key: key})
	if sub == nil {
		t.Fatal("no entry for a direct user")
	}
	sub.heard, sub.seen = now, now
	if got := users(); got != 9 {
		t.Fatalf("a group of 7, the owner and a direct user: counted %d users, want 9", got)
	}
	sub.agg = &aggSub{switched: true}
	if got := users(); got != 8 {
		t.Fatalf("a group of 7, the owner and a switched user: counted %d users, want 8", got)
	}
	// A lying aggregator: 2^40 users, taken as at most n + most + 1.
	c := s.owner.agg.counts[[2]string{"api", key}]
	bound := uint64(c.n[aggs[1]] + c.most + 1)
	if !count(aggs[1], 1<<40) {
		t.Fatal("the second aggregator's group counter was refused")
	}
	if got := users(); got != 8+bound {
		t.Fatalf("a group claiming 2^40 users: the owner counts %d users, want %d (its ring's bound %d)", got, 8+bound, bound)
	}
	if count(stranger, 1<<20) {
		t.Fatal("a stranger's group counter was counted")
	}
	if got := users(); got != 8+bound {
		t.Fatalf("after a stranger's group counter the owner counts %d users, want %d", got, 8+bound)
	}
	// A group heard no more within the users window counts no more.
	now += 2 * time.Second
	s.aggregateOwnLocked(Counter{Rule: "api", Key: key, Epoch: 1, Prev: 1, Used: 2}, now)
	if got := users(); got != 1 {
		t.Fatalf("groups silent for 2 s: the owner counts %d users, want 1 (itself)", got)
	}
}

// A subscription on the aggregated path starts where this node's knowledge
// ends (aggFirstLocked: the notice's total), above the sender's own first
// prev; the sender, told by the heard message that the node started above
// its first prev, repeats that first prev (ownerrepeat.go). That repeat
// charges nothing (the node knew what lies below where it started: it was
// charged twice, a whole total, before), and the heard message confirms
// the sender's first prev. A subscription started where its sender said
// still charges what lost first answers carried.
func TestAdjustedStartIsNotRepairedTwice(t *testing.T) {
	s, _ := newAggSyncer("m000", 20)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := aggKey{"api", "k", 0}
	heard := func(sender string, gen, prev, others, first uint64) uint64 {
		tokens, _ := s.heardLocked(sender, ownerAnswer{rule: "api", key: "k", gen: gen, prev: prev, others: others}, first, time.Second, false, Allowance{}, 19)
		return tokens
	}
	if got := heard("agg", 1, 500, 600, 100); got != 100 {
		t.Fatalf("first answer from the aggregator, started at 500 (its first prev 100): charged %d, want 100", got)
	}
	if d := s.owner.toConfirm[heardTo{k, "agg"}]; d.start != 100 {
		t.Fatalf("heard message to the aggregator confirms start %d, want its first prev 100", d.start)
	}
	if got := heard("agg", 1, 100, 600, 100); got != 0 {
		t.Fatalf("the aggregator's repeated first prev charged %d, want 0", got)
	}
	if got := heard("agg", 1, 80, 650, 80); got != 50 {
		t.Fatalf("a lower first prev and 50 more: charged %d, want only the 50", got)
	}
	if d := s.owner.toConfirm[heardTo{k, "agg"}]; d.start != 80 {
		t.Fatalf("heard message confirms start %d, want 80", d.start)
	}
	// Started where the sender said (no aggFirstLocked adjustment): a
	// lower first prev is what lost answers carried, charged once.
	if got := heard("own", 2, 300, 400, 300); got != 100 {
		t.Fatalf("first answer from the owner: charged %d, want 100", got)
	}
	if got := heard("own", 2, 200, 400, 200); got != 100 {
		t.Fatalf("the owner's lower first prev: charged %d, want the 100 the lost answers carried", got)
	}
	if got := heard("own", 2, 200, 400, 200); got != 0 {
		t.Fatalf("the same again: charged %d, want 0", got)
	}
}
