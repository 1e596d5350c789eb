package gossip

import (
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

// stampNow stamps an unstamped counters packet with the wall clock.
func stampNow(p []byte) []byte { return stampPacket(p, uint64(time.Now().UnixNano())) }

// boundLedger is a memLedger that knows one rule, "r": burst tokens at once
// and perSecond, keys of at most 16 bytes. A key's balance is the burst less
// what was charged and what adoptions lowered it by (no refill); Adopt
// records the balances it is given.
type boundLedger struct {
	*memLedger
	a       Allowance
	amu     sync.Mutex
	adopted []float64
	lowered map[string]float64 // by key
	own     map[string]Counter // this node's own counters, by key
}

func (l *boundLedger) Allowance(rule, key string) (Allowance, bool) {
	return l.a, rule == "r" && len(key) <= 16
}

func (l *boundLedger) Balance(rule, key string) (float64, Counter) {
	l.amu.Lock()
	defer l.amu.Unlock()
	return l.a.Burst - float64(l.get(rule+"/"+key)) - l.lowered[key] - float64(l.own[key].Used), l.own[key]
}

func (l *boundLedger) Adopt(rule, key string, _ uint64, balance float64) bool {
	here, _ := l.Balance(rule, key)
	l.amu.Lock()
	defer l.amu.Unlock()
	l.adopted = append(l.adopted, balance)
	if !(balance < here) {
		return false
	}
	if l.lowered == nil {
		l.lowered = map[string]float64{}
	}
	l.lowered[key] += here - balance
	return true
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newBoundSyncer is a syncer, not started, over a boundLedger for
// "r" = 100/s burst 100, on a fake clock, with "peer" a member that reads
// stamps and "old" one that does not.
func newBoundSyncer() (*Syncer, *boundLedger, *fakeClock) {
	l := &boundLedger{memLedger: newMemLedger(), a: Allowance{Burst: 100, PerSecond: 100}}
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s := &Syncer{cfg: Config{MaxSeen: 1000, MaxPending: 100, FanoutLimit: 64, SeenTTL: time.Minute}, ledger: l, self: "me",
		seen: map[counterKey]*seenRange{}, pending: map[pendingKey]*pendingCounter{}, resets: newResetState(),
		log: hclog.NewNullLogger(), now: clk.now,
		peers: map[string]memberlist.Node{"peer": {Name: "peer", DMax: protoStamped}, "old": {Name: "old"}}}
	s.born = clk.now()
	return s, l, clk
}

// packet is a counters packet from sender holding cs (all of origin
// sender), stamped at the syncer's clock unless unstamped.
func packet(s *Syncer, sender string, stamped bool, cs ...Counter) []byte {
	w := newPacketWriter(sender, 1<<16)
	for _, c := range cs {
		w.add(sender, c)
	}
	p := first(w.packets())
	if stamped {
		p = stampPacket(p, uint64(s.clock().UnixNano()))
	}
	return p
}

// The attack of issue 15: one small packet naming an absurd counter put a
// key years into debt. Now the first report of an origin for a key is
// charged at most its burst plus the slack, and the report is counted as
// suspicious under the origin's name.
func TestAbsurdCounterIsClampedToOneAllowance(t *testing.T) {
	s, l, _ := newBoundSyncer()
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "victim", Epoch: 1, Used: math.MaxUint64}))
	capacity := uint64(100 + 100*allowanceSlack.Seconds() + 1)
	if got := l.get("r/victim"); got == 0 || got > capacity {
		t.Fatalf("charged %d, want 1 to %d", got, capacity)
	}
	if n := s.Suspicious()["peer"]; n != 1 {
		t.Fatalf("suspicious reports from peer: %d, want 1 (%v)", n, s.Suspicious())
	}
	// The next absurd report, at once, gets nothing more than what refilled.
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "victim", Epoch: 2, Used: math.MaxUint64}))
	if got := l.get("r/victim"); got > capacity {
		t.Fatalf("two absurd reports at once charged %d, want at most %d", got, capacity)
	}
	if got := s.stats.TokensCharged.Load(); got > capacity {
		t.Fatalf("tokens charged stat %d", got)
	}
}

// A rogue origin reporting as fast as it can, for a long time, costs a key
// no more than an honest origin admitting at the full rate would: the
// allowance's capacity plus the rate times the time.
func TestRogueOriginCostsAtMostTheRate(t *testing.T) {
	s, l, clk := newBoundSyncer()
	var used uint64
	const rounds = 3000 // 60 s of 20 ms rounds
	for range rounds {
		used += 1_000_000
		s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "victim", Epoch: 1, Prev: used - 1_000_000, Used: used}))
		clk.add(20 * time.Millisecond)
	}
	elapsed := float64(rounds) * 0.020
	limit := uint64(100 + 100*firstSlack.Seconds() + 1 + 100*elapsed)
	if got := l.get("r/victim"); got > limit {
		t.Fatalf("a rogue reporting 1e6 per round for %.0fs charged %d, more than %d", elapsed, got, limit)
	}
}

// packetAt is packet stamped at the instant at.
func packetAt(sender string, at time.Time, cs ...Counter) []byte {
	w := newPacketWriter(sender, 1<<16)
	for _, c := range cs {
		w.add(sender, c)
	}
	return stampPacket(first(w.packets()), uint64(at.UnixNano()))
}

// An honest origin admitting exactly at the rate, with full bursts after
// idle spells, reported every 20 ms with packets delayed 0 to 500 ms,
// reordered and sometimes lost, is never clamped: stamped at sending (its
// counters are bounded on its clock), also when this node handles them in
// batches a second apart (a busy receiver), and unstamped from a member of
// an older version (bounded on this node's clock).
func TestHonestOriginAtTheRateIsNeverClamped(t *testing.T) {
	tests := []struct {
		name    string
		sender  string
		stamped bool
		batch   int // rounds between this node's handling of what arrived
	}{
		{"stamped", "peer", true, 1},
		{"stamped, handled in batches a second apart", "peer", true, 50},
		{"unstamped, from an older member", "old", false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, l, clk := newBoundSyncer()
			clk.add(3 * time.Second) // the origin's clock runs 3 s behind this node's
			rnd := rand.New(rand.NewPCG(1, 2))
			type sent struct {
				at time.Duration
				p  []byte
			}
			var inFlight []sent
			var used, prev uint64
			balance := 100.0 // the origin's own bucket, 100/s burst 100
			var now time.Duration
			admitted := uint64(0)
			for round := range 5000 {
				now += 20 * time.Millisecond
				balance = min(100, balance+100*0.020)
				switch {
				case round%500 < 100: // idle: the bucket fills
				case round%500 == 100: // a full burst
					used += uint64(balance)
					balance -= math.Floor(balance)
				default: // at the rate: whatever refilled
					take := math.Floor(balance)
					used += uint64(take)
					balance -= take
				}
				clk.add(20 * time.Millisecond)
				if used > prev {
					c := Counter{Rule: "r", Key: "k", Epoch: 1, Prev: prev, Used: used}
					p := packet(s, tt.sender, false, c)
					if tt.stamped {
						p = packetAt(tt.sender, clk.now().Add(-3*time.Second), c)
					}
					if rnd.IntN(10) > 0 { // 10% lost
						inFlight = append(inFlight, sent{now + time.Duration(rnd.IntN(500))*time.Millisecond, p})
					}
					admitted, prev = used, used
				}
				if round%tt.batch != 0 {
					continue
				}
				kept := inFlight[:0]
				for _, p := range inFlight {
					if p.at <= now {
						s.receive(p.p)
					} else {
						kept = append(kept, p)
					}
				}
				inFlight = kept
			}
			if n := s.stats.SuspiciousReports.Load(); n != 0 {
				t.Fatalf("an honest origin was clamped %d times (charged %d of %d admitted)", n, l.get("r/k"), admitted)
			}
			if bad := s.stats.BadPackets.Load(); bad != 0 {
				t.Fatalf("%d packets refused", bad)
			}
		})
	}
}

// Forged stamps buy no time: a rogue member whose first packet is stamped
// 29 s behind this node's clock and every later one 29 s ahead (the most
// the stamp window lets through) is charged no more than one that stamps
// honestly: its allowance's start and the rate on this node's clock.
func TestForgedStampsBuyNoTime(t *testing.T) {
	s, l, clk := newBoundSyncer()
	first := 100 + 100*firstSlack.Seconds() + 1
	var used uint64
	const rounds = 1000 // 20 s of 20 ms rounds
	for i := range rounds {
		skew := 29 * time.Second
		if i == 0 {
			skew = -skew
		}
		used += 1_000_000
		s.receive(packetAt("peer", clk.now().Add(skew), Counter{Rule: "r", Key: "victim", Epoch: 1, Prev: used - 1_000_000, Used: used}))
		clk.add(20 * time.Millisecond)
	}
	elapsed := float64(rounds) * 0.020
	if got, limit := l.get("r/victim"), uint64(first+100*elapsed); got > limit {
		t.Fatalf("a rogue forging stamps for %.0fs charged %d, more than %d", elapsed, got, limit)
	}
	if s.stats.BadPackets.Load() != 0 {
		t.Fatalf("stamps within the window were refused")
	}
}

// A captured packet replayed after the seen table forgot its counters, or
// to a daemon that restarted since, charges nothing: it is refused by its
// stamp. A fresh duplicate is refused by the seen table.
func TestReplayNeverChargesTwice(t *testing.T) {
	s, l, clk := newBoundSyncer()
	captured := packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: 1, Prev: 0, Used: 7})
	s.receive(captured)
	s.receive(captured)
	if got := l.get("r/k"); got != 7 {
		t.Fatalf("packet and its duplicate charged %d, want 7", got)
	}
	clk.add(time.Minute + time.Second)
	s.pruneSeen()
	clk.add(time.Minute + time.Second)
	s.pruneSeen()
	if len(s.seen) != 0 {
		t.Fatalf("the seen table still holds %d entries after two idle prunes", len(s.seen))
	}
	s.receive(captured)
	if got := l.get("r/k"); got != 7 {
		t.Fatalf("replay after the prune charged: %d, want 7", got)
	}
	// A restarted receiver: nothing remembered at all.
	r, rl, rclk := newBoundSyncer()
	rclk.add(2 * time.Minute)
	r.receive(captured)
	if got := rl.get("r/k"); got != 0 {
		t.Fatalf("replay to a restarted daemon charged %d", got)
	}
	if r.stats.BadPackets.Load() != 1 {
		t.Fatalf("the replay was not counted as a refused packet")
	}
}

// Unstamped packets are taken only from members of an older version;
// stamps far ahead are refused too.
func TestStampsAreRequiredOfNewMembers(t *testing.T) {
	tests := []struct {
		name    string
		sender  string
		stamped bool
		skew    time.Duration
		charged bool
	}{
		{"stamped from a member", "peer", true, 0, true},
		{"stamped from a non-member", "stranger", true, 0, true},
		{"unstamped from an older member", "old", false, 0, true},
		{"unstamped from a member that stamps", "peer", false, 0, false},
		{"unstamped from a non-member", "stranger", false, 0, false},
		{"stamped 29s ahead", "peer", true, 29 * time.Second, true},
		{"stamped 31s ahead", "peer", true, 31 * time.Second, false},
		{"stamped 31s ago", "peer", true, -31 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, l, clk := newBoundSyncer()
			clk.add(tt.skew)
			p := packet(s, tt.sender, tt.stamped, Counter{Rule: "r", Key: "k", Epoch: 1, Used: 5})
			clk.add(-tt.skew)
			s.receive(p)
			if got := l.get("r/k") == 5; got != tt.charged {
				t.Fatalf("charged %v, want %v", got, tt.charged)
			}
		})
	}
}

// A counter whose epoch is far ahead of the receiver's clock is refused and
// counted; one of a plausible newer epoch cannot hide the origin's real
// counters, which go on being charged exactly once.
func TestForgedEpochsCannotShadowARealOrigin(t *testing.T) {
	s, l, clk := newBoundSyncer()
	now := uint64(clk.now().UnixNano())
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: now - 5, Used: 3}))
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: math.MaxUint64 - 1, Used: 1}))
	if n := s.Suspicious()["peer"]; n != 1 {
		t.Fatalf("an epoch far ahead was not counted as suspicious: %v", s.Suspicious())
	}
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: now + uint64(30*time.Minute), Used: 1})) // forged, plausible
	for i := range uint64(10) {
		clk.add(time.Second)
		c := Counter{Rule: "r", Key: "k", Epoch: now - 5, Prev: 3 + 2*i, Used: 5 + 2*i}
		s.receive(packet(s, "peer", true, c))
		s.receive(packet(s, "peer", true, c)) // and a duplicate
	}
	if got, want := l.get("r/k"), uint64(3+20+1); got != want {
		t.Fatalf("charged %d, want %d (the real 23 and the forged 1)", got, want)
	}
}

// Counters of rules this node does not have, or of keys longer than its
// clients may send, are neither charged nor remembered.
func TestUnknownRulesAndLongKeysHoldNoMemory(t *testing.T) {
	s, l, _ := newBoundSyncer()
	for i := range 200 {
		s.receive(packet(s, "peer", true,
			Counter{Rule: "nope", Key: "k", Epoch: uint64(i + 1), Used: 5},
			Counter{Rule: "r", Key: "a-key-longer-than-sixteen-bytes", Epoch: uint64(i + 1), Used: 5}))
	}
	if len(s.seen) != 0 || len(l.charged) != 0 {
		t.Fatalf("seen %d entries, charged %v", len(s.seen), l.charged)
	}
	if got := s.stats.UnknownCounters.Load(); got != 400 {
		t.Fatalf("unknown counters %d, want 400", got)
	}
}

// bal is a key's balance in l.
func bal(l *boundLedger, key string) float64 { b, _ := l.Balance("r", key); return b }

// A peer's lower balance is taken no further down than the counters it
// lists could have admitted, each paid from its origin's allowance: an
// honest debt, however deep, is taken whole; a rogue's claim costs at most
// its own allowance, the one its packets draw on too.
func TestAdoptedBalanceIsBoundedByItsCounters(t *testing.T) {
	first := 100 + 100*firstSlack.Seconds() + 1 // what an allowance starts with
	tests := []struct {
		name       string
		away       time.Duration // how long "peer" was away before it rejoined
		balance    float64       // the peer's balance for k
		own        Counter       // the peer's own counter for k
		listed     []seenEntry   // others' counters it lists for k
		heard      []Counter     // peer's counters heard here before the state
		mine       uint64        // this node's own consumption of k
		oldUsed    uint64        // member "old"'s, heard here before the state
		want       float64       // k's balance here after the state
		suspicious uint64
	}{
		{name: "absurd debt, absurd counter", balance: -1e18, own: Counter{Used: math.MaxUint64 / 4},
			want: 100 - first, suspicious: 1},
		{name: "debt within a burst, nothing new", balance: -99, own: Counter{Prev: 5, Used: 5},
			heard: []Counter{{Used: 5}}, want: 95, suspicious: 1},
		{name: "late learner, nothing new", balance: 40, own: Counter{Prev: 5, Used: 5},
			heard: []Counter{{Used: 5}}, want: 95},
		{name: "deep debt after a partition", away: 30 * time.Second, balance: -3000, own: Counter{Used: 3100}, want: -3000},
		{name: "explained by a member's counter", balance: 50, own: Counter{Used: 0},
			listed: []seenEntry{{origin: "old", c: Counter{Used: 50}}}, want: 50},
		{name: "a made-up origin explains nothing", balance: 50, own: Counter{Used: 0},
			listed: []seenEntry{{origin: "ghost", c: Counter{Used: 50}}}, want: 100},
		{name: "this node's own counter explains nothing", balance: 50, own: Counter{Used: 0},
			listed: []seenEntry{{origin: "me", c: Counter{Used: 50}}}, want: 100},
		// After a partition: this node admitted 30 the peer has not heard
		// of; the peer's balance holds its own 60 but not those 30.
		{name: "a peer that lacks this node's own consumption", mine: 30, balance: 40, own: Counter{Used: 60},
			want: 40 - 30},
		{name: "a peer that lacks this node's own and claims more", mine: 30, balance: -500, own: Counter{Used: 60},
			want: 70 - 60, suspicious: 1},
		// A partition heals: this node's side ("me" and "old") admitted 200
		// each, the peer's side 300; neither side heard the other's.
		{name: "the other side of a partition", away: 30 * time.Second, mine: 200, oldUsed: 200, balance: -200,
			own: Counter{Used: 300}, want: -200 - 400},
		{name: "a peer that heard all of this node's own", mine: 30, balance: 10, own: Counter{Used: 60},
			listed: []seenEntry{{origin: "me", c: Counter{Used: 30}}}, want: 10},
		// A partition heals: both sides' buckets sat full until they heard
		// the other's consumption, the peer's side admitted less, so its
		// balance lies lower with nothing unheard. Not taken, and not
		// suspicious within what its side could have admitted while away.
		{name: "back from a partition, lower with nothing unheard", away: 30 * time.Second, balance: -500,
			own: Counter{Prev: 300, Used: 300}, heard: []Counter{{Used: 300}}, want: -200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, l, _ := newBoundSyncer()
			if tt.away > 0 {
				s.rejoined = map[string]rejoin{"peer": {at: s.sinceBorn(), away: tt.away}}
			}
			for _, c := range tt.heard {
				c.Rule, c.Key, c.Epoch = "r", "k", 1
				s.receive(packet(s, "peer", true, c))
			}
			if tt.oldUsed > 0 {
				s.receive(packet(s, "old", false, Counter{Rule: "r", Key: "k", Epoch: 1, Used: tt.oldUsed}))
			}
			if tt.mine > 0 {
				l.own = map[string]Counter{"k": {Rule: "r", Key: "k", Epoch: 1, Used: tt.mine}}
			}
			before := bal(l, "k")
			own := tt.own
			own.Rule, own.Key, own.Epoch = "r", "k", 1
			var listed []seenEntry
			for _, e := range tt.listed {
				e.c.Rule, e.c.Key, e.c.Epoch = "r", "k", 1
				listed = append(listed, e)
			}
			s.mergeState(encodeState("peer", []stateEntry{{c: own, balance: tt.balance}}, listed))
			if got := bal(l, "k"); math.Abs(got-tt.want) > 1 {
				t.Fatalf("balance %v after the state (was %v), want %v", got, before, tt.want)
			}
			if got := s.stats.SuspiciousReports.Load(); got != tt.suspicious {
				t.Fatalf("suspicious reports %d, want %d (%v)", got, tt.suspicious, s.Suspicious())
			}
		})
	}
}

// What a state's counters paid for is accounted for: the same counters
// arriving later in packets charge nothing, and a rogue whose state
// emptied its allowance is charged only the rate after it.
func TestAdoptedCountersAreNotChargedAgain(t *testing.T) {
	s, l, clk := newBoundSyncer()
	s.mergeState(encodeState("peer", []stateEntry{{c: Counter{Rule: "r", Key: "k", Epoch: 1, Used: 60}, balance: 10}},
		[]seenEntry{{origin: "old", c: Counter{Rule: "r", Key: "k", Epoch: 1, Used: 30}}}))
	if got := bal(l, "k"); got != 10 {
		t.Fatalf("balance %v after an explained state, want 10", got)
	}
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: 1, Prev: 0, Used: 60}))
	s.receive(packet(s, "old", false, Counter{Rule: "r", Key: "k", Epoch: 1, Prev: 0, Used: 30}))
	if got := bal(l, "k"); got != 10 || s.stats.SuspiciousReports.Load() != 0 {
		t.Fatalf("the state's counters, heard again, left the balance at %v (suspicious %d), want 10 and none", got, s.stats.SuspiciousReports.Load())
	}
	s.mergeState(encodeState("peer", []stateEntry{{c: Counter{Rule: "r", Key: "drained", Epoch: 1, Used: 1e15}, balance: -1e15}}, nil))
	clk.add(time.Second)
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "drained", Epoch: 1, Prev: 1e15, Used: 2e15}))
	capacity := 100 + 100*allowanceSlack.Seconds() + 1
	if got, floor := bal(l, "drained"), 100-capacity-100-1; got < floor {
		t.Fatalf("a rogue's deep state and a counter a second later left the key at %v, below %v (one allowance and a second of rate)", got, floor)
	}
}

// A suspicious report's origin is labelled by name only for members: made
// up names are counted together.
func TestSuspiciousOriginsAreBounded(t *testing.T) {
	s, _, _ := newBoundSyncer()
	for i := range 3000 {
		s.receive(packet(s, string(rune('a'+i%26))+string(rune('a'+i/26%26))+"x", true, Counter{Rule: "r", Key: "k", Epoch: 1, Used: math.MaxUint64}))
	}
	got := s.Suspicious()
	if len(got) != 1 || got[OriginUnknown] == 0 {
		t.Fatalf("suspicious by origin: %d labels %v", len(got), got)
	}
}

func TestSatAdd(t *testing.T) {
	for _, tt := range []struct{ a, b, want uint64 }{
		{1, 2, 3}, {math.MaxUint64, 1, math.MaxUint64}, {math.MaxUint64 - 1, 1, math.MaxUint64}, {1 << 63, 1 << 63, math.MaxUint64},
	} {
		if got := satAdd(tt.a, tt.b); got != tt.want {
			t.Errorf("satAdd(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// A restarted origin (a counter of a newer epoch) is allowed a full burst
// again, but no more often than every refillSpacing: a forger walking
// epochs up at every report gains one burst per key per refillSpacing.
func TestNewEpochsRefillAtMostEveryRefillSpacing(t *testing.T) {
	s, l, clk := newBoundSyncer()
	base := uint64(clk.now().UnixNano()) - uint64(time.Hour)
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "honest", Epoch: base, Used: 100}))
	clk.add(refillSpacing)
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "honest", Epoch: base + uint64(refillSpacing), Used: 100}))
	if got := l.get("r/honest"); got != 200 {
		t.Fatalf("a restart's full burst after a full one: charged %d, want 200", got)
	}
	if n := s.stats.SuspiciousReports.Load(); n != 0 {
		t.Fatalf("an honest restart was clamped %d times", n)
	}
	const rounds = 3000 // 60 s of 20 ms rounds, a new epoch each
	for i := range uint64(rounds) {
		s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "walked", Epoch: base + i, Used: math.MaxUint64}))
		clk.add(20 * time.Millisecond)
	}
	capacity := 100 + 100*allowanceSlack.Seconds() + 1
	elapsed := rounds * 0.020
	limit := uint64(capacity*(1+elapsed/refillSpacing.Seconds()) + 100*elapsed)
	if got := l.get("r/walked"); got > limit {
		t.Fatalf("epochs walked up for %.0fs charged %d, more than %d", elapsed, got, limit)
	}
}

// Warnings of bad packets are logged at most once per logEvery, with how
// many were suppressed in between.
func TestBadPacketWarningsAreRateLimited(t *testing.T) {
	var buf syncBuf
	s, _, clk := newBoundSyncer()
	s.log = hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn})
	for range 1000 {
		s.receive([]byte{0x94, 0xff}) // malformed
	}
	clk.add(logEvery)
	s.receive([]byte{0x94, 0xff})
	if n := strings.Count(buf.String(), "dropped a gossip packet"); n != 2 {
		t.Fatalf("%d warnings for 1001 bad packets over one interval, want 2:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "suppressed_since_last=999") {
		t.Fatalf("the second warning does not count the suppressed ones:\n%s", buf.String())
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *syncBuf) String() string              { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

// A member back from a partition may report, on each key, what it admitted
// on its own side while away: its first report of a key after rejoining
// is allowed the rate for as long as it was away.
func TestRejoinedMemberMayReportWhatItAdmittedAway(t *testing.T) {
	s, l, _ := newBoundSyncer()
	s.rejoined = map[string]rejoin{"peer": {at: s.sinceBorn(), away: 30 * time.Second}}
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: 1, Used: 100 + 100*30}))
	if got := l.get("r/k"); got != 3100 || s.stats.SuspiciousReports.Load() != 0 {
		t.Fatalf("charged %d (suspicious %d), want 3100 and none", got, s.stats.SuspiciousReports.Load())
	}
	// Its counters may arrive before this node sees it rejoin: while it is
	// still listed as failed, the time since it failed counts.
	s.failed = map[string]failedMember{"back": {since: s.clock().Add(-30 * time.Second)}}
	s.receive(packet(s, "back", true, Counter{Rule: "r", Key: "k3", Epoch: 1, Used: 3100}))
	if got := l.get("r/k3"); got != 3100 || s.stats.SuspiciousReports.Load() != 0 {
		t.Fatalf("a failed member's first report after 30 s away: charged %d (suspicious %d), want 3100", got, s.stats.SuspiciousReports.Load())
	}
	s.receive(packet(s, "stranger", true, Counter{Rule: "r", Key: "k2", Epoch: 1, Used: 3100}))
	if got := l.get("r/k2"); got >= 3100 {
		t.Fatalf("an origin that was never away was allowed %d", got)
	}
}

// In a cluster large enough to relay, a clamped counter is not relayed;
// an honest one is.
func TestClampedCountersAreNotRelayed(t *testing.T) {
	s, _, _ := newBoundSyncer()
	s.members.Store(100) // above FanoutLimit: receivers relay
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "absurd", Epoch: 1, Used: math.MaxUint64}))
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "honest", Epoch: 1, Used: 5}))
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.pending {
		keys = append(keys, k.key)
	}
	if len(keys) != 1 || keys[0] != "honest" {
		t.Fatalf("pending relays %v, want [honest]", keys)
	}
}

// Origins that are not members share one allowance per key: a packet
// naming a hundred made-up origins, or packets from fifty made-up senders,
// cost a key one allowance, where each name had its own before (a hundred
// made-up origins charged 30,100 tokens here, a hundred allowances).
func TestMadeUpOriginsShareOneAllowance(t *testing.T) {
	capacity := uint64(100 + 100*allowanceSlack.Seconds() + 1)
	s, l, _ := newBoundSyncer()
	w := newPacketWriter("peer", 1<<16)
	for i := range 100 {
		w.add("made-up-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26)), Counter{Rule: "r", Key: "k", Epoch: 1, Used: math.MaxUint64})
	}
	s.receive(stampPacket(first(w.packets()), uint64(s.clock().UnixNano())))
	for i := range 50 {
		s.receive(packet(s, "sender-"+string(rune('a'+i%26))+string(rune('a'+i/26)), true, Counter{Rule: "r", Key: "k2", Epoch: 1, Used: math.MaxUint64}))
	}
	if got := l.get("r/k"); got > capacity {
		t.Fatalf("100 made-up origins in one packet charged %d, more than one allowance (%d)", got, capacity)
	}
	if got := l.get("r/k2"); got > capacity {
		t.Fatalf("50 made-up senders charged %d, more than one allowance (%d)", got, capacity)
	}
	// A member keeps its own allowance beside them.
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: 1, Used: 50}))
	if got := l.get("r/k"); got > capacity+50 || s.Suspicious()["peer"] != 0 {
		t.Fatalf("the member's 50 were not charged in full: %d (suspicious %v)", got, s.Suspicious())
	}
	// A name that becomes a member keeps what it spent before: it gains no
	// second allowance by joining.
	s.receive(packet(s, "newbie", true, Counter{Rule: "r", Key: "k3", Epoch: 1, Used: math.MaxUint64 / 2}))
	s.peers["newbie"] = memberlist.Node{Name: "newbie", DMax: protoStamped}
	s.receive(packet(s, "newbie", true, Counter{Rule: "r", Key: "k3", Epoch: 1, Prev: math.MaxUint64 / 2, Used: math.MaxUint64}))
	if got := l.get("r/k3"); got > capacity {
		t.Fatalf("a name that joined after its first absurd counter was charged %d, more than one allowance (%d)", got, capacity)
	}
	// The shared allowances are reaped like the seen table.
	s.pruneSeen()
	s.pruneSeen()
	if len(s.strangers) != 0 {
		t.Fatalf("%d shared allowances left after two idle prunes", len(s.strangers))
	}
}

// Bounding a member's counter allocates nothing.
func TestBoundingAllocatesNothing(t *testing.T) {
	s, _, clk := newBoundSyncer()
	c := Counter{Rule: "r", Key: "k", Epoch: 1, Used: 1}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _, sr := s.applyLocked("peer", c)
	a := Allowance{Burst: 100, PerSecond: 100}
	if n := testing.AllocsPerRun(1000, func() {
		clk.add(20 * time.Millisecond) // 2 tokens refill, 1 is charged: never clamped
		if s.boundLocked(sr, a, "peer", c, heard{above: 1}, s.sinceBorn()) != 1 {
			t.Fatal("clamped")
		}
	}); n != 0 {
		t.Fatalf("boundLocked allocates %v times per call", n)
	}
}
