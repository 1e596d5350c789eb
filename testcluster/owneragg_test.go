package testcluster

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/gossip"
)

// Aggregation before the owner (gossip/owneragg.go) in real in-process
// clusters: a key's owner has its users go through aggregators once it holds
// aggAbove users of it. The clusters are small (the machine's two cores):
// aggregation is turned on far below its default of 64 users.
const aggAbove = 4

// aggSize is the cluster size of the aggregation tests: a ring of at least
// 8 members, 4 aggregators per key.
func aggSize() int {
	if testing.Short() || raceEnabled {
		return 12 // 20 daemons gossiping every 20 ms under the race detector starve two cores
	}
	return 20
}

// aggEngaged waits until key's owner counts at least one aggregator's group
// and most nodes send the key through an aggregator.
func aggEngaged(t *testing.T, c *Cluster, rule, key string, within time.Duration) {
	t.Helper()
	if err := aggEngagedWithin(c, rule, key, within); err != nil {
		t.Fatal(err)
	}
}

// aggEngagedWithin is aggEngaged, for any goroutine.
func aggEngagedWithin(c *Cluster, rule, key string, within time.Duration) error {
	owner, _ := c.Node(0).Daemon().Syncer().OwnerOf(rule, key)
	deadline := time.Now().Add(within)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		routed, entries := 0, 0
		for i, nd := range c.Nodes() {
			d := c.Node(i).Daemon()
			if d == nil {
				continue
			}
			st := d.Syncer().AggStats()
			if st.Routed > 0 {
				routed++
			}
			if nd.Name == owner {
				entries = st.GroupEntries
			}
		}
		if entries > 0 && routed >= c.Size()/2 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("aggregation of %s/%s not engaged within %s: owner %s counts %d groups, %d of %d nodes route through aggregators",
				rule, key, within, owner, entries, routed, c.Size())
		}
		<-poll.C
	}
}

// TestOwnerAggregationHoldsTheLimit: with aggregation, saturating load on
// one key spread evenly over every node is still held to burst + rate × T
// within 5%: without owner mode's shares, and with them (as sluiced runs:
// first-contact hold, fair floor and the owner's view, which reaches the
// users of an aggregated key through their aggregators) in both
// first-contact modes.
//
// The users count the view tells (about n) is asserted only on a run whose
// driver offered at least 90% of the load asked (as withinShare's lower
// bound): the driver and the daemons share the test process, and a run
// that offered less is one whose daemons ran late too. Their counters then
// go unanswered for aggFailover rounds, users fail over to the next slot's
// aggregator and count in both groups for a users window (owneragg.go),
// and the owner may fail over to the replica, which counts the groups
// again: under a CPU burner (6 spinning shells, load 19-25) a run offered
// 727 of 3000 and 646 of 3000 with 11 and 16 users failed over, and told
// 29 and 34 users of 20; every run that offered 2040 or more told 20-24.
// Such a run is logged and run again once, on a new cluster; the users
// count is left unasserted only when the second run was starved as well
// (the limit's upper bound and that the view reached half the nodes are
// asserted on every run).
func TestOwnerAggregationHoldsTheLimit(t *testing.T) {
	n := aggSize()
	for _, tt := range []struct {
		name    string
		shares  bool
		contact bucket.FirstContact
	}{
		{"shares off", false, bucket.FirstContactToken},
		{"shares, first contact token", true, bucket.FirstContactToken},
		{"shares, first contact share", true, bucket.FirstContactShare},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{N: n, Rules: ownerRules, GossipInterval: 20 * time.Millisecond, GossipMode: "owner", AggregateAbove: aggAbove,
				FirstShare: tt.shares, FirstContact: tt.contact}
			// What every run must show, starved or not: the limit's upper
			// bound (and the lower when the load was offered), and that the
			// owner's view reached at least half the nodes through an
			// aggregator.
			always := func(r aggHoldRun) {
				if tt.shares && len(r.told) < n/2 {
					t.Errorf("%d of %d nodes heard the owner's view through an aggregator; want at least half", len(r.told), n)
				}
				withinShare(t, r.got, r.offered, r.asked, r.want, 0.05) // the lower bound only when the load was offered
			}
			r := runAggHold(t, opts)
			if tt.shares && !r.loadOffered() {
				always(r)
				t.Logf("the machine offered only %d of %d requests (%d users failed over, told at most %v): the users count is not measured on this run; running it again once",
					r.offered, r.asked, r.failedOver, r.told)
				r = runAggHold(t, opts)
			}
			if tt.shares {
				// The owner's view reached the users through their
				// aggregators, its users count the cluster's (every node
				// uses the key), not a group's. (The most any node was
				// told: a user that moved between groups counts in both
				// for up to the users window; an aggregator hears its
				// share from its own group, not from another aggregator.)
				if r.loadOffered() {
					for _, tv := range r.told {
						if tv.users < n/2 || tv.users > n+n/4 {
							t.Errorf("node %d was told at most %d users of the key by its aggregator; want about %d", tv.node, tv.users, n)
						}
					}
				} else {
					t.Logf("the machine offered only %d of %d requests again (%d users failed over): the users count told (%v) is not asserted",
						r.offered, r.asked, r.failedOver, r.told)
				}
			}
			always(r)
		})
	}
}

// aggHoldRun is what one run of TestOwnerAggregationHoldsTheLimit measured.
type aggHoldRun struct {
	got, offered, asked int
	want                float64 // burst + rate × T over the run
	told                []toldUsers
	failedOver          int // users past their first slot's aggregator at the end
}

// toldUsers is the most users a node was told by its aggregator.
type toldUsers struct{ node, users int }

func (tu toldUsers) String() string { return fmt.Sprintf("%d:%d", tu.node, tu.users) }

// loadOffered is whether the run's driver offered at least 90% of the
// load asked (see withinShare).
func (r aggHoldRun) loadOffered() bool { return float64(r.offered) >= 0.9*float64(r.asked) }

// runAggHold starts a cluster of opts, drives 6 s of saturating load on one
// key spread evenly over its nodes, waits for the key's aggregation, and
// returns what was admitted and told; the cluster is closed on return.
func runAggHold(t *testing.T, opts Options) aggHoldRun {
	t.Helper()
	c, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		assertNoneClamped(c, t.Errorf)
		c.Close()
	}()
	n := opts.N
	const key = "agg-hot-key"
	engaged := make(chan error, 1)
	go func() { engaged <- aggEngagedWithin(c, "api", key, 5*time.Second) }()
	const secs = 6
	start := time.Now()
	got, offered := driveOffered(c, "api", key, evenLoad(n, 500), secs*time.Second)
	elapsed := time.Since(start).Seconds()
	if err := <-engaged; err != nil {
		t.Fatal(err)
	}
	r := aggHoldRun{got: got, offered: offered, asked: max(1, 500/n) * n * secs, want: 100 + 100*elapsed}
	owner, _ := c.Node(0).Daemon().Syncer().OwnerOf("api", key)
	var ost string
	for i, nd := range c.Nodes() {
		st := c.Node(i).Daemon().Syncer().AggStats()
		if nd.Name == owner {
			ost = fmt.Sprintf("%+v", st)
		}
		r.failedOver += st.FailedOver
		if st.Views > 0 && st.Groups == 0 {
			r.told = append(r.told, toldUsers{i, st.ViewUsers})
		}
	}
	t.Logf("%d nodes: admitted %d over %.2fs; burst + rate × T = %.0f (%.1f%%); offered %d of %d asked; owner %s %s; %d users failed over",
		n, got, elapsed, r.want, 100*float64(got)/r.want, offered, r.asked, owner, ost, r.failedOver)
	if opts.FirstShare {
		t.Logf("%d nodes heard the owner's view through an aggregator; the most users each was told (node:users): %v", len(r.told), r.told)
	}
	return r
}

// TestOwnerAggregationMixedCluster: a rolling upgrade. With one member of
// an earlier version (protocol 2: owner mode; 3: owner mode with shares,
// no aggregation) in the cluster, no node aggregates a key every node
// hammers, and old and new nodes hold the limit together within 5%.
func TestOwnerAggregationMixedCluster(t *testing.T) {
	n := aggSize()
	for _, v := range []uint8{2, 3} {
		t.Run(fmt.Sprintf("one node of protocol %d", v), func(t *testing.T) {
			c := start(t, Options{N: n, Rules: ownerRules, GossipInterval: 20 * time.Millisecond, GossipMode: "owner", AggregateAbove: aggAbove,
				Old: map[int]uint8{n / 2: v}})
			const key = "agg-mixed-key"
			const secs = 6 // as TestOwnerModeHoldsTheLimit: a shorter run weighs one stalled second more
			start := time.Now()
			got, offered := driveOffered(c, "api", key, evenLoad(n, 500), secs*time.Second)
			elapsed := time.Since(start).Seconds()
			want := 100 + 100*elapsed
			asked := max(1, 500/n) * n * secs
			t.Logf("%d nodes, node %d of protocol %d: admitted %d over %.2fs; burst + rate × T = %.0f (%.1f%%); offered %d of %d asked",
				n, n/2, v, got, elapsed, want, 100*float64(got)/want, offered, asked)
			for i := range n {
				if st := c.Node(i).Daemon().Syncer().AggStats(); st != (gossip.AggStats{}) {
					t.Errorf("node %d aggregates beside a node of protocol %d: %+v", i, v, st)
				}
			}
			withinShare(t, got, offered, asked, want, 0.05) // the lower bound only when the load was offered
		})
	}
}

// TestOwnerAggregationConverges: with aggregation, a token taken on any
// node shows on every other node holding the key within a few gossip
// intervals (user → aggregator → owner → aggregators → users). The bound
// asserted is loose (two loaded cores); the figures are logged.
func TestOwnerAggregationConverges(t *testing.T) {
	const iv = 50 * time.Millisecond
	n := aggSize()
	c := start(t, Options{N: n, Rules: ownerRules, GossipInterval: iv, GossipMode: "owner", AggregateAbove: aggAbove})
	const probes = 40
	var lags []float64
	for p := range probes {
		key := "agg-conv-" + strconv.Itoa(p/10) // a key per ten probes
		if p%10 == 0 {
			for i := range n { // every node holds the key
				c.Allow(i, "probe", key, 1)
			}
			aggEngaged(t, c, "probe", key, 10*time.Second)
		}
		lag, ok := ownerProbe(c, p%n, "probe", key, 10*time.Second)
		if !ok {
			t.Fatalf("probe %d from node %d never showed everywhere: %v", p, p%n, c.Balances("probe", key))
		}
		lags = append(lags, float64(lag)/float64(iv))
	}
	slices.Sort(lags)
	p50, p90, p99 := lags[len(lags)/2], lags[len(lags)*9/10], lags[len(lags)*99/100]
	t.Logf("%d nodes, aggregated: convergence in gossip intervals of %s over %d probes: p50 %.2f, p90 %.2f, p99 %.2f, max %.2f", n, iv, probes, p50, p90, p99, lags[len(lags)-1])
	// The p99 of 40 probes is their slowest: on a loaded machine, a
	// scheduler's stall (12.4 intervals once at a load average of 17). As
	// TestOwnerModeConverges, the assertion takes the p50 and p90.
	if p50 > 3 || p90 > 6 {
		t.Fatalf("convergence p50 %.2f, p90 %.2f intervals; want about 2 (asserted p50 ≤ 3, p90 ≤ 6)", p50, p90)
	}
}

// TestOwnerAggregatorKilledMidRun: an aggregator of a hot key is killed (no
// leave) while every node saturates the key. Its users' counters go
// unanswered; after aggFailover rounds they move to the next slot's
// aggregator and resend what was not acknowledged: the cluster's total
// stays within 5% of burst + rate × T, and the second after the kill is
// repaid the next.
func TestOwnerAggregatorKilledMidRun(t *testing.T) {
	n := aggSize()
	c := start(t, Options{N: n, Rules: ownerRules, GossipInterval: 20 * time.Millisecond, GossipMode: "owner", AggregateAbove: aggAbove})
	const key = "agg-killed-key"
	owner, replica := c.Node(0).Daemon().Syncer().OwnerOf("api", key)
	const secs = 12
	killAt := 3 * time.Second
	start := time.Now()
	type kill struct {
		victim int
		name   string
		users  int
		err    error
	}
	killed := make(chan kill, 1)
	go func() {
		k := kill{victim: -1}
		if k.err = aggEngagedWithin(c, "api", key, killAt); k.err != nil {
			killed <- k
			return
		}
		for i, nd := range c.Nodes() { // the aggregator with the most users
			if st := c.Node(i).Daemon().Syncer().AggStats(); nd.Name != owner && nd.Name != replica && st.GroupUsers > k.users {
				k.victim, k.name, k.users = i, nd.Name, st.GroupUsers
			}
		}
		if k.victim < 0 {
			k.err = fmt.Errorf("no aggregator of %s", key)
			killed <- k
			return
		}
		timer := time.NewTimer(killAt - time.Since(start))
		defer timer.Stop()
		<-timer.C
		k.err = c.Crash(k.victim)
		killed <- k
	}()
	perSec, offered := driveSeconds(c, "api", key, evenLoad(n, 500), secs*time.Second)
	elapsed := time.Since(start).Seconds()
	k := <-killed
	if k.err != nil {
		t.Fatal(k.err)
	}
	got := 0
	for _, v := range perSec {
		got += v
	}
	failedOver := 0
	for i := range c.Nodes() {
		if d := c.Node(i).Daemon(); d != nil && i != k.victim {
			failedOver += d.Syncer().AggStats().FailedOver
		}
	}
	want := 100 + 100*elapsed
	asked := max(1, 500/n) * n * secs
	t.Logf("aggregator %s (node %d, %d users) killed at %s: admitted %d over %.2fs; burst + rate × T = %.0f (%.1f%%); per second %v; %d users failed over; offered %d of %d asked",
		k.name, k.victim, k.users, killAt, got, elapsed, want, 100*float64(got)/want, perSec, failedOver, offered, asked)
	withinShare(t, got, offered, asked, want, 0.05) // the lower bound only when the load was offered
	// No consumption lost for longer than a repair round: by the end of the
	// second after the kill's, the cluster has admitted no more than the
	// limit allows by then (5% and one burst of slack).
	upTo, by := 0, int(killAt/time.Second)+2
	for _, v := range perSec[:by] {
		upTo += v
	}
	if limit := (100 + 100*float64(by)) * 1.05; float64(upTo) > limit+100 {
		t.Fatalf("admitted %d in the first %d s (the kill's and the next); the limit allows %.0f", upTo, by, limit)
	}
}

// TestOwnerAggregationSwitchIsExact: after the switch to aggregators, no
// node's view of a key every node used once misses any of the others'
// tokens (a node charged less would admit more). An aggregator that made
// its group after it had heard the key through another aggregator is
// charged what it heard there twice (a known defect: it admits less, by at
// most that, once), as may be a user that failed over to another
// aggregator; such nodes are logged, not failed. Any other node charged
// more than the others consumed fails the test.
func TestOwnerAggregationSwitchIsExact(t *testing.T) {
	n := aggSize()
	c := start(t, Options{N: n, Rules: ownerRules, GossipInterval: 50 * time.Millisecond, GossipMode: "owner", AggregateAbove: aggAbove})
	const key = "agg-switch-key"
	for i := range n {
		c.Allow(i, "probe", key, 1)
	}
	aggEngaged(t, c, "probe", key, 10*time.Second)
	want := 1000 - float64(n) + 0.5
	if err := c.WaitBalances("probe", key, 15*time.Second, func(_ int, b float64) bool { return b <= want }); err != nil {
		t.Fatal(err)
	}
	for i, b := range c.Balances("probe", key) {
		if b >= want-1.5 {
			continue
		}
		st := c.Node(i).Daemon().Syncer().AggStats()
		if st.Groups == 0 && st.FailedOver == 0 {
			// A user that stayed with its first aggregator: its subscription
			// there started from the owner's notice; the aggregator's
			// repeats of its own first prev charge nothing (they charged
			// the whole total again before TestAdjustedStartIsNotRepairedTwice's fix).
			t.Errorf("node %d, a user of its first aggregator, charged %.0f tokens more than the others consumed (%+v)", i, want-0.5-b, st)
			continue
		}
		t.Logf("node %d charged %.0f tokens more than the others consumed (%+v)", i, want-0.5-b, st)
	}
}
