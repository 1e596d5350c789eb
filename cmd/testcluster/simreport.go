package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/testcluster/sim"
)

// The simulated tables of docs/SCALING.md: each a set of runs of both
// designs, "broadcast" (every node hears every update: direct fan-out up to
// the fan-out limit, relayed above, the design before issue 20, forced with
// --gossip-mode relay) and "owner" (--gossip-mode owner; auto's choice above
// the fan-out limit), rewritten between the table's markers once its runs
// are done.

// simReport runs the tables asked for (all by default) up to --max-nodes
// and rewrites each in the document as soon as its runs finish.
func simReport(c *cli.Context) error {
	maxNodes, err := strconv.Atoi(c.String("max-nodes"))
	if err != nil {
		return fmt.Errorf("--max-nodes: %w", err)
	}
	only := c.StringSlice("tables")
	for _, name := range only {
		if !slices.ContainsFunc(reportTables, func(t reportTable) bool { return t.marker == name }) {
			return fmt.Errorf("--tables: no table %q", name)
		}
	}
	start := time.Now()
	for _, t := range reportTables {
		if len(only) > 0 && !slices.Contains(only, t.marker) {
			continue
		}
		var done []string
		if c.Bool("resume") {
			if done, err = doneRows(c.String("doc"), t); err != nil {
				return err
			}
		}
		err := runTable(t, maxNodes, done, func(table string) error {
			return rewriteBetweenMarkers(c.String("doc"), map[string]string{t.marker: table})
		})
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "report: %s wall\n", time.Since(start).Round(time.Second))
	return nil
}

// runTable runs one table's rows up to maxNodes and hands emit the table
// after each row (so that a regeneration stopped midway leaves the rows
// done, marked so): the rows, then how to regenerate it, its wall and CPU
// time, and each row's own command.
func runTable(t reportTable, maxNodes int, done []string, emit func(string) error) error {
	var rows, cmds strings.Builder
	start := time.Now()
	var cpu time.Duration
	var skipped []string
	for i, run := range t.runs {
		if run.Nodes > maxNodes {
			skipped = append(skipped, strconv.Itoa(run.Nodes))
			continue
		}
		if i < len(done) {
			rows.WriteString(done[i]) // --resume: made by an earlier regeneration
		} else {
			s, err := sim.New(run)
			if err != nil {
				return fmt.Errorf("report %s: %w", t.marker, err)
			}
			r := s.Run()
			r.Write(os.Stderr)
			cpu += r.CPU
			writeRow(&rows, r, designOf(run))
		}
		fmt.Fprintf(&cmds, "    %s\n", commandOf(run))
		var b strings.Builder
		b.WriteString(reportHeader)
		b.WriteString(rows.String())
		if i < len(t.runs)-1 {
			fmt.Fprintf(&b, "\n**Incomplete**: this regeneration stopped (or is still running) after the row above; %d rows not run yet.", len(t.runs)-1-i)
		}
		resumed := ""
		if len(done) > 0 {
			resumed = fmt.Sprintf(" for the rows after the first %d, kept by --resume", len(done))
		}
		fmt.Fprintf(&b, "\nSeed 1. This table: `go run -C cmd/testcluster . sim --report --tables %s` (%s of wall time here, %s of the simulator's CPU%s; %s)",
			t.marker, time.Since(start).Round(time.Second), cpu.Round(time.Second), resumed, time.Now().UTC().Format("2006-01-02"))
		if len(skipped) > 0 {
			fmt.Fprintf(&b, "; rows of N = %s not run (above --max-nodes)", strings.Join(skipped, ", "))
		}
		b.WriteString(". Each row alone:\n\n")
		b.WriteString(cmds.String())
		if err := emit(b.String()); err != nil {
			return err
		}
	}
	return nil
}

type reportTable struct {
	marker string
	runs   []sim.Config
}

// designOf names a run's design for the tables.
func designOf(c sim.Config) string {
	if c.GossipMode == "owner" {
		return "owner"
	}
	return "broadcast"
}

// broadcast is a run of the design before issue 20 at n nodes: direct
// fan-out up to the fan-out limit (64), relayed above.
func broadcast(c sim.Config) sim.Config {
	if c.Nodes > 64 {
		c.GossipMode = "relay"
	}
	return c
}

func owner(c sim.Config) sim.Config {
	c.GossipMode = "owner"
	return c
}

// reportTables are SCALING.md's simulated tables: the limit 100/s burst
// 100, 20 ms gossip, seed 1, defaults otherwise. Broadcast stops where its
// runs stop being affordable here (its simulated work grows as N²: see
// SCALING.md); owner mode goes to 10,000.
var reportTables = func() []reportTable {
	secs := func(n int) time.Duration {
		if n >= 1000 {
			return 5 * time.Second
		}
		return 10 * time.Second
	}
	hotOf := func(n int) sim.Config { return sim.Config{Nodes: n, Duration: secs(n), Seed: 1, MinPerNode: 20} }
	// Broadcast's largest run: 3 s at 2,000 nodes (45 CPU s per simulated
	// second here).
	big := func(c sim.Config) sim.Config {
		if c.Nodes >= 2000 {
			c.Duration = 3 * time.Second
		}
		return c
	}
	var hot, lossy, churn, fair, spread []sim.Config
	for _, n := range []int{3, 10, 50, 100, 1000, 2000, 3000, 10000} {
		if n <= 2000 {
			hot = append(hot, big(broadcast(hotOf(n))))
		}
		if n != 2000 {
			hot = append(hot, owner(hotOf(n)))
		}
	}
	for _, n := range []int{3, 10, 50, 100, 1000, 10000} {
		for _, loss := range []float64{0.1, 0.3} {
			c := hotOf(n)
			c.Loss = loss
			if n <= 1000 {
				lossy = append(lossy, broadcast(c))
			}
			lossy = append(lossy, owner(c))
		}
	}
	for _, n := range []int{50, 100, 1000} {
		for _, perMinute := range []float64{0.01, 0.1} {
			c := sim.Config{Nodes: n, Duration: 2 * time.Minute, Seed: 1, MinPerNode: 20, ChurnPerMinute: perMinute}
			if n <= 100 {
				churn = append(churn, broadcast(c))
			}
			churn = append(churn, owner(c))
		}
	}
	for _, n := range []int{3, 10, 50, 100, 1000} {
		// The limit grows with N, so that a node's fair share of a 2 s
		// window is 100 requests: shares are measurable at every size.
		c := sim.Config{Nodes: n, Duration: secs(n), Seed: 1, Rate: 50 * float64(n)}
		if n <= 100 {
			fair = append(fair, broadcast(c))
		}
		fair = append(fair, owner(c))
	}
	for _, n := range []int{3, 10, 50, 100, 1000, 3000, 10000} {
		// Short runs: relayed at 100 nodes costs 18-32 CPU s per
		// simulated second. Not shorter than 2 s: owner mode answers a
		// node about the keys it used in the last 2 s, so its per-node
		// cost climbs for 2 s before it is steady.
		d := 5 * time.Second
		if n >= 100 {
			d = 2 * time.Second
		}
		c := sim.Config{Nodes: n, Duration: d, Seed: 1, Scenario: sim.Spread}
		if n <= 100 {
			spread = append(spread, broadcast(c))
		}
		spread = append(spread, owner(c))
	}
	return []reportTable{{"sim-hot", hot}, {"sim-loss", lossy}, {"sim-churn", churn}, {"sim-fair", fair}, {"sim-spread", spread}}
}()

// commandOf is the command that makes one run alone.
func commandOf(c sim.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "go run -C cmd/testcluster . sim --nodes %d --seconds %g --seed %d", c.Nodes, c.Duration.Seconds(), c.Seed)
	if c.Scenario != "" && c.Scenario != sim.Hot {
		fmt.Fprintf(&b, " --scenario %s", c.Scenario)
	}
	if c.Rate != 0 {
		fmt.Fprintf(&b, " --rate %g", c.Rate)
	}
	if c.MinPerNode != 0 {
		fmt.Fprintf(&b, " --min-per-node %g", c.MinPerNode)
	}
	if c.Loss != 0 {
		fmt.Fprintf(&b, " --loss %g", c.Loss)
	}
	if c.ChurnPerMinute != 0 {
		fmt.Fprintf(&b, " --churn %g", c.ChurnPerMinute)
	}
	if c.GossipMode != "" {
		fmt.Fprintf(&b, " --gossip-mode %s", c.GossipMode)
	}
	return b.String()
}

const reportHeader = "| N | design | mode | loss | admitted / allowed | first second | worst 1 s window over burst + rate | convergence p50 / p99; probes converged, within 2 intervals + a round trip | fair 2 s shares (±25%) | per node: bytes/s sent | packets/s sent | busiest node: packets/s sent | est. CPU per node | sim: CPU s per simulated s, heap |\n" +
	"| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"

func writeRow(b *strings.Builder, r *sim.Report, design string) {
	fair := "-"
	if r.Fairness.Windows > 0 {
		fair = fmt.Sprintf("%.0f%%", 100*r.Fairness.Within25)
	}
	cv := r.Convergence
	conv := fmt.Sprintf("none of %d", cv.Probes)
	if cv.Converged > 0 {
		conv = fmt.Sprintf("%.0f / %.0f ms; %d/%d, %d within", cv.P50, cv.P99, cv.Converged, cv.Probes, cv.WithinBound)
	}
	if cv.Holders > 0 {
		conv += fmt.Sprintf(" (%d holders)", cv.Holders)
	}
	loss := fmt.Sprintf("%.0f%%", 100*r.Loss)
	if r.Churn > 0 {
		loss += fmt.Sprintf(", churn %g%%/min (%d replaced)", 100*r.Churn, r.Replaced)
	}
	fmt.Fprintf(b, "| %d | %s | %s | %s | %d / %.0f (%.0f%%) | %d | %+.0f (%.1f bursts) | %s | %s | %s | %.0f | %.0f | %.2f%% | %.2f, %.0f MB |\n",
		r.Nodes, design, r.Mode, loss, r.Admitted, r.Allowed, 100*r.Accuracy, r.FirstSecond, r.WorstWindow, r.WorstBursts,
		conv, fair, human(r.PerNode.BytesSent), r.PerNode.PacketsSent, r.PerNodeMax.PacketsSent, 100*r.EstimatedCPU,
		r.CPU.Seconds()/r.Seconds, float64(r.Heap)/(1<<20))
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1f MB", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f kB", v/1e3)
	}
	return fmt.Sprintf("%.0f B", v)
}

// doneRows returns the rows of table t already in the document at path,
// in order, for --resume: those of a regeneration that stopped midway.
// Only a prefix of t's runs whose commands, listed under the table, are
// still the runs' own is kept (the rows of a changed matrix are run again).
func doneRows(path string, t reportTable) ([]string, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("resume the tables: %w", err)
	}
	text := string(doc)
	open, end := "<!-- "+t.marker+" -->\n", "<!-- /"+t.marker+" -->"
	i, j := strings.Index(text, open), strings.Index(text, end)
	if i < 0 || j < i {
		return nil, nil
	}
	if !strings.HasPrefix(text[i+len(open):], reportHeader) {
		return nil, nil // another format: every row is made again
	}
	var rows, cmds []string
	for n, line := range strings.Split(text[i+len(open):j], "\n") {
		switch {
		case strings.HasPrefix(line, "| ") && n >= 2: // below the header and its rule
			rows = append(rows, line+"\n")
		case strings.HasPrefix(line, "    go run "):
			cmds = append(cmds, strings.TrimPrefix(line, "    "))
		}
	}
	k := 0
	for k < len(rows) && k < len(cmds) && k < len(t.runs) && cmds[k] == commandOf(t.runs[k]) {
		k++
	}
	return rows[:k], nil
}
