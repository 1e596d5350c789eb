package gossip

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"github.com/sluicelabs/sluice/gossip/gossiptest"
)

// memberlistLeftovers are the goroutines memberlist is known to leave
// running for a moment after its Shutdown (each named, with why, in
// gossiptest); none is Sluice's.
var memberlistLeftovers = gossiptest.MemberlistLeftovers()

// verifyNoLeaks checks, once the test and all its cleanups are done, that
// no goroutine is left but memberlistLeftovers.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t, memberlistLeftovers...) })
}

// New binds nothing and starts nothing: the port it is given stays free,
// and no goroutine appears, until Start.
func TestNewStartsNothing(t *testing.T) {
	verifyNoLeaks(t)
	port := gossiptest.FreePort(t)
	before := goroutineIDs()
	s, err := New(Config{NodeName: "a", BindAddr: "127.0.0.1", BindPort: port}, newMemLedger())
	if err != nil {
		t.Fatal(err)
	}
	// By identity, not count: a goroutine an earlier test left (memberlist's
	// leftovers) may end meanwhile.
	for id, stack := range goroutineIDs() {
		if _, ok := before[id]; !ok {
			t.Errorf("New started goroutine %d:\n%s", id, stack)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("New bound the gossip port: %v", err)
	}
	l.Close()
	if s.Addr() != "" || s.NumAlive() != 0 {
		t.Errorf("before Start: addr %q, %d alive", s.Addr(), s.NumAlive())
	}
	if _, ok := s.MemberStates(); ok {
		t.Error("a census before Start")
	}
	if _, err := s.Join([]string{"127.0.0.1:1"}); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Join before Start: %v, want ErrNotStarted", err)
	}
	if err := s.SetMeta(Meta{Version: "v", RulesHash: "h"}); err != nil {
		t.Errorf("SetMeta before Start: %v", err)
	}
	if err := s.Shutdown(); err != nil {
		t.Errorf("Shutdown before Start: %v", err)
	}
	if err := s.Start(); !errors.Is(err, ErrShutdown) {
		t.Errorf("Start after Shutdown: %v, want ErrShutdown", err)
	}
}

// What New refuses without binding anything.
func TestNewRefusesBadConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"no name", Config{}},
		{"key of 10 bytes", Config{NodeName: "a", SecretKey: make([]byte, 10)}},
		{"label too long", Config{NodeName: "a", Label: string(make([]byte, 256))}},
		{"packet too small", Config{NodeName: "a", PacketSize: 100}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg, newMemLedger()); err == nil {
				t.Error("accepted")
			}
		})
	}
}

// Start, Leave and Shutdown in every order a caller may use them: each
// ends with nothing of the syncer's left running.
func TestLifecycleOrders(t *testing.T) {
	for _, tt := range []struct {
		name string
		run  func(t *testing.T, s *Syncer)
	}{
		{"start, shutdown, shutdown", func(t *testing.T, s *Syncer) {
			mustStart(t, s)
			for range 2 {
				if err := s.Shutdown(); err != nil {
					t.Error(err)
				}
			}
		}},
		{"start twice", func(t *testing.T, s *Syncer) {
			mustStart(t, s)
			if err := s.Start(); !errors.Is(err, ErrStarted) {
				t.Errorf("second Start: %v, want ErrStarted", err)
			}
			s.Shutdown()
		}},
		{"start, leave, leave, shutdown, leave", func(t *testing.T, s *Syncer) {
			mustStart(t, s)
			for range 2 {
				if err := s.Leave(time.Second); err != nil {
					t.Error(err)
				}
			}
			if err := s.Shutdown(); err != nil {
				t.Error(err)
			}
			if err := s.Leave(time.Second); err != nil {
				t.Errorf("Leave after Shutdown: %v", err)
			}
		}},
		{"failed start, shutdown, start", func(t *testing.T, s *Syncer) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			s.cfg.BindPort = l.Addr().(*net.TCPAddr).Port // taken
			if err := s.Start(); err == nil {
				t.Fatal("Start on a port in use succeeded")
			}
			if err := s.Shutdown(); err != nil {
				t.Errorf("Shutdown after a failed Start: %v", err)
			}
			if err := s.Start(); !errors.Is(err, ErrShutdown) {
				t.Errorf("Start after a failed Start: %v, want ErrShutdown", err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			s, err := New(Config{NodeName: "a", BindAddr: "127.0.0.1", GossipInterval: 5 * time.Millisecond}, newMemLedger())
			if err != nil {
				t.Fatal(err)
			}
			tt.run(t, s)
		})
	}
}

// leaveBudget is how long the tests let a member of a cluster leave. Leave
// waits, half the budget each, for memberlist to send the leaving meta and
// then the leave: each is done once transmitted RetransmitMult ×
// ⌈log10(n+1)⌉ times, a few of memberlist's gossip rounds, which a loaded
// machine delays past half a second ("advertise leaving: timeout waiting
// for update broadcast" with a budget of 1 s). Leave returns as soon as both
// went out, so a generous budget costs an idle run nothing.
const leaveBudget = 10 * time.Second

// A cluster that exchanged counters, push-pull states and resets, then
// left and shut down, leaves no goroutine of Sluice's nor memberlist's
// beyond memberlistLeftovers.
func TestShutdownLeavesNoGoroutine(t *testing.T) {
	verifyNoLeaks(t)
	fast := func(c *memberlist.Config) {
		c.PushPullInterval = 50 * time.Millisecond
		c.ProbeInterval = 100 * time.Millisecond
		c.GossipInterval = 20 * time.Millisecond
	}
	var nodes []*Syncer
	var ledgers []*memLedger
	for _, name := range []string{"a", "b", "c"} {
		l := newMemLedger()
		s, err := New(Config{NodeName: name, BindAddr: "127.0.0.1", GossipInterval: 5 * time.Millisecond,
			SecretKey: []byte("0123456789abcdef"), Label: "test", MemberlistConfig: fast}, l)
		if err != nil {
			t.Fatal(err)
		}
		mustStart(t, s)
		nodes, ledgers = append(nodes, s), append(ledgers, l)
	}
	for _, s := range nodes[1:] {
		if _, err := s.Join([]string{nodes[0].Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all see all", func() bool {
		return nodes[0].NumAlive() == 3 && nodes[1].NumAlive() == 3 && nodes[2].NumAlive() == 3
	})
	ledgers[0].add(Counter{Rule: "r", Key: "k", Epoch: 1, Used: 5})
	waitFor(t, "c charges a's counter", func() bool { return ledgers[2].get("r/k") == 5 })
	waitFor(t, "a push-pull merged", func() bool { return nodes[1].Stats().StatesMerged.Load() > 0 })
	for _, s := range nodes {
		if err := s.LeaveAndShutdown(leaveBudget); err != nil {
			t.Error(err)
		}
	}
}

// Two clusters in one process: each syncer counts its own members, and a
// member that leaves, or dies, is counted left, or dead, until memberlist's
// GossipToTheDeadTime has passed. No census is shared through the process.
func TestCensusIsEachSyncersOwn(t *testing.T) {
	verifyNoLeaks(t)
	timings := func(c *memberlist.Config) {
		c.ProbeInterval = 100 * time.Millisecond
		c.ProbeTimeout = 50 * time.Millisecond
		c.SuspicionMult = 1
		c.GossipInterval = 20 * time.Millisecond
		c.GossipToTheDeadTime = 5 * time.Second
	}
	start := func(name string) *Syncer {
		s, err := New(Config{NodeName: name, BindAddr: "127.0.0.1", MemberlistConfig: timings}, newMemLedger())
		if err != nil {
			t.Fatal(err)
		}
		mustStart(t, s)
		t.Cleanup(func() { s.Shutdown() })
		return s
	}
	// Same names in both clusters: a census keyed by name would mix them.
	a, b, c, d := start("a"), start("b"), start("c"), start("d")
	x, y := start("a"), start("b")
	for _, s := range []*Syncer{b, c, d} {
		if _, err := s.Join([]string{a.Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := y.Join([]string{x.Addr()}); err != nil {
		t.Fatal(err)
	}
	census := func(s *Syncer) MemberStates {
		m, ok := s.MemberStates()
		if !ok {
			t.Fatalf("%s: no census while running", s.Self())
		}
		m.At = time.Time{}
		return m
	}
	waitFor(t, "a sees 4 alive, x sees 2", func() bool {
		return census(a) == MemberStates{Alive: 4} && census(x) == MemberStates{Alive: 2}
	})
	if err := d.LeaveAndShutdown(leaveBudget); err != nil {
		t.Fatal(err)
	}
	c.Shutdown() // a crash: no word
	want := MemberStates{Alive: 2, Dead: 1, Left: 1}
	waitFor(t, "a and b count c dead and d left", func() bool { return census(a) == want && census(b) == want })
	if got := census(x); got != (MemberStates{Alive: 2}) {
		t.Errorf("the other cluster's census changed: %+v", got)
	}
	waitFor(t, "the departed are forgotten after GossipToTheDeadTime", func() bool { return census(a) == MemberStates{Alive: 2} })
	a.Shutdown()
	if _, ok := a.MemberStates(); ok {
		t.Error("a census after Shutdown")
	}
}

func mustStart(t *testing.T, s *Syncer) {
	t.Helper()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
}

// A stream memberlist is still reading when the syncer shuts down is
// closed, so memberlist's goroutine reading it ends at once rather than at
// the stream's deadline (10 s).
func TestShutdownClosesStreamsMemberlistIsReading(t *testing.T) {
	verifyNoLeaks(t)
	s, err := New(Config{NodeName: "a", BindAddr: "127.0.0.1"}, newMemLedger())
	if err != nil {
		t.Fatal(err)
	}
	mustStart(t, s)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A labelled user message declaring 100 bytes, of which 3 are sent.
	msg := fuzzLabelled(append([]byte{mlUser, 0x81, 0xaa}, "UserMsgLen"...))
	msg = append(msg, 100, 0x94, 1, 2)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "memberlist has the stream", func() bool { return s.Transport().StreamsAccepted.Load() == 1 })
	start := time.Now()
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || time.Since(start) > 4*time.Second {
		t.Errorf("the stream was not closed at Shutdown (read: %v after %s)", err, time.Since(start))
	}
}

// goroutineIDs returns every goroutine's id and stack.
func goroutineIDs() map[int]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	ids := map[int]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		var id int
		if _, err := fmt.Sscanf(g, "goroutine %d ", &id); err == nil {
			ids[id] = g
		}
	}
	return ids
}
