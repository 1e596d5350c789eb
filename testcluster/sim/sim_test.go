package sim

import (
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// The same seed repeats a run exactly, through loss, relaying and churn;
// another seed does not.
func TestSameSeedSameReport(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"direct, hot, loss", Config{Nodes: 5, Duration: 3 * time.Second, Loss: 0.1, Rate: 50}},
		{"relayed, spread, churn", Config{Nodes: 24, FanoutLimit: 8, Duration: 3 * time.Second, Scenario: Spread, ChurnPerMinute: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
			s, err := New(Config{Nodes: tc.nodes, FanoutLimit: tc.fanout, Duration: 10 * time.Second, Seed: 1})
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

// A run of hundreds of nodes finishes in bounded time (generous: the
// machine is shared).
func TestBoundedRunTime(t *testing.T) {
	start := time.Now()
	s, err := New(Config{Nodes: 200, Duration: 2 * time.Second, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Run()
	if el := time.Since(start); el > 2*time.Minute {
		t.Fatalf("200 nodes for 2 simulated seconds took %s", el)
	}
	if r.Convergence.Probes == 0 || r.Admitted == 0 {
		t.Fatalf("nothing measured: %+v", r)
	}
	if os.Getenv("SIM_VERBOSE") != "" {
		r.Write(os.Stdout)
	}
}
