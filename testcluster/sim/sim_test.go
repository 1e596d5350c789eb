package sim

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/bucket"
)

// The same seed repeats a run exactly, through loss, relaying and churn;
// another seed does not.
func TestSameSeedSameReport(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		heavy bool // skipped under -race (skipHeavyUnderRace)
	}{
		{"direct, hot, loss, forming", Config{Nodes: 5, Duration: 3 * time.Second, Loss: 0.1, Rate: 50, JoinSpread: 300 * time.Millisecond}, false},
		{"relayed, spread, churn", Config{Nodes: 24, FanoutLimit: 8, GossipMode: "relay", Duration: 3 * time.Second, Scenario: Spread, ChurnPerMinute: 2}, true},
		{"owner, hot, loss, churn", Config{Nodes: 120, GossipMode: "owner", Duration: 3 * time.Second, MinPerNode: 5, Loss: 0.05, ChurnPerMinute: 2}, false},
		{"owner, hot, shares, loss, churn", Config{Nodes: 120, GossipMode: "owner", Duration: 3 * time.Second, MinPerNode: 5, Loss: 0.05, ChurnPerMinute: 2, FirstShare: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.heavy {
				skipHeavyUnderRace(t)
			}
			run := func(seed uint64) Report {
				cfg := tc.cfg
				cfg.Seed = seed
				s, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return s.Run().Repeatable()
			}
			a, b := run(7), run(7)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("seed 7 twice:\n%+v\n%+v", a, b)
			}
			if c := run(8); reflect.DeepEqual(a, c) {
				t.Fatalf("seeds 7 and 8 gave the same report: %+v", a)
			}
		})
	}
}

// The simulator runs the real syncer: with no loss and direct fan-out, a
// small cluster holds the limit and every probe converges within one
// gossip interval and a flight; with relaying, within a few rounds.
func TestSmallClusterHoldsTheLimit(t *testing.T) {
	for _, tc := range []struct {
		nodes, fanout int
		maxLagMs      float64
	}{
		{3, 64, 25},
		{10, 64, 25},
		{40, 16, 200},
	} {
		t.Run(strconv.Itoa(tc.nodes), func(t *testing.T) {
			if tc.fanout < tc.nodes {
				skipHeavyUnderRace(t) // relaying over 40 nodes
			}
			cfg := Config{Nodes: tc.nodes, FanoutLimit: tc.fanout, Duration: 10 * time.Second, Seed: 1}
			if tc.fanout < tc.nodes {
				cfg.GossipMode = "relay" // auto would choose owner mode
			}
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := s.Run()
			if r.Accuracy < 0.95 || r.Accuracy > 1.10 {
				t.Errorf("admitted %d of %.0f allowed (%.1f%%)", r.Admitted, r.Allowed, 100*r.Accuracy)
			}
			if r.Convergence.Converged != r.Convergence.Probes || r.Convergence.Probes < 10 {
				t.Errorf("%d of %d probes converged", r.Convergence.Converged, r.Convergence.Probes)
			}
			if r.Convergence.Max > tc.maxLagMs {
				t.Errorf("slowest probe %.1f ms, want at most %.0f", r.Convergence.Max, tc.maxLagMs)
			}
		})
	}
}

// A run of hundreds of nodes finishes in bounded time: its CPU time, which
// other programs on a shared machine do not inflate (generous: -race runs
// it several times slower).
func TestBoundedRunTime(t *testing.T) {
	skipHeavyUnderRace(t)
	s, err := New(Config{Nodes: 200, Duration: 2 * time.Second, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Run()
	if r.CPU > 2*time.Minute {
		t.Fatalf("200 nodes for 2 simulated seconds took %s of CPU", r.CPU)
	}
	if r.Convergence.Probes == 0 || r.Admitted == 0 {
		t.Fatalf("nothing measured: %+v", r)
	}
	if os.Getenv("SIM_VERBOSE") != "" {
		r.Write(os.Stdout)
	}
}

// The real syncers never count a consumption twice: once the load stops
// and gossip settles, no node's balance of the key is below what the limit
// leaves after the cluster's total. With direct fan-out and no loss, every
// node is at exactly that. (With relaying or loss some nodes stay above it:
// a node that first hears an origin's counter midway charges only the
// increment, and push-pull does not repair it; see docs/SCALING.md.)
func TestBalancesSettleToTheLimitsArithmetic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		exact bool
	}{
		{"direct", Config{Nodes: 6}, true},
		{"relayed", Config{Nodes: 30, FanoutLimit: 8, GossipMode: "relay"}, false},
		{"direct, 20% loss, push-pull", Config{Nodes: 6, Loss: 0.2, PushPullInterval: time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Duration, cfg.Quiet, cfg.Seed = 6*time.Second, 3*time.Second, 5
			cfg.Rate, cfg.Burst, cfg.Offered = 5, 100, 300
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := s.Run()
			if r.BalanceLow < r.BalanceIdeal-1 {
				t.Fatalf("a balance of %.2f: below the %.2f the limit leaves after %d admitted (counted twice)",
					r.BalanceLow, r.BalanceIdeal, r.Admitted)
			}
			if tc.exact && r.BalanceHigh > r.BalanceIdeal+1 {
				t.Fatalf("balances from %.2f to %.2f; the limit leaves %.2f after %d admitted",
					r.BalanceLow, r.BalanceHigh, r.BalanceIdeal, r.Admitted)
			}
		})
	}
}

// With sluiced's first-contact hold and fair floor (FirstShare), the
// simulated cluster still holds the limit and shares it evenly under even
// demand; without them (a seed that shows it) one node takes most windows.
func TestFirstShareKeepsSharesEven(t *testing.T) {
	run := func(firstShare bool) *Report {
		s, err := New(Config{Nodes: 10, Duration: 5 * time.Second, Seed: 1, FirstShare: firstShare})
		if err != nil {
			t.Fatal(err)
		}
		return s.Run()
	}
	with, without := run(true), run(false)
	if with.Accuracy < 0.95 || with.Accuracy > 1.10 {
		t.Errorf("with the first share: admitted %d of %.0f allowed (%.1f%%)", with.Admitted, with.Allowed, 100*with.Accuracy)
	}
	if with.Fairness.Within25 < 0.9 {
		t.Errorf("with the first share: %.0f%% of 2 s shares within ±25%% of 1/N, want at least 90%%", 100*with.Fairness.Within25)
	}
	if without.Fairness.Within25 >= with.Fairness.Within25 {
		t.Errorf("the floor made no difference: %.0f%% without, %.0f%% with", 100*without.Fairness.Within25, 100*with.Fairness.Within25)
	}
}

// In owner mode with sluiced's shares (FirstShare: the first-contact hold,
// the owner's views and each node's share of them), the cluster holds the
// limit whatever its size, where each node alone would admit a token of
// its own (without the shares 300 nodes at 20 req/s admit 153% of the
// limit over 3 s), and shares it evenly under even demand at a few tokens
// per node per window (the floor, beside the shares, while the burst holds
// a token per user).
func TestOwnerSharesHoldTheLimitAndShareIt(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         Config
		low, high   float64 // accuracy
		firstSecond uint64  // at most
		fairAtLeast float64 // 2 s shares within ±25%, if not 0
	}{
		{"300 nodes, 20 req/s each, strict first contact", Config{Nodes: 300, Duration: 3 * time.Second, MinPerNode: 20, FirstContact: bucket.FirstContactShare}, 0.95, 1.03, 210, 0},
		{"300 nodes, 20 req/s each, default first contact (auto)", Config{Nodes: 300, Duration: 3 * time.Second, MinPerNode: 20}, 0.95, 1.03, 210, 0},
		{"10 nodes, even demand", Config{Nodes: 10, Duration: 10 * time.Second}, 0.97, 1.03, 210, 0.9},
		{"50 nodes, even demand (2 tokens/s each)", Config{Nodes: 50, Duration: 10 * time.Second}, 0.97, 1.03, 210, 0.85},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Seed, cfg.GossipMode, cfg.FirstShare = 1, "owner", true
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := s.Run()
			t.Logf("admitted %d of %.0f allowed (%.1f%%), first second %d, fair shares %.0f%%", r.Admitted, r.Allowed, 100*r.Accuracy, r.FirstSecond, 100*r.Fairness.Within25)
			if r.Accuracy < tc.low || r.Accuracy > tc.high {
				t.Errorf("admitted %.1f%% of the limit, want %.0f-%.0f%%", 100*r.Accuracy, 100*tc.low, 100*tc.high)
			}
			if r.FirstSecond > tc.firstSecond {
				t.Errorf("first second %d, want at most %d", r.FirstSecond, tc.firstSecond)
			}
			if r.Fairness.Within25 < tc.fairAtLeast {
				t.Errorf("%.0f%% of 2 s shares within ±25%%, want at least %.0f%%", 100*r.Fairness.Within25, 100*tc.fairAtLeast)
			}
		})
	}
}

// Goal 1 of issue 20 with sluiced's default first contact (auto): every
// node meets a new key at once, at 20 req/s each, and the cluster admits
// about one burst + the rate in the first second and the limit over 5 s,
// whatever its size (--first-contact token: 999 and 2,999 in the first
// second at 1,000 and 3,000 nodes, 166.5% and 499.8% over 5 s). The
// first-second bound is one burst + the rate + half a burst: goal 1 allows
// about a burst of overshoot, and above 64 users the key goes through
// aggregators, whose balance lags the owner's by one more hop while the
// users switch (234 at 1,000 nodes with aggregation, 193 without; repaid
// in the next second, which the 5 s accuracy checks).
func TestDefaultFirstContactHoldsAHerd(t *testing.T) {
	skipHeavyUnderRace(t)
	for _, nodes := range []int{1000, 3000} {
		t.Run(fmt.Sprint(nodes), func(t *testing.T) {
			s, err := New(Config{Nodes: nodes, Duration: 5 * time.Second, Seed: 1, MinPerNode: 20, GossipMode: "owner", FirstShare: true})
			if err != nil {
				t.Fatal(err)
			}
			r := s.Run()
			t.Logf("admitted %d of %.0f allowed (%.1f%%), first second %d", r.Admitted, r.Allowed, 100*r.Accuracy, r.FirstSecond)
			if r.Accuracy < 0.95 || r.Accuracy > 1.05 {
				t.Errorf("admitted %.1f%% of the limit over 5 s, want 95-105%%", 100*r.Accuracy)
			}
			if r.FirstSecond > 250 {
				t.Errorf("first second %d, want about one burst + the rate (200), at most 250", r.FirstSecond)
			}
		})
	}
}

// Light users, the per-user-limit workload: every node's requests are
// spread over as many keys as nodes, each key offered half its limit, so
// every request should pass; a node calls each key a few times a second
// and forgets it between calls (a bucket refused nothing refills and is
// swept), so it meets the key "for the first time" again and again. With
// --first-contact token (a token at least) they are served; with the
// strict share (burst / members rounded at random, 20 / 100 here) a fifth
// of a node's first calls pass and the users are refused far below their
// limit: that is what --first-contact share costs. sluiced's default, auto,
// serves them once a node has heard, at a first contact of one of the
// rule's keys, that few nodes use it (burst / that crowd is a token or
// more); its first calls, before any answer, are held as share's.
func TestFirstContactServesLightUsers(t *testing.T) {
	for _, tc := range []struct {
		contact   bucket.FirstContact
		low, high float64 // admitted / offered
	}{
		{bucket.FirstContactToken, 0.99, 1},
		{bucket.FirstContactShare, 0, 0.9},
		{bucket.FirstContactAuto, 0.97, 1},
	} {
		t.Run(tc.contact.String(), func(t *testing.T) {
			s, err := New(Config{Nodes: 100, Duration: 3 * time.Second, Seed: 1, GossipMode: "owner", FirstShare: true,
				FirstContact: tc.contact, Scenario: Spread, Burst: 20})
			if err != nil {
				t.Fatal(err)
			}
			r := s.Run()
			got := float64(r.Admitted) / float64(r.Requests)
			t.Logf("admitted %d of %d offered (%.1f%%), %.1f%% of the limits", r.Admitted, r.Requests, 100*got, 100*r.Accuracy)
			if got < tc.low || got > tc.high {
				t.Errorf("admitted %.1f%% of the requests, want %.0f-%.0f%%", 100*got, 100*tc.low, 100*tc.high)
			}
		})
	}
}

// The nodes sharing one member table (gossip.SharedMembers, the default
// when the membership is formed before the load) run exactly as when each
// keeps its own copy, as in production: the same seed gives the same
// report, in each gossip mode.
func TestSharedMembersSameReport(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		heavy bool // skipped under -race (skipHeavyUnderRace)
	}{
		{"direct", Config{Nodes: 10, Duration: 2 * time.Second, Loss: 0.05}, false},
		{"relay", Config{Nodes: 40, FanoutLimit: 16, GossipMode: "relay", Duration: 2 * time.Second, Scenario: Spread, Loss: 0.05}, true},
		{"owner", Config{Nodes: 100, GossipMode: "owner", Duration: 2 * time.Second, MinPerNode: 5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.heavy {
				skipHeavyUnderRace(t)
			}
			run := func(copyMembers bool) Report {
				cfg := tc.cfg
				cfg.Seed, cfg.copyMembers = 5, copyMembers
				s, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if (s.table == nil) != copyMembers {
					t.Fatalf("copyMembers %v: shared table %v", copyMembers, s.table != nil)
				}
				return s.Run().Repeatable()
			}
			shared, copied := run(false), run(true)
			if !reflect.DeepEqual(shared, copied) {
				t.Fatalf("shared table:\n%+v\nown copies:\n%+v", shared, copied)
			}
			if shared.Admitted == 0 || shared.PerNode.PacketsSent == 0 {
				t.Fatalf("nothing happened: %+v", shared)
			}
		})
	}
}

// In owner mode a node hears of a key only while it holds it: the probes
// are keys several nodes hold, and every other holder reflects a
// consumption within two gossip intervals and a round trip at p99 (no
// loss).
// Auto mode above the fan-out limit is owner mode, and says so.
func TestOwnerProbesReachHolders(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		mode     string
		holders  int
		inBound  bool
		minProbe int
		heavy    bool // skipped under -race (skipHeavyUnderRace)
	}{
		{"owner", Config{Nodes: 100, GossipMode: "owner"}, "owner", 5, true, 10, false},
		{"auto above the fan-out limit", Config{Nodes: 80, FanoutLimit: 16, ProbeHolders: 3}, "owner", 3, true, 10, false},
		{"direct", Config{Nodes: 10}, "direct", 0, true, 10, false},
		{"relay", Config{Nodes: 40, FanoutLimit: 16, GossipMode: "relay"}, "relayed", 0, false, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.heavy {
				skipHeavyUnderRace(t)
			}
			cfg := tc.cfg
			cfg.Duration, cfg.Seed = 5*time.Second, 2
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := s.Run()
			cv := r.Convergence
			if r.Mode != tc.mode || cv.Holders != tc.holders {
				t.Fatalf("mode %q with %d holders per probe, want %q and %d", r.Mode, cv.Holders, tc.mode, tc.holders)
			}
			if tc.mode == "owner" {
				// The syncers' own choice, not only the report's: owners
				// answered, and no push-pull state was merged (owner mode
				// repairs by its own counters; auto relayed here while the
				// simulated nodes advertised an older protocol).
				var answers, states uint64
				for _, n := range s.nodes {
					answers += n.syncer.OwnerStats().AnswersSent
					states += n.syncer.Stats().StatesMerged.Load()
				}
				if answers == 0 || states != 0 {
					t.Fatalf("not in owner mode: %d owner answers sent, %d push-pull states merged", answers, states)
				}
			}
			if cv.Probes < tc.minProbe || cv.Converged != cv.Probes {
				t.Fatalf("%d of %d probes converged", cv.Converged, cv.Probes)
			}
			if tc.inBound && cv.P99 > cv.Bound {
				t.Fatalf("p99 %.1f ms (max %.1f), want within %.1f ms; %d of %d probes within", cv.P99, cv.Max, cv.Bound, cv.WithinBound, cv.Probes)
			}
		})
	}
}
