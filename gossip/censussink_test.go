package gossip

import (
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
	"github.com/hashicorp/memberlist"
)

// installTestCensusSink does what a program does (cmd/sluiced): it makes a
// CensusSink go-metrics' global until the test ends.
func installTestCensusSink(t *testing.T) *CensusSink {
	t.Helper()
	sink := NewCensusSink()
	conf := metrics.DefaultConfig("")
	conf.EnableHostname, conf.EnableRuntimeMetrics = false, false
	if _, err := metrics.NewGlobal(conf, sink); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { metrics.NewGlobal(conf, &metrics.BlackholeSink{}) })
	return sink
}

// With the program's census sink, a member memberlist suspects is counted
// suspect (not alive) by the syncers that suspect it, and only by them:
// two clusters in one process share the sink, each reads its own census.
// Without the sink, Suspect stays 0 (TestCensusIsEachSyncersOwn).
func TestCensusSinkCountsSuspects(t *testing.T) {
	verifyNoLeaks(t)
	sink := installTestCensusSink(t)
	timings := func(c *memberlist.Config) {
		c.ProbeInterval = 100 * time.Millisecond
		c.ProbeTimeout = 50 * time.Millisecond
		c.SuspicionMult = 30 // suspected for 3 s before declared dead: 30 censuses
		c.GossipInterval = 20 * time.Millisecond
		c.PushPullInterval = 100 * time.Millisecond // the census gauge is set at each push-pull
	}
	start := func(name string) *Syncer {
		s, err := New(Config{NodeName: name, BindAddr: "127.0.0.1", MemberlistConfig: timings, Census: sink}, newMemLedger())
		if err != nil {
			t.Fatal(err)
		}
		mustStart(t, s)
		t.Cleanup(func() { s.Shutdown() })
		return s
	}
	a, b, c := start("a"), start("b"), start("c")
	x, y := start("a"), start("b") // same names, another cluster
	for _, s := range []*Syncer{b, c} {
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
	waitFor(t, "a sees 3 alive, x sees 2", func() bool {
		return census(a) == MemberStates{Alive: 3} && census(x) == MemberStates{Alive: 2}
	})
	c.Shutdown() // a crash: no word; a and b probe it in vain and suspect it
	want := MemberStates{Alive: 2, Suspect: 1}
	waitFor(t, "a and b count c suspect", func() bool { return census(a) == want && census(b) == want })
	if got := census(x); got != (MemberStates{Alive: 2}) {
		t.Errorf("the other cluster's census changed: %+v", got)
	}
	// Then declared dead (memberlist's suspicion timer fires before the
	// test ends, not in a later test's goroutine count).
	want = MemberStates{Alive: 2, Dead: 1}
	waitFor(t, "a and b count c dead, no longer suspect", func() bool { return census(a) == want && census(b) == want })
	a.Shutdown()
	if _, ok := sink.suspect(a.censusID); ok {
		t.Error("the sink kept a's census after its Shutdown")
	}
}
