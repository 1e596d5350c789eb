package gossip

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hashicorp/memberlist"
)

func TestApplyChargesEachTokenOnce(t *testing.T) {
	type msg struct {
		epoch, prev, used uint64
		want              uint64 // tokens charged by this message
	}
	tests := []struct {
		name string
		msgs []msg
	}{
		{"in order", []msg{{1, 0, 3, 3}, {1, 3, 5, 2}, {1, 5, 9, 4}}},
		{"duplicates charge nothing", []msg{{1, 0, 3, 3}, {1, 0, 3, 0}, {1, 3, 5, 2}, {1, 3, 5, 0}}},
		{"a lost packet is repaired by the next", []msg{{1, 0, 3, 3}, {1, 5, 9, 6}}},
		{"reordered: the late packet fills the gap below", []msg{{1, 3, 5, 2}, {1, 0, 3, 3}, {1, 0, 3, 0}}},
		{"first heard midway: only the named increment", []msg{{1, 100, 104, 4}, {1, 104, 110, 6}}},
		{"new epoch starts over", []msg{{1, 0, 50, 50}, {2, 0, 3, 3}, {2, 3, 4, 1}}},
		{"a late counter of an older epoch charges its increment once", []msg{{2, 0, 3, 3}, {1, 0, 50, 50}, {1, 0, 50, 0}, {2, 3, 4, 1}}},
		{"a forged newer epoch does not hide the real one", []msg{{2, 0, 3, 3}, {9, 0, 1, 1}, {2, 3, 5, 2}, {2, 3, 5, 0}, {2, 5, 6, 1}}},
		{"push-pull baseline charges nothing, later packets charge above it", []msg{{1, 40, 40, 0}, {1, 40, 42, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Syncer{cfg: Config{MaxSeen: 100}, seen: map[counterKey]*seenRange{}}
			for i, m := range tt.msgs {
				got, _, _ := s.applyLocked("peer", Counter{Rule: "r", Key: "k", Epoch: m.epoch, Prev: m.prev, Used: m.used})
				if got != m.want {
					t.Fatalf("message %d %+v charged %d, want %d", i, m, got, m.want)
				}
			}
		})
	}
}

func TestSeenTableIsBounded(t *testing.T) {
	s := &Syncer{cfg: Config{MaxSeen: 10}, seen: map[counterKey]*seenRange{}}
	for i := range 1000 {
		s.applyLocked("peer", Counter{Rule: "r", Key: fmt.Sprint(i), Epoch: 1, Used: 1})
	}
	if len(s.seen) > 10 {
		t.Fatalf("seen holds %d entries, cap 10", len(s.seen))
	}
}

// memLedger is an in-memory Ledger: it records charges, per key and per
// window, and hands out queued counters.
type memLedger struct {
	mu      sync.Mutex
	queued  []Counter
	charged map[string]uint64 // by rule/key, all windows
	windows map[uint64]uint64 // by window, all keys
}

func newMemLedger() *memLedger {
	return &memLedger{charged: map[string]uint64{}, windows: map[uint64]uint64{}}
}

func (l *memLedger) Drain(fn func(Counter)) {
	l.mu.Lock()
	q := l.queued
	l.queued = nil
	l.mu.Unlock()
	for _, c := range q {
		fn(c)
	}
}
func (l *memLedger) Charge(rule, key string, window, tokens uint64) {
	l.mu.Lock()
	l.charged[rule+"/"+key] += tokens
	l.windows[window] += tokens
	l.mu.Unlock()
}
func (l *memLedger) Snapshot(func(Counter, float64) bool)       {}
func (l *memLedger) Adopt(string, string, uint64, float64) bool { return false }
func (l *memLedger) add(c Counter) {
	l.mu.Lock()
	l.queued = append(l.queued, c)
	l.mu.Unlock()
}
func (l *memLedger) get(k string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.charged[k]
}

func newTestSyncer(t *testing.T, name string, key []byte, l Ledger) *Syncer {
	t.Helper()
	s, err := New(Config{
		NodeName: name, BindAddr: "127.0.0.1", BindPort: 0,
		GossipInterval: 5 * time.Millisecond, SecretKey: key, Label: "test",
	}, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown() })
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

func TestNodeWithoutTheKeyCanNeitherJoinNorInject(t *testing.T) {
	key := []byte("0123456789abcdef")
	la, lb, lx := newMemLedger(), newMemLedger(), newMemLedger()
	a := newTestSyncer(t, "a", key, la)
	b := newTestSyncer(t, "b", key, lb)
	intruder := newTestSyncer(t, "x", []byte("fedcba9876543210"), lx)
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	if n, err := intruder.Join([]string{a.Addr()}); err == nil || n != 0 {
		t.Fatalf("a node with the wrong key joined (%d answered, err %v)", n, err)
	}
	plain := newTestSyncer(t, "p", nil, newMemLedger())
	if n, err := plain.Join([]string{a.Addr()}); err == nil || n != 0 {
		t.Fatalf("a node without encryption joined (%d answered, err %v)", n, err)
	}

	// The intruder sends a counters packet straight to a; then b, which has
	// the key, sends one. Once b's is charged, the intruder's must not be.
	aNode := &memberlist.Node{Name: "a", Addr: a.list().LocalNode().Addr, Port: a.list().LocalNode().Port}
	w := newPacketWriter("x", 1300)
	w.add("x", Counter{Rule: "r", Key: "victim", Epoch: 1, Used: 1_000_000})
	if err := intruder.list().SendBestEffort(aNode, first(w.packets())); err != nil {
		t.Fatal(err)
	}
	lb.add(Counter{Rule: "r", Key: "honest", Epoch: 1, Used: 2})
	waitFor(t, "b's counter reaches a", func() bool { return la.get("r/honest") == 2 })
	if got := la.get("r/victim"); got != 0 {
		t.Fatalf("the intruder's packet charged %d tokens", got)
	}
	if members := a.NumAlive(); members != 2 {
		t.Fatalf("a sees %d members, want 2 (a and b)", members)
	}
}

func TestCountersReachEveryMemberOnce(t *testing.T) {
	ledgers := []*memLedger{newMemLedger(), newMemLedger(), newMemLedger()}
	var nodes []*Syncer
	for i, l := range ledgers {
		nodes = append(nodes, newTestSyncer(t, fmt.Sprint("n", i), nil, l))
	}
	for _, n := range nodes[1:] {
		if _, err := n.Join([]string{nodes[0].Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all see 3 members", func() bool { return nodes[0].NumAlive() == 3 && nodes[2].NumAlive() == 3 })
	ledgers[0].add(Counter{Rule: "r", Key: "k", Epoch: 7, Used: 3})
	ledgers[0].add(Counter{Rule: "r", Key: "k", Epoch: 7, Prev: 3, Used: 5})
	waitFor(t, "n1 and n2 are charged 5", func() bool { return ledgers[1].get("r/k") == 5 && ledgers[2].get("r/k") == 5 })
	if ledgers[0].get("r/k") != 0 {
		t.Fatal("the origin charged its own consumption back to itself")
	}
	nodes[0].Flush() // resending nothing new must charge nothing
	ledgers[0].add(Counter{Rule: "r", Key: "k", Epoch: 7, Prev: 0, Used: 5})
	ledgers[0].add(Counter{Rule: "r", Key: "k2", Epoch: 1, Used: 1})
	waitFor(t, "the marker reaches n1 and n2", func() bool { return ledgers[1].get("r/k2") == 1 && ledgers[2].get("r/k2") == 1 })
	if ledgers[1].get("r/k") != 5 || ledgers[2].get("r/k") != 5 {
		t.Fatal("a repeated counter was charged twice")
	}
}

// adoptLedger is a memLedger whose Adopt answers as told.
type adoptLedger struct {
	*memLedger
	adopt bool
}

func (l adoptLedger) Adopt(string, string, uint64, float64) bool { return l.adopt }

func TestMergeStateAdoptsWithoutDoubleCounting(t *testing.T) {
	for _, adopt := range []bool{true, false} {
		l := adoptLedger{newMemLedger(), adopt}
		s := &Syncer{cfg: Config{MaxSeen: 100, FanoutLimit: 64}, self: "me", ledger: l, seen: map[counterKey]*seenRange{},
			pending: map[pendingKey]*pendingCounter{}, log: hclog.NewNullLogger()}
		// Peer "a" is at −10: its own 10, and 10 of "b"'s it has charged.
		state := encodeState("a",
			[]stateEntry{{c: Counter{Rule: "r", Key: "k", Epoch: 1, Used: 10, Prev: 10}, balance: -10}},
			[]seenEntry{{origin: "b", c: Counter{Rule: "r", Key: "k", Epoch: 2, Used: 10, Prev: 10}}})
		s.mergeState(state)
		// b's first packet then arrives, naming its whole epoch.
		w := newPacketWriter("b", 1300)
		w.add("b", Counter{Rule: "r", Key: "k", Epoch: 2, Prev: 0, Used: 10})
		s.receive(stampNow(first(w.packets())))
		got := l.get("r/k")
		if adopt && got != 0 {
			t.Errorf("after adopting a's balance, b's counter (already in it) charged %d", got)
		}
		if !adopt && got != 10 {
			t.Errorf("without adopting, b's counter should be charged: got %d", got)
		}
	}
}

// A second node claiming a member's name from another address does not take
// its place: memberlist refuses the conflicting claim, the real member stays,
// and counters from the real one keep arriving.
func TestDuplicateNodeNameDoesNotDisplaceTheMember(t *testing.T) {
	la, lb := newMemLedger(), newMemLedger()
	a := newTestSyncer(t, "a", nil, la)
	b := newTestSyncer(t, "b", nil, lb)
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a and b see each other", func() bool { return a.NumAlive() == 2 && b.NumAlive() == 2 })
	impostor := newTestSyncer(t, "b", nil, newMemLedger()) // same name, another port
	impostor.Join([]string{a.Addr()})                      // refused or ignored: either way b stays

	lb.add(Counter{Rule: "r", Key: "k", Epoch: 1, Used: 3})
	waitFor(t, "the real b's counter reaches a", func() bool { return la.get("r/k") == 3 })
	for _, m := range a.Members() {
		if m.Name == "b" && m.State == "alive" && m.Addr != b.Addr() {
			t.Fatalf("a now knows b at the impostor's address %s (real %s)", m.Addr, b.Addr())
		}
	}
	if n := a.NumAlive(); n != 2 {
		t.Fatalf("a sees %d members, want 2", n)
	}
}

// Counters no packet mentions for a whole prune interval are forgotten, the
// busy ones kept; a forgotten counter heard again charges only the increment
// its packet names, never the origin's history.
func TestIdleCountersAreForgottenSafely(t *testing.T) {
	s := &Syncer{cfg: Config{MaxSeen: 100}, seen: map[counterKey]*seenRange{}}
	apply := func(key string, prev, used uint64) uint64 {
		got, _, _ := s.applyLocked("peer", Counter{Rule: "r", Key: key, Epoch: 1, Prev: prev, Used: used})
		return got
	}
	apply("busy", 0, 5)
	apply("idle", 0, 5)
	s.pruneSeen() // both were mentioned since the last prune: both kept
	if len(s.seen) != 2 {
		t.Fatalf("first prune left %d counters, want 2", len(s.seen))
	}
	apply("busy", 5, 6)
	s.pruneSeen() // idle was not mentioned since: forgotten
	if _, ok := s.seen[counterKey{"peer", "r", "idle"}]; ok || len(s.seen) != 1 || s.stats.SeenPruned.Load() != 1 {
		t.Fatalf("after the second prune: %d counters, %d pruned", len(s.seen), s.stats.SeenPruned.Load())
	}
	if got := apply("idle", 5, 8); got != 3 {
		t.Fatalf("a forgotten counter heard again charged %d, want the increment 3", got)
	}
	if got := apply("busy", 5, 6); got != 0 {
		t.Fatalf("a kept counter's duplicate charged %d", got)
	}
}

// A counter's generation is (epoch, window), epoch first: a newer one starts
// the count over, an older one is stale.
func TestApplyOrdersWindowsWithinEpochs(t *testing.T) {
	type msg struct {
		epoch, window, prev, used uint64
		want                      uint64 // tokens charged by this message
	}
	tests := []struct {
		name string
		msgs []msg
	}{
		{"the next window resets and charges Used−Prev", []msg{{1, 5, 0, 10, 10}, {1, 6, 0, 3, 3}, {1, 6, 3, 4, 1}}},
		{"the next window first heard midway: only the named increment", []msg{{1, 5, 0, 10, 10}, {1, 6, 2, 7, 5}, {1, 6, 7, 9, 2}}},
		{"a window's last counter, then the next's first", []msg{{1, 5, 0, 3, 3}, {1, 5, 3, 8, 5}, {1, 6, 0, 2, 2}}},
		{"a late counter of the previous window charges once", []msg{{1, 5, 0, 10, 10}, {1, 6, 0, 3, 3}, {1, 5, 10, 12, 2}, {1, 5, 10, 12, 0}, {1, 6, 3, 5, 2}}},
		{"duplicates within a window charge nothing", []msg{{1, 5, 0, 3, 3}, {1, 5, 0, 3, 0}, {1, 5, 3, 5, 2}, {1, 5, 3, 5, 0}}},
		{"reordered within a window: the late packet fills the gap", []msg{{1, 5, 3, 5, 2}, {1, 5, 0, 3, 3}, {1, 5, 0, 5, 0}}},
		{"a new epoch with a smaller window is newer", []msg{{1, 9, 0, 10, 10}, {2, 3, 0, 4, 4}, {1, 9, 10, 20, 10}, {2, 3, 4, 6, 2}}},
		{"an old epoch with a larger window is older, charged once", []msg{{2, 3, 0, 4, 4}, {1, 9, 0, 10, 10}, {1, 9, 0, 10, 0}}},
		{"a windowed counter after a bucket one of the same epoch is newer", []msg{{1, 0, 0, 4, 4}, {1, 1, 0, 2, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Syncer{cfg: Config{MaxSeen: 100}, seen: map[counterKey]*seenRange{}}
			for i, m := range tt.msgs {
				got, _, _ := s.applyLocked("peer", Counter{Rule: "r", Key: "k", Epoch: m.epoch, Window: m.window, Prev: m.prev, Used: m.used})
				if got != m.want {
					t.Fatalf("message %d %+v charged %d, want %d", i, m, got, m.want)
				}
			}
		})
	}
}

// A push-pull baseline follows the same order: an older window's is ignored,
// a newer one's replaces the range without charging.
func TestBaselineOrdersWindows(t *testing.T) {
	s := &Syncer{cfg: Config{MaxSeen: 100}, seen: map[counterKey]*seenRange{}}
	apply := func(window, prev, used uint64) uint64 {
		got, _, _ := s.applyLocked("peer", Counter{Rule: "r", Key: "k", Epoch: 1, Window: window, Prev: prev, Used: used})
		return got
	}
	baseline := func(window, used uint64) {
		s.baselineLocked("peer", Counter{Rule: "r", Key: "k", Epoch: 1, Window: window, Prev: used, Used: used})
	}
	steps := []struct {
		name string
		do   func() uint64
		want uint64
	}{
		{"first counter of window 6", func() uint64 { return apply(6, 0, 5) }, 5},
		{"baseline of window 5 is stale", func() uint64 { baseline(5, 100); return 0 }, 0},
		{"window 6 goes on above 5", func() uint64 { return apply(6, 5, 7) }, 2},
		{"baseline of window 7", func() uint64 { baseline(7, 4); return 0 }, 0},
		{"window 7 up to the baseline charges nothing", func() uint64 { return apply(7, 0, 4) }, 0},
		{"window 7 above the baseline", func() uint64 { return apply(7, 4, 6) }, 2},
	}
	for _, st := range steps {
		if got := st.do(); got != st.want {
			t.Fatalf("%s: charged %d, want %d", st.name, got, st.want)
		}
	}
	if got := s.Origins("r", "k"); len(got) != 1 || got[0] != (OriginCount{Origin: "peer", Epoch: 1, Window: 7, Used: 6}) {
		t.Fatalf("Origins = %+v", got)
	}
}

// When a key moves to a new window between rounds, the old window's last
// counter and the new one's first are both queued, and a round's packet
// lists the windows in ascending order.
func TestPendingKeepsEachWindowAndSendsThemInOrder(t *testing.T) {
	for range 20 { // map iteration order varies: try it several times
		s := &Syncer{cfg: Config{MaxPending: 100, PacketSize: 1300}, self: "me", pending: map[pendingKey]*pendingCounter{}}
		queue := func(key string, window, prev, used uint64) {
			s.queueLocked("me", Counter{Rule: "r", Key: key, Epoch: 1, Window: window, Prev: prev, Used: used}, 1)
		}
		queue("k", 6, 0, 2)
		queue("k", 5, 0, 3)
		queue("k", 5, 3, 8) // coalesces with the first counter of window 5
		queue("other", 7, 0, 1)
		queue("other", 4, 0, 9)
		queue("bucket", 0, 0, 4)
		queue("bucket", 0, 4, 6)
		if len(s.pending) != 5 {
			t.Fatalf("%d pending entries, want 5", len(s.pending))
		}
		packets, _ := s.packPendingLocked(false)
		// Two packets: bucket counters alone (a peer from before windows
		// refuses a packet holding any windowed entry), then the windowed ones.
		if len(packets) != 2 || len(s.pending) != 0 {
			t.Fatalf("%d packets, %d entries left pending", len(packets), len(s.pending))
		}
		var got []Counter
		for i, p := range packets {
			var in []Counter
			if _, err := decodeCounters(p, func(_ string, c Counter) { in = append(in, c) }); err != nil {
				t.Fatal(err)
			}
			for _, c := range in {
				if (c.Window == 0) != (i == 0) {
					t.Fatalf("packet %d holds %+v: bucket and windowed counters mixed", i, c)
				}
			}
			got = append(got, in...)
		}
		var windows []uint64
		var k []Counter
		for _, c := range got {
			if c.Window != 0 {
				windows = append(windows, c.Window)
			}
			if c.Key == "k" {
				k = append(k, c)
			}
		}
		if !slices.IsSorted(windows) || len(windows) != 4 {
			t.Fatalf("windows sent in the order %v", windows)
		}
		want := []Counter{{Rule: "r", Key: "k", Epoch: 1, Window: 5, Prev: 0, Used: 8}, {Rule: "r", Key: "k", Epoch: 1, Window: 6, Prev: 0, Used: 2}}
		if !slices.Equal(k, want) {
			t.Fatalf("key k sent as %+v, want %+v", k, want)
		}
		if i := slices.IndexFunc(got, func(c Counter) bool { return c.Key == "bucket" }); i < 0 || got[i].Prev != 0 || got[i].Used != 6 {
			t.Fatalf("bucket counter sent as %+v", got)
		}
	}
}

// The pending queue stays bounded: relayed entries and this node's own
// windowed ones are dropped at MaxPending (a key that changes window while
// no member takes its counters would otherwise grow it without end); own
// bucket counters, one per key, are always queued, as before windows.
func TestPendingIsBoundedAcrossWindows(t *testing.T) {
	s := &Syncer{cfg: Config{MaxPending: 10, PacketSize: 1300}, self: "me", pending: map[pendingKey]*pendingCounter{}}
	for w := range uint64(100) {
		s.queueLocked("me", Counter{Rule: "r", Key: "k", Epoch: 1, Window: w + 1, Used: 1}, 1)
		s.queueLocked("peer", Counter{Rule: "r", Key: "k", Epoch: 1, Window: w + 1, Used: 1}, 1)
	}
	if len(s.pending) != 10 {
		t.Fatalf("%d pending entries, cap 10", len(s.pending))
	}
	for i := range 20 {
		s.queueLocked("me", Counter{Rule: "r", Key: fmt.Sprint("bucket-", i), Epoch: 1, Used: 1}, 1)
	}
	if len(s.pending) != 30 {
		t.Fatalf("%d pending entries, want 10 windowed and 20 own bucket counters", len(s.pending))
	}
}

// Windows travel from a peer's packet to the ledger: each charge names the
// window it belongs to.
func TestReceiveChargesTheNamedWindow(t *testing.T) {
	l := newMemLedger()
	s := &Syncer{cfg: Config{MaxSeen: 100, FanoutLimit: 64}, self: "me", ledger: l, seen: map[counterKey]*seenRange{},
		pending: map[pendingKey]*pendingCounter{}, log: hclog.NewNullLogger()}
	w := newPacketWriter("b", 1300)
	w.add("b", Counter{Rule: "r", Key: "k", Epoch: 1, Window: 5, Prev: 0, Used: 8})
	w.add("b", Counter{Rule: "r", Key: "k", Epoch: 1, Window: 6, Prev: 0, Used: 2})
	w.add("b", Counter{Rule: "r", Key: "k", Epoch: 1, Window: 5, Prev: 8, Used: 9}) // late: still charged, once
	w.add("b", Counter{Rule: "r", Key: "bucket", Epoch: 1, Prev: 0, Used: 4})
	s.receive(stampNow(first(w.packets())))
	if want := map[uint64]uint64{0: 4, 5: 9, 6: 2}; !maps.Equal(l.windows, want) {
		t.Fatalf("charged by window %v, want %v", l.windows, want)
	}
}
