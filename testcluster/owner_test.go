package testcluster

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ownerRules: api is the limit (100/s, burst 100); probe refills so
// slowly that a probe's token shows for its whole wait.
const ownerRules = "rules:\n  api:\n    rate: 100/1s\n  probe:\n    rate: 1000/1h\n"

// ownerSizes are the cluster sizes the owner-mode tests run at.
func ownerSizes() []int {
	if testing.Short() || raceEnabled {
		// 50 in-process nodes gossiping every 20 ms under the race
		// detector do not keep their membership on two loaded cores
		// (seen beside another test run: 30 s without all 50 alive at
		// once); the race detector covers the same code at 3 and 10, and
		// .ci/run runs the 50-node cases without it.
		return []int{3, 10}
	}
	return []int{3, 10, 50}
}

// evenLoad offers total requests per second spread evenly over n nodes.
func evenLoad(n, total int) []int {
	per := make([]int, n)
	for i := range per {
		per[i] = max(1, total/n)
	}
	return per
}

// TestOwnerModeHoldsTheLimit: in owner mode, saturating load (five times
// the limit) on one key spread evenly over N nodes is held to burst +
// rate × T within 5% (issue 20's goal 1): every node hears the others'
// consumption from the key's owner, never from each other. The lower bound
// is asserted only when the load was offered; the test logs the nodes'
// views of the owner (a replica holding an aggregate: a node failed over).
//
// Each size runs as sluiced does ("shares": first-contact hold, fair floor
// and the owner's shares), and at up to sharesOffMax nodes also without
// them ("shares off", daemon.Config.NoFirstShare, as before issue 20). Not
// at 50 without shares: each node then decides on its own balance, and
// every node whose request comes while its balance shows a token admits
// it before hearing the others'. The driver's tickers fire on every node
// at once, so the cluster admits in waves of one token per node; a wave
// at 50 nodes is 50 tokens, 7.1% of the 700 a 6 s run allows, and a
// gossip round late by more than a tick (100 ms: a starved machine) lets
// a second wave through. Its total then lies anywhere from 100% to about
// 114% with the phase of the last wave at the deadline (measured: 105-114%
// in about one run of ten on a loaded machine, every node charged exactly
// the others' consumption afterwards: nothing lost, nothing counted
// twice). That is the overshoot issue 20's shares remove (a node takes
// only its share of the owner's view), not a bound 5% can hold; at 10
// nodes a wave is 10 tokens (1.4%).
func TestOwnerModeHoldsTheLimit(t *testing.T) {
	const sharesOffMax = 10
	for _, n := range ownerSizes() {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			for _, shares := range []bool{true, false} {
				name := "shares"
				if !shares {
					name = "shares off"
					if n > sharesOffMax {
						continue
					}
				}
				t.Run(name, func(t *testing.T) { ownerHoldsTheLimit(t, n, shares) })
			}
		})
	}
}

// ownerHoldsTheLimit is a case of TestOwnerModeHoldsTheLimit.
func ownerHoldsTheLimit(t *testing.T, n int, shares bool) {
	c := start(t, Options{N: n, Rules: ownerRules, GossipInterval: 20 * time.Millisecond, GossipMode: "owner", FirstShare: shares})
	const secs, key = 6, "hot-key"
	stop := make(chan struct{})
	views := make(chan ownerViews, 1)
	go func() { views <- watchOwnerViews(c, "api", key, stop) }()
	start := time.Now()
	got, offered := driveOffered(c, "api", key, evenLoad(n, 500), secs*time.Second)
	elapsed := time.Since(start).Seconds()
	close(stop)
	v := <-views
	want := 100 + 100*elapsed
	asked := n * max(1, 500/n) * secs
	t.Logf("admitted %d over %.2fs; burst + rate × T = %.0f (%.1f%%); offered %d of %d asked; %s",
		got, elapsed, want, 100*float64(got)/want, offered, asked, v)
	withinShare(t, got, offered, asked, want, 0.05) // the lower bound only when the load was offered
}

// ownerProbe takes one token of key on node from and returns how long until
// every other node's balance shows it.
func ownerProbe(c *Cluster, from int, rule, key string, timeout time.Duration) (time.Duration, bool) {
	before := c.Balances(rule, key)
	start := time.Now()
	if d := c.Allow(from, rule, key, 1); !d.Allowed || d.FailedOpen {
		return 0, false
	}
	pending := make([]int, 0, c.Size())
	for i := range c.Size() {
		if i != from {
			pending = append(pending, i)
		}
	}
	poll := time.NewTicker(200 * time.Microsecond)
	defer poll.Stop()
	for len(pending) > 0 {
		if time.Since(start) > timeout {
			return 0, false
		}
		<-poll.C
		pending = slices.DeleteFunc(pending, func(i int) bool {
			b, ok := c.Node(i).Daemon().Balance(rule, key)
			return ok && b <= before[i]-0.5
		})
	}
	return time.Since(start), true
}

// TestOwnerModeConverges: once every node holds a key, a token taken on any
// node shows on every other within about two gossip intervals (one to
// reach the owner, one for its answer) plus the round trips. The bound
// asserted is looser (the nodes share two loaded cores); the figures are
// logged.
func TestOwnerModeConverges(t *testing.T) {
	const iv = 50 * time.Millisecond
	for _, n := range ownerSizes() {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			c := start(t, Options{N: n, Rules: ownerRules, GossipInterval: iv, GossipMode: "owner"})
			const probes = 40
			var lags []float64
			for p := range probes {
				key := "conv-" + strconv.Itoa(p/10) // a key per ten probes
				if p%10 == 0 {
					took := make([]time.Time, n)
					for i := range n { // every node holds the key
						took[i] = time.Now()
						c.Allow(i, "probe", key, 1)
					}
					// Each node's bucket refills from its own first
					// token: on a loaded machine the loop above takes
					// seconds (1.8 s is half a token of probe), so the
					// refill since each node's token is allowed for,
					// and a node short of one of the n tokens still
					// lies half a token above.
					const perSecond = 1000.0 / 3600
					want := func(i int) float64 {
						return 1000 - float64(n) + 0.5 + perSecond*time.Since(took[i]).Seconds()
					}
					if err := c.WaitBalances("probe", key, 15*time.Second, func(i int, b float64) bool { return b <= want(i) }); err != nil {
						t.Fatal(err)
					}
				}
				lag, ok := ownerProbe(c, p%n, "probe", key, 10*time.Second)
				if !ok {
					t.Fatalf("probe %d from node %d never showed everywhere: %v", p, p%n, c.Balances("probe", key))
				}
				lags = append(lags, float64(lag)/float64(iv))
			}
			slices.Sort(lags)
			p50, p90, p99 := lags[len(lags)/2], lags[len(lags)*9/10], lags[len(lags)*99/100]
			t.Logf("convergence in gossip intervals of %s over %d probes: p50 %.2f, p90 %.2f, p99 %.2f, max %.2f", iv, probes, p50, p90, p99, lags[len(lags)-1])
			// Of 40 probes the p99 is the slowest, which on two loaded
			// cores (50 daemons, the race detector, other tests) is the
			// scheduler's (8 intervals seen once beside another test run):
			// the assertion takes the p50 and p90, the figure is logged.
			if p50 > 3 || p90 > 6 {
				t.Fatalf("convergence p50 %.2f, p90 %.2f intervals; want about 2 (asserted p50 ≤ 3, p90 ≤ 6)", p50, p90)
			}
		})
	}
}

// ownerNode returns the index of the node that owns key under rule (as
// node 0's ring says), its name and its replica's.
func ownerNode(t *testing.T, c *Cluster, rule, key string) (int, string, string) {
	t.Helper()
	owner, replica := c.Node(0).Daemon().Syncer().OwnerOf(rule, key)
	for i, nd := range c.Nodes() {
		if nd.Name == owner {
			return i, owner, replica
		}
	}
	t.Fatalf("owner %q of %q is no node", owner, key)
	return -1, "", ""
}

// TestOwnerKilledMidRunKeepsTheLimit: the owner of a hot key is killed (no
// leave) while every node is saturating the key. The others stop hearing
// answers, fail over to the key's replica within ownerFailover rounds
// (before memberlist declares the owner dead) and send it everything the
// owner had not acknowledged: the cluster's total over the run stays
// within 5% of burst + rate × T.
func TestOwnerKilledMidRunKeepsTheLimit(t *testing.T) {
	n := 10
	if testing.Short() {
		n = 5
	}
	c := start(t, Options{N: n, Rules: ownerRules, GossipInterval: 20 * time.Millisecond, GossipMode: "owner"})
	const key = "killed-owner-key"
	victim, owner, replica := ownerNode(t, c, "api", key)
	const secs = 12
	killAt := 3 * time.Second
	start := time.Now()
	killed := make(chan error, 1)
	go func() {
		timer := time.NewTimer(killAt)
		defer timer.Stop()
		<-timer.C
		killed <- c.Crash(victim)
	}()
	perSec, offered := driveSeconds(c, "api", key, evenLoad(n, 500), secs*time.Second)
	elapsed := time.Since(start).Seconds()
	if err := <-killed; err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, v := range perSec {
		got += v
	}
	want := 100 + 100*elapsed
	asked := max(1, 500/n) * n * secs
	t.Logf("owner %s (node %d, replica %s) killed at %s: admitted %d over %.2fs; burst + rate × T = %.0f (%.1f%%); per second %v; offered %d of %d asked",
		owner, victim, replica, killAt, got, elapsed, want, 100*float64(got)/want, perSec, offered, asked)
	withinShare(t, got, offered, asked, want, 0.05) // the lower bound only when the load was offered
}

// driveSeconds is drive, counting admissions per second of the run; it
// also returns how many requests it offered.
func driveSeconds(c *Cluster, rule, key string, perNode []int, d time.Duration) (perSec []int, offered int) {
	secs := int(d / time.Second)
	counts := make([][]int, len(perNode))
	var sentAll atomic.Int64
	done := make(chan struct{}, len(perNode))
	start := time.Now()
	for i, rate := range perNode {
		counts[i] = make([]int, secs+1)
		go func() {
			defer func() { done <- struct{}{} }()
			if rate == 0 {
				return
			}
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for sent := 0; sent < rate*(secs+1); sent++ {
				<-tick.C
				at := time.Since(start)
				if at >= d {
					return
				}
				sentAll.Add(1)
				if dec := c.Allow(i, rule, key, 1); dec.Allowed && !dec.FailedOpen {
					counts[i][int(at/time.Second)]++
				}
			}
		}()
	}
	for range perNode {
		<-done
	}
	out := make([]int, secs)
	for _, cs := range counts {
		for s := range secs {
			out[s] += cs[s]
		}
	}
	return out, int(sentAll.Load())
}

// TestOwnerModeUnderLoss: with 10% and 30% of packets dropped (and some
// duplicated and reordered), owner mode still holds the limit within 5%:
// counters are repeated until the owner acknowledges them, and answers are
// cumulative, so a lost packet is repaired by the next. The lower bound is
// asserted only when the load was offered (see withinLimit); the test logs
// what the nodes' views of the key's owner and of the membership were.
func TestOwnerModeUnderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("drives 8 seconds of load per case")
	}
	for _, drop := range []float64{0.1, 0.3} {
		t.Run(fmt.Sprintf("drop=%.0f%%", 100*drop), func(t *testing.T) {
			c := start(t, Options{N: 10, Rules: ownerRules, GossipInterval: 20 * time.Millisecond, GossipMode: "owner",
				Faults: Faults{Drop: drop, Duplicate: 0.1, Reorder: 0.1, Seed: 7}})
			const secs, key = 8, "lossy-key"
			stop := make(chan struct{})
			views := make(chan ownerViews, 1)
			go func() { views <- watchOwnerViews(c, "api", key, stop) }()
			start := time.Now()
			got, offered := driveOffered(c, "api", key, evenLoad(10, 500), secs*time.Second)
			want := 100 + 100*time.Since(start).Seconds()
			close(stop)
			v := <-views
			asked := 500 * secs
			owner, replica := c.Node(0).Daemon().Syncer().OwnerOf("api", key)
			t.Logf("admitted %d, burst + rate × T = %.0f (%.1f%%) with %.0f%% of packets dropped; offered %d of %d asked; owner %s, replica %s; %s",
				got, want, 100*float64(got)/want, 100*drop, offered, asked, owner, replica, v)
			withinShare(t, got, offered, asked, want, 0.05) // the lower bound only when the load was offered
		})
	}
}

// ownerViews is what watchOwnerViews saw of a cluster while it ran.
type ownerViews struct {
	samples    int
	split      int // samples in which the nodes named more than one owner
	fewest     int // the fewest members any node counted alive
	aggregates map[string]int
}

func (v ownerViews) String() string {
	return fmt.Sprintf("%d samples: owner views split in %d, fewest alive %d; nodes that held an aggregate (max held): %v",
		v.samples, v.split, v.fewest, v.aggregates)
}

// watchOwnerViews samples every node's view of (rule, key)'s owner, its
// count of live members and the aggregates it holds, every 50 ms until
// stop is closed (bounded: at most 10 minutes).
func watchOwnerViews(c *Cluster, rule, key string, stop <-chan struct{}) ownerViews {
	v := ownerViews{fewest: len(c.Nodes()), aggregates: map[string]int{}}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range 12000 {
		select {
		case <-stop:
			return v
		case <-tick.C:
		}
		v.samples++
		owners := map[string]bool{}
		for _, nd := range c.Nodes() {
			d := nd.Daemon()
			if d == nil {
				continue
			}
			s := d.Syncer()
			o, _ := s.OwnerOf(rule, key)
			owners[o] = true
			v.fewest = min(v.fewest, s.NumAlive())
			if a := s.OwnerStats().Aggregates; a > v.aggregates[nd.Name] {
				v.aggregates[nd.Name] = a
			}
		}
		if len(owners) > 1 {
			v.split++
		}
	}
	return v
}

// TestOwnerModeProcesses: real sluiced processes started with --gossip-mode
// owner hold a saturated key to burst + rate × T within 5%, and a token
// taken on one shows on another node that holds the key.
func TestOwnerModeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sluiced processes")
	}
	const n = 4
	opts := ProcsOptions{N: n, Rules: ownerRules, GossipInterval: 20 * time.Millisecond, GossipMode: "owner"}
	ownerShareBinaries(t, &opts) // SLUICE_OWNERSHARE_MIXED: node 1 of another build (ownershare_test.go)
	p, err := StartProcs(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	const secs = 6
	var admitted, offered atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / 125) // 500/s over the 4 nodes
			defer tick.Stop()
			for sent := 0; sent < 125*secs && time.Since(start) < secs*time.Second; sent++ {
				<-tick.C
				offered.Add(1)
				if d := p.Allow(i, "api", "proc-key", 1); d.Allowed && !d.FailedOpen {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	want := 100 + 100*time.Since(start).Seconds()
	got := float64(admitted.Load())
	asked := float64(500 * secs)
	t.Logf("%d processes in owner mode admitted %.0f; burst + rate × T = %.0f (%.1f%%); offered %d of %.0f asked",
		n, got, want, 100*got/want, offered.Load(), asked)
	if got > 1.05*want {
		t.Fatalf("admitted %.0f, want at most %.0f + 5%%", got, want)
	}
	// A loaded machine's tickers drop ticks: offered less than 90% of the
	// load asked for (five times the limit), the gaps leave refill unused
	// and the count measures the machine (see withinLimit).
	if got < 0.95*want {
		if float64(offered.Load()) >= 0.9*asked {
			t.Fatalf("admitted %.0f, want at least %.0f - 5%%", got, want)
		}
		t.Logf("the machine offered only %d of %.0f requests: the lower bound is not asserted", offered.Load(), asked)
	}
	// Every node holds "probe-key"; one more token on node 0 shows on node 3.
	for i := range n {
		p.Allow(i, "probe", "probe-key", 1)
	}
	settled := func(node int, atMost float64) bool {
		b, ok := p.Balance(node, "probe", "probe-key")
		return ok && b <= atMost
	}
	wait := func(node int, atMost float64, what string) {
		deadline := time.Now().Add(30 * time.Second)
		poll := time.NewTicker(10 * time.Millisecond)
		defer poll.Stop()
		for !settled(node, atMost) {
			if time.Now().After(deadline) {
				b, _ := p.Balance(node, "probe", "probe-key")
				t.Fatalf("%s: node %d's balance %.1f, want ≤ %.1f", what, node, b, atMost)
			}
			<-poll.C
		}
	}
	wait(3, 1000-n+0.5, "every node's first token")
	p.Allow(0, "probe", "probe-key", 1)
	wait(3, 1000-n-0.5, "node 0's next token")
}
