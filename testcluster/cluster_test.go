package testcluster

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// memberlist leaves these behind for a moment after Shutdown.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).triggerFunc"),
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).pushPullTrigger"),
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).packetHandler"),
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).streamListen"),
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).packetListen"),
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*NetTransport).udpListen"),
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*NetTransport).tcpListen"),
	)
}

func start(t *testing.T, opts Options) *Cluster {
	t.Helper()
	c, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

const fourPerSecond = "rules:\n  four:\n    rate: 4/1s\n"

// The seed scenario: 3 nodes share a 4/s limit; 12 requests spread over the
// 3 nodes within a second are all admitted locally, then gossip leaves every
// bucket at −8 and the next two seconds admit nothing anywhere.
func TestSeedScenario(t *testing.T) {
	clock := &FakeClock{}
	c := start(t, Options{N: 3, Rules: fourPerSecond, Now: clock.Now, GossipInterval: 10 * time.Millisecond})
	c.PauseGossip(true) // all 12 land before any gossip, as the scenario says
	for r := range 12 {
		if d := c.Allow(r%3, "four", "client-k", 1); !d.Allowed || d.FailedOpen {
			t.Fatalf("request %d on node %d: %+v", r, r%3, d)
		}
	}
	c.PauseGossip(false)
	if err := c.WaitBalances("four", "client-k", 10*time.Second, func(_ int, b float64) bool { return b == -8 }); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2*time.Second - time.Millisecond)
	for i := range 3 {
		if d := c.Allow(i, "four", "client-k", 1); d.Allowed {
			t.Fatalf("node %d admitted within two seconds of the burst: %+v", i, d)
		}
	}
	clock.Advance(time.Millisecond + 250*time.Millisecond) // 2.25s: −8 + 9 = 1 token
	if d := c.Allow(0, "four", "client-k", 1); !d.Allowed {
		t.Fatalf("node 0 still throttled after the debt was repaid: %+v", d)
	}
}

// drive offers load to the cluster for d: perNode[i] requests per second on
// node i, paced, bounded in time and count. It returns the admitted count.
func drive(c *Cluster, rule, key string, perNode []int, d time.Duration) int {
	var admitted sync.WaitGroup
	var mu sync.Mutex
	total := 0
	deadline := time.Now().Add(d)
	for i, rate := range perNode {
		if rate == 0 {
			continue
		}
		admitted.Add(1)
		go func() {
			defer admitted.Done()
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			n := 0
			for sent := 0; sent < rate*int(d/time.Second+1) && time.Now().Before(deadline); sent++ {
				<-tick.C
				if dec := c.Allow(i, rule, key, 1); dec.Allowed && !dec.FailedOpen {
					n++
				}
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	admitted.Wait()
	return total
}

// Skewed saturating load: cluster-wide admissions stay within 10% of
// burst + rate × time, however the load is spread over the nodes.
func TestSkewedLoadHeldToClusterLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("drives 10 seconds of load per case")
	}
	tests := []struct {
		nodes int
		skew  []int // requests per second offered on each node
	}{
		{3, []int{350, 100, 50}},       // 70/20/10 of 500/s, 5× the limit
		{3, []int{500, 0, 0}},          // 100/0/0
		{5, []int{350, 100, 50, 0, 0}}, // 70/20/10 over 5 nodes
		{5, []int{500, 0, 0, 0, 0}},    // 100/0/0 over 5 nodes
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("nodes=%d/skew=%v", tt.nodes, tt.skew), func(t *testing.T) {
			t.Parallel()
			c := start(t, Options{N: tt.nodes, Rules: "rules:\n  api:\n    rate: 100/1s\n", GossipInterval: 20 * time.Millisecond})
			const secs = 10
			start := time.Now()
			got := drive(c, "api", "hot-key", tt.skew, secs*time.Second)
			elapsed := time.Since(start).Seconds()
			want := 100 + 100*elapsed
			t.Logf("admitted %d over %.2fs, limit allows %.0f (%.1f%%)", got, elapsed, want, 100*float64(got)/want)
			if math.Abs(float64(got)-want) > 0.10*want {
				t.Fatalf("admitted %d, want %.0f ± 10%%", got, want)
			}
		})
	}
}
