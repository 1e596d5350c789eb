package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/testcluster"
	"github.com/sluicelabs/sluice/testcluster/sim"
)

// The simulator against real processes: the same scenario (the limit
// 100/s burst 100, 500 requests/s offered evenly, gossip 20 ms, probes
// every 0-500 ms, 10 s) on N sluiced processes and in the simulator.

// validateSizes are the cluster sizes compared.
var validateSizes = []int{3, 10, 50}

// validationRow is one run's figures, real or simulated.
type validationRow struct {
	n                   int
	run                 string
	admitted            int
	allowed             float64
	firstSecond         int
	p50, p99            float64
	probes, converged   int
	within25            float64
	fairWindows         int
	shareLow, shareHigh float64
}

// simValidate runs both and rewrites the validation table.
func simValidate(c *cli.Context) error {
	if c.Bool("traffic-only") {
		traffic, err := trafficTable(c.String("recorded"))
		if err != nil {
			return err
		}
		return rewriteBetweenMarkers(c.String("doc"), map[string]string{"validation-traffic": traffic})
	}
	dir, err := os.MkdirTemp("", "tcvalidate")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := c.String("sluiced")
	if bin == "" {
		if bin, err = buildSluiced(dir); err != nil {
			return err
		}
	}
	var b strings.Builder
	b.WriteString("| N | run | admitted / allowed | first second | convergence p50 / p99 | fair 2 s shares (±25%) | share × N, lowest-highest |\n")
	b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range validateSizes {
		real, err := realRun(c.Context, bin, n)
		if err != nil {
			return err
		}
		writeValidation(&b, real)
		for _, spread := range []time.Duration{0, 200 * time.Millisecond} {
			s, err := sim.New(sim.Config{Nodes: n, Duration: 10 * time.Second, Seed: 1, Offered: 500, JoinSpread: spread})
			if err != nil {
				return err
			}
			r := s.Run()
			row := validationRow{n: n, run: "simulated", admitted: int(r.Admitted), allowed: r.Allowed, firstSecond: int(r.FirstSecond),
				p50: r.Convergence.P50, p99: r.Convergence.P99, probes: r.Convergence.Probes, converged: r.Convergence.Converged,
				within25: r.Fairness.Within25, fairWindows: r.Fairness.Windows, shareLow: r.Fairness.WorstLow, shareHigh: r.Fairness.WorstHigh}
			if spread > 0 {
				row.run = fmt.Sprintf("simulated, membership forming over %s", spread)
			}
			writeValidation(&b, row)
		}
	}
	traffic, err := trafficTable(c.String("recorded"))
	if err != nil {
		return err
	}
	return rewriteBetweenMarkers(c.String("doc"), map[string]string{"validation": b.String(), "validation-traffic": traffic})
}

// realRun drives n sluiced processes as testcluster's default run does.
func realRun(ctx context.Context, bin string, n int) (validationRow, error) {
	rules := "rules:\n  hot:\n    rate: 100/1s\n    burst: 100\n  probe:\n    rate: 1000/1h\n"
	p, err := testcluster.StartProcs(testcluster.ProcsOptions{N: n, Sluiced: bin, Rules: rules, GossipInterval: 20 * time.Millisecond})
	if err != nil {
		return validationRow{}, err
	}
	defer p.Close()
	spec := testcluster.WatchSpec{Rule: "hot", Key: "hot-key", Rate: 100, Burst: 100, Offered: 500, Duration: 10 * time.Second, ProbeRule: "probe"}
	seconds, err := testcluster.Watch(ctx, p, spec, nil)
	if err != nil {
		return validationRow{}, err
	}
	last := seconds[len(seconds)-1]
	row := validationRow{n: n, run: "real processes", admitted: last.Cumulative, allowed: last.Allowed, firstSecond: seconds[0].Cluster,
		shareLow: math.Inf(1), shareHigh: math.Inf(-1)}
	var lags []float64
	for _, s := range seconds {
		lags = append(lags, s.LagMs...)
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		row.p50, row.p99 = quantile(lags, 0.5), quantile(lags, 0.99)
	}
	row.probes, row.converged = len(lags), len(lags)
	// 2 s windows: seconds 1-2, 3-4, ...
	for w := 0; w+1 < len(seconds); w += 2 {
		total := 0
		for i := range n {
			total += seconds[w].Admitted[i] + seconds[w+1].Admitted[i]
		}
		if total == 0 {
			continue
		}
		within := 0
		for i := range n {
			share := float64(seconds[w].Admitted[i]+seconds[w+1].Admitted[i]) / float64(total) * float64(n)
			if share >= 0.75 && share <= 1.25 {
				within++
			}
			row.shareLow, row.shareHigh = min(row.shareLow, share), max(row.shareHigh, share)
		}
		row.within25 += float64(within) / float64(n)
		row.fairWindows++
	}
	if row.fairWindows > 0 {
		row.within25 /= float64(row.fairWindows)
	}
	return row, nil
}

func writeValidation(b *strings.Builder, r validationRow) {
	conv := fmt.Sprintf("%.1f / %.1f ms", r.p50, r.p99)
	if r.converged < r.probes {
		conv += fmt.Sprintf(" (%d of %d)", r.converged, r.probes)
	}
	fmt.Fprintf(b, "| %d | %s | %d / %.0f (%.1f%%) | %d | %s | %.0f%% | %.2f-%.2f |\n", r.n, r.run, r.admitted, r.allowed,
		100*float64(r.admitted)/r.allowed, r.firstSecond, conv, 100*r.within25, r.shareLow, r.shareHigh)
}
