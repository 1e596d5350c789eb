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
// every 0-500 ms, 10 s) on N sluiced processes and in the simulator, with
// sluiced's settings on both sides: its default gossip mode (auto: direct
// fan-out at these sizes) and owner mode, the first-contact hold, fair
// floor and owner's shares (every sluiced; the simulator's FirstShare) and
// the default first contact (token).

// validateSizes are the cluster sizes compared.
var validateSizes = []int{3, 10, 50}

// validateModes are the gossip modes compared: sluiced's default and owner
// mode (issue 20's design, which auto chooses only above 64 members).
var validateModes = []string{"", "owner"}

// validationRow is one run's figures, real or simulated.
type validationRow struct {
	n                   int
	mode                string // as configured: "" is auto
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
	b.WriteString("| N | gossip mode | run | admitted / allowed | first second | convergence p50 / p99 | fair 2 s shares (±25%) | share × N, lowest-highest |\n")
	b.WriteString("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	start := time.Now()
	sizes := validateSizes
	if c.IsSet("validate-nodes") {
		sizes = c.IntSlice("validate-nodes")
	}
	for _, n := range sizes {
		for _, mode := range validateModes {
			real, err := realRun(c.Context, bin, n, mode)
			if err != nil {
				return err
			}
			writeValidation(&b, real)
			for _, spread := range []time.Duration{0, 200 * time.Millisecond} {
				s, err := sim.New(validationConfig(n, mode, spread))
				if err != nil {
					return err
				}
				r := s.Run()
				row := validationRow{n: n, mode: mode, run: "simulated", admitted: int(r.Admitted), allowed: r.Allowed, firstSecond: int(r.FirstSecond),
					p50: r.Convergence.P50, p99: r.Convergence.P99, probes: r.Convergence.Probes, converged: r.Convergence.Converged,
					within25: r.Fairness.Within25, fairWindows: r.Fairness.Windows, shareLow: r.Fairness.WorstLow, shareHigh: r.Fairness.WorstHigh}
				if spread > 0 {
					row.run = fmt.Sprintf("simulated, membership forming over %s", spread)
				}
				writeValidation(&b, row)
			}
		}
	}
	fmt.Fprintf(&b, "\n`go run -C cmd/testcluster . sim --validate` (%s of wall time here; %s). The simulated rows alone: `go run -C cmd/testcluster . sim --nodes N --seconds 10 --seed 1 --offered 500 --first-share [--gossip-mode owner] [--join-spread 200ms]`.\n",
		time.Since(start).Round(time.Second), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	traffic, err := trafficTable(c.String("recorded"))
	if err != nil {
		return err
	}
	return rewriteBetweenMarkers(c.String("doc"), map[string]string{"validation": b.String(), "validation-traffic": traffic})
}

// validateHolders is how many nodes hold an owner-mode probe's key, on
// both sides (the simulator's default, sim/holders.go).
const validateHolders = 5

// validateInterval is the gossip interval of both sides.
const validateInterval = 20 * time.Millisecond

// validationConfig is the simulated side of one comparison: sluiced's
// settings (FirstShare, the default first contact) in gossip mode mode.
func validationConfig(n int, mode string, spread time.Duration) sim.Config {
	return sim.Config{Nodes: n, Duration: 10 * time.Second, Seed: 1, Offered: 500, JoinSpread: spread, GossipMode: mode, FirstShare: true,
		GossipInterval: validateInterval, ProbeHolders: validateHolders}
}

// realRun drives n sluiced processes, in gossip mode mode ("": sluiced's
// default), as testcluster's default run does. In owner mode a node hears
// of a key only while it uses it, so convergence is measured as the
// simulator measures it: min(n, validateHolders) nodes hold each probe's
// key before the measured token, and the lag runs until every other holder
// reflects it (testcluster.HolderProbeLag, the simulator's probeSettle
// between the two).
func realRun(ctx context.Context, bin string, n int, mode string) (validationRow, error) {
	rules := "rules:\n  hot:\n    rate: 100/1s\n    burst: 100\n  probe:\n    rate: 1000/1h\n"
	p, err := testcluster.StartProcs(testcluster.ProcsOptions{N: n, Sluiced: bin, Rules: rules, GossipInterval: validateInterval, GossipMode: mode})
	if err != nil {
		return validationRow{}, err
	}
	defer p.Close()
	spec := testcluster.WatchSpec{Rule: "hot", Key: "hot-key", Rate: 100, Burst: 100, Offered: 500, Duration: 10 * time.Second, ProbeRule: "probe"}
	if mode == "owner" {
		spec.ProbeHolders, spec.ProbeRate = validateHolders, 1000.0/3600
		spec.ProbeSettle = max(10*validateInterval, 100*time.Millisecond) // sim's probeSettle
	}
	seconds, err := testcluster.Watch(ctx, p, spec, nil)
	if err != nil {
		return validationRow{}, err
	}
	last := seconds[len(seconds)-1]
	row := validationRow{n: n, mode: mode, run: "real processes", admitted: last.Cumulative, allowed: last.Allowed, firstSecond: seconds[0].Cluster,
		shareLow: math.Inf(1), shareHigh: math.Inf(-1)}
	var lags []float64
	lost := 0
	for _, s := range seconds {
		lags = append(lags, s.LagMs...)
		lost += s.ProbesLost
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		row.p50, row.p99 = quantile(lags, 0.5), quantile(lags, 0.99)
	}
	row.probes, row.converged = len(lags)+lost, len(lags)
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
	if r.probes == 0 {
		conv = "not measured"
	}
	mode := r.mode
	if mode == "" {
		mode = "auto (sluiced's default: direct)"
	}
	fmt.Fprintf(b, "| %d | %s | %s | %d / %.0f (%.1f%%) | %d | %s | %.0f%% | %.2f-%.2f |\n", r.n, mode, r.run, r.admitted, r.allowed,
		100*float64(r.admitted)/r.allowed, r.firstSecond, conv, 100*r.within25, r.shareLow, r.shareHigh)
}
