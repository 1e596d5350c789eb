package testcluster

import (
	"fmt"
	"testing"
	"time"
)

// An operator resets a key in debt on every node by asking one node: every
// node admits it again at once, consumption after the reset is charged
// everywhere exactly once, and neither peers' earlier counters nor
// push-pull exchanges bring the old debt back.
func TestResetReachesTheWholeCluster(t *testing.T) {
	clock := &FakeClock{}
	c := start(t, Options{N: 3, Rules: fourPerSecond, Now: clock.Now, GossipInterval: 10 * time.Millisecond,
		PushPullInterval: 200 * time.Millisecond})
	c.PauseGossip(true)
	for r := range 12 {
		if d := c.Allow(r%3, "four", "client-k", 1); !d.Allowed || d.FailedOpen {
			t.Fatalf("request %d on node %d: %+v", r, r%3, d)
		}
	}
	c.PauseGossip(false)
	if err := c.WaitBalances("four", "client-k", 10*time.Second, func(_ int, b float64) bool { return b == -8 }); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d := c.Allow(i, "four", "client-k", 1); d.Allowed {
			t.Fatalf("node %d admitted a key in debt: %+v", i, d)
		}
	}

	v, err := c.Node(1).Daemon().ResetKey("four", "client-k")
	if err != nil {
		t.Fatal(err)
	}
	if !v.Clustered || v.Peers != 2 || v.Told != 2 || len(v.Failed) != 0 {
		t.Fatalf("reset answer %+v, want 2 of 2 peers told", v)
	}
	// Sent over TCP before ResetKey returned; applied on receipt.
	if err := c.WaitBalances("four", "client-k", 10*time.Second, func(_ int, b float64) bool { return b == 4 }); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d := c.Allow(i, "four", "client-k", 1); !d.Allowed {
			t.Fatalf("node %d refused the reset key: %+v", i, d)
		}
	}
	// Three admitted after the reset, one per node: every node ends at 1.
	if err := c.WaitBalances("four", "client-k", 10*time.Second, func(_ int, b float64) bool { return b == 1 }); err != nil {
		t.Fatal(err)
	}
	// Several push-pull exchanges later, nothing old came back.
	awaitPushPulls(t, c, 6)
	if b := c.Balances("four", "client-k"); b[0] != 1 || b[1] != 1 || b[2] != 1 {
		t.Fatalf("balances after push-pull %v, want 1 everywhere (the old debt came back?)", b)
	}
	for _, nd := range c.Nodes() {
		if n := nd.Daemon().Syncer().Stats().ResetsApplied.Load(); n != 1 {
			t.Errorf("node %s applied %d resets, want 1", nd.Name, n)
		}
	}
}

// A reset made while consumption was still unsent (gossip paused) forgives
// it: when gossip resumes, no node charges what was admitted before.
func TestResetForgivesConsumptionNotYetGossiped(t *testing.T) {
	clock := &FakeClock{}
	c := start(t, Options{N: 3, Rules: fourPerSecond, Now: clock.Now, GossipInterval: 10 * time.Millisecond})
	c.PauseGossip(true)
	for r := range 12 {
		c.Allow(r%3, "four", "client-k", 1)
	}
	if _, err := c.Node(0).Daemon().ResetKey("four", "client-k"); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitBalances("four", "client-k", 10*time.Second, func(_ int, b float64) bool { return b == 4 }); err != nil {
		t.Fatal(err) // every node has applied the reset
	}
	c.PauseGossip(false)
	c.Allow(2, "four", "client-k", 1) // after the reset: charged everywhere
	if err := c.WaitBalances("four", "client-k", 10*time.Second, func(_ int, b float64) bool { return b == 3 }); err != nil {
		t.Fatal(err)
	}
	// Gossip has run (node 2's admission reached the others); give the old
	// counters, had any survived, rounds to arrive: wait for 20 more rounds.
	sent := c.Node(2).Daemon().Syncer().Stats().PacketsSent.Load()
	c.Allow(2, "four", "other", 1)
	if err := poll(10*time.Second, func() bool { return c.Node(2).Daemon().Syncer().Stats().PacketsSent.Load() > sent }, func() string { return "node 2 to gossip" }); err != nil {
		t.Fatal(err)
	}
	if b := c.Balances("four", "client-k"); b[0] != 3 || b[1] != 3 || b[2] != 3 {
		t.Fatalf("balances %v, want 3 everywhere", b)
	}
}

// A node cut off while the reset is made keeps its debt meanwhile, and its
// balances and counters do not bring the debt back to the others; once the
// partition heals it is told again and admits too.
func TestResetReachesANodeCutOffWhenItWasMade(t *testing.T) {
	clock := &FakeClock{}
	c := start(t, Options{N: 3, Rules: fourPerSecond, Now: clock.Now, GossipInterval: 10 * time.Millisecond,
		PushPullInterval: 200 * time.Millisecond})
	c.PauseGossip(true) // all 12 admitted before any gossip: -8 everywhere after
	for r := range 12 {
		c.Allow(r%3, "four", "client-k", 1)
	}
	c.PauseGossip(false)
	if err := c.WaitBalances("four", "client-k", 10*time.Second, func(_ int, b float64) bool { return b == -8 }); err != nil {
		t.Fatal(err)
	}
	c.Partition([]int{0, 1}, []int{2})
	v, err := c.Node(0).Daemon().ResetKey("four", "client-k")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reset while node 2 is cut off: %d of %d peers told, failed %v", v.Told, v.Peers, v.Failed)
	if err := c.WaitBalances("four", "client-k", 10*time.Second, func(i int, b float64) bool { return i == 2 || b == 4 }); err != nil {
		t.Fatal(err)
	}
	if b := c.Balances("four", "client-k")[2]; b != -8 {
		t.Fatalf("node 2, cut off, holds %v, want its debt -8", b)
	}
	c.Heal()
	if err := c.WaitBalances("four", "client-k", 30*time.Second, func(_ int, b float64) bool { return b == 4 }); err != nil {
		t.Fatal(err)
	}
	// Push-pull exchanges after the heal do not bring node 2's old debt back.
	awaitPushPulls(t, c, 6)
	if b := c.Balances("four", "client-k"); b[0] != 4 || b[1] != 4 || b[2] != 4 {
		t.Fatalf("balances after the heal and push-pull %v, want 4 everywhere", b)
	}
}

// awaitPushPulls waits until the cluster's nodes have merged n more push-pull
// states between them.
func awaitPushPulls(t *testing.T, c *Cluster, n uint64) {
	t.Helper()
	merged := func() uint64 {
		var sum uint64
		for _, nd := range c.Nodes() {
			sum += nd.Daemon().Syncer().Stats().StatesMerged.Load()
		}
		return sum
	}
	before := merged()
	if err := poll(20*time.Second, func() bool { return merged() >= before+n }, func() string { return fmt.Sprintf("%d push-pull exchanges", n) }); err != nil {
		t.Fatal(err)
	}
}
