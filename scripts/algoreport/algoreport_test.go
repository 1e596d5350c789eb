package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/bucket"
)

const ms = time.Millisecond

func TestRollingOnAHandMadeSeries(t *testing.T) {
	ts := []time.Duration{0, 500 * ms, 999 * ms, 1000 * ms, 1500 * ms}
	want := []step{
		{0, 1}, // 0 enters
		{500 * ms, 2},
		{999 * ms, 3},
		{1000 * ms, 3}, // 1000 enters as 0 leaves: (0, 1000] holds 500, 999, 1000
		{1500 * ms, 3}, // 1500 enters, 500 leaves
		{1999 * ms, 2},
		{2000 * ms, 1},
		{2500 * ms, 0},
	}
	if got := rolling(ts, time.Second); !slices.Equal(got, want) {
		t.Fatalf("rolling = %v\nwant      %v", got, want)
	}
	if got := maxIn(ts, time.Second); got != 3 {
		t.Fatalf("maxIn = %d, want 3", got)
	}
	if got := maxIn(ts, 2*time.Second); got != 5 {
		t.Fatalf("maxIn over 2 s = %d, want 5", got)
	}
	if got := longestGap(ts); got != 500*ms {
		t.Fatalf("longestGap = %v, want 500ms", got)
	}
	if got := perBin(ts, 500*ms, 2*time.Second); !slices.Equal(got, []int{1, 2, 1, 1}) {
		t.Fatalf("perBin = %v", got)
	}
}

// maxIn agrees with counting every window that starts at a time, by brute force.
func TestMaxInAgreesWithBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		ts := make([]time.Duration, rng.IntN(40))
		for i := range ts {
			ts[i] = time.Duration(rng.IntN(30)) * 100 * ms // ties and exact one-second spacings
		}
		slices.Sort(ts)
		want := 0
		for _, from := range ts {
			n := 0
			for _, u := range ts {
				if u >= from && u < from+time.Second {
					n++
				}
			}
			want = max(want, n)
		}
		if got := maxIn(ts, time.Second); got != want {
			t.Fatalf("maxIn(%v) = %d, brute force %d", ts, got, want)
		}
	}
}

func scenarioNamed(t *testing.T, name string) scenario {
	for _, sc := range scenarios() {
		if sc.name == name {
			return sc
		}
	}
	t.Fatalf("no scenario %q", name)
	return scenario{}
}

func outcomes(t *testing.T, a bucket.Algorithm, arrivals []time.Duration) []outcome {
	outs, err := simulate(a, arrivals, 0)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

// The edge scenario is what the charts are for: a fixed window lets 20
// through across its boundary; the exact rolling window lets 10.
func TestEdgeScenario(t *testing.T) {
	edge := scenarioNamed(t, "edge")
	fixed := admittedAt(outcomes(t, bucket.AlgoFixedWindow, edge.arrivals))
	if got := maxIn(fixed, 100*ms); got != 20 {
		t.Errorf("fixed_window admitted at most %d within 100 ms, want 20", got)
	}
	for _, a := range bucket.Algorithms() {
		if a == bucket.AlgoFixedWindow {
			continue
		}
		s := summarise(a, outcomes(t, a, edge.arrivals))
		if s.maxPerPeriod > limitCount || s.admitted != 20 {
			t.Errorf("%s: %d admitted, at most %d in a rolling second; want 20, at most %d", a, s.admitted, s.maxPerPeriod, limitCount)
		}
	}
}

// What docs/ALGORITHMS.md says of each algorithm holds in every scenario.
func TestScenariosKeepTheirPromises(t *testing.T) {
	for _, sc := range scenarios() {
		if !slices.IsSorted(sc.arrivals) || len(sc.arrivals) == 0 {
			t.Fatalf("%s: arrivals empty or out of order", sc.name)
		}
		sums := map[bucket.Algorithm]summary{}
		for _, a := range bucket.Algorithms() {
			sums[a] = summarise(a, outcomes(t, a, sc.arrivals))
		}
		tb := sums[bucket.AlgoTokenBucket]
		for _, a := range []bucket.Algorithm{bucket.AlgoLeakyBucket, bucket.AlgoGCRA} {
			if s := sums[a]; s.admitted != tb.admitted || s.maxPerPeriod != tb.maxPerPeriod {
				t.Errorf("%s: %s decided unlike the token bucket: %+v vs %+v", sc.name, a, s, tb)
			}
		}
		if tb.maxPerPeriod > 2*limitCount { // burst + one period's refill
			t.Errorf("%s: token bucket let %d through in a second", sc.name, tb.maxPerPeriod)
		}
		if s := sums[bucket.AlgoSlidingLog]; s.maxPerPeriod > limitCount {
			t.Errorf("%s: sliding log let %d through in a rolling second", sc.name, s.maxPerPeriod)
		}
		if s := sums[bucket.AlgoFixedWindow]; s.maxPerPeriod > 2*limitCount {
			t.Errorf("%s: fixed window let %d through in a rolling second", sc.name, s.maxPerPeriod)
		}
	}
}

func TestShapingSpacesTheLeakyBucket(t *testing.T) {
	burst := make([]time.Duration, shapingRequests)
	leaky, err := simulate(bucket.AlgoLeakyBucket, burst, shapingMaxWait)
	if err != nil {
		t.Fatal(err)
	}
	gone := 0
	for i, o := range leaky {
		if !o.allowed {
			continue
		}
		if want := time.Duration(i) * 100 * ms; o.wait != want {
			t.Errorf("leaky bucket: request %d goes after %v, want %v", i, o.wait, want)
		}
		gone++
	}
	if gone != limitCount {
		t.Errorf("leaky bucket let %d go ahead, want its capacity, %d", gone, limitCount)
	}
}

// A run writes every file and the same bytes twice: the docs regenerate
// without spurious diffs.
func TestRunIsDeterministic(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir()}
	var tables [2]bytes.Buffer
	for i, d := range dirs {
		if err := run(d, &tables[i]); err != nil {
			t.Fatal(err)
		}
	}
	if tables[0].String() != tables[1].String() {
		t.Fatal("tables differ between runs")
	}
	if !strings.Contains(tables[0].String(), "| fixed_window | 40 | 0 | 20 |") {
		t.Errorf("edge table lacks the fixed window's 20 in a second:\n%s", tables[0].String())
	}
	for _, name := range []string{"edge", "overload", "burst-then-steady", "shaping"} {
		for _, ext := range []string{".svg", ".csv"} {
			a, err := os.ReadFile(filepath.Join(dirs[0], name+ext))
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dirs[1], name+ext))
			if err != nil {
				t.Fatal(err)
			}
			if len(a) == 0 || !bytes.Equal(a, b) {
				t.Errorf("%s%s: empty or different between runs", name, ext)
			}
		}
	}
}
