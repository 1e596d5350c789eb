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

// simCommand runs the simulator (testcluster/sim): thousands of nodes of
// the real gossip code and stores in this process on a virtual clock.
func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "simulate a cluster of the real gossip code on a virtual clock (deterministic with --seed)",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nodes", Value: 10, Usage: "cluster size"},
			&cli.Float64Flag{Name: "seconds", Value: 10, Usage: "simulated seconds of load"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random seed: the same seed repeats the run"},
			&cli.StringFlag{Name: "scenario", Value: "hot", Usage: "hot (every node on one key) or spread (--per-host requests/s per node over --keys keys)"},
			&cli.Float64Flag{Name: "rate", Value: 100, Usage: "the limit's rate per second"},
			&cli.Int64Flag{Name: "burst", Usage: "the limit's burst (0: the rate)"},
			&cli.Float64Flag{Name: "offered", Usage: "hot: requests per second offered by all nodes together (0: 5 × rate)"},
			&cli.Float64Flag{Name: "min-per-node", Usage: "hot: at least this many requests per second per node"},
			&cli.Float64Flag{Name: "per-host", Value: 50, Usage: "spread: requests per second per node"},
			&cli.IntFlag{Name: "keys", Usage: "spread: keys (0: one per node)"},
			&cli.DurationFlag{Name: "gossip-interval", Value: 20 * time.Millisecond, Usage: "gossip interval"},
			&cli.IntFlag{Name: "fanout-limit", Value: 64, Usage: "largest cluster gossiping to every member"},
			&cli.IntFlag{Name: "gossip-nodes", Value: 4, Usage: "peers per relayed round"},
			&cli.StringFlag{Name: "gossip-mode", Usage: "auto (default), direct, relay or owner"},
			&cli.IntFlag{Name: "aggregate-above", Usage: "owner mode: users of one key before they go through aggregators (default 64; -1: never)"},
			&cli.BoolFlag{Name: "first-share", Usage: "hold new buckets to burst/nodes for one propagation delay, and keep the fair floor, as sluiced does"},
			&cli.DurationFlag{Name: "push-pull-interval", Value: 10 * time.Second, Usage: "push-pull interval (memberlist stretches it above 32 members)"},
			&cli.Float64Flag{Name: "loss", Usage: "fraction of packets lost"},
			&cli.DurationFlag{Name: "latency", Value: 100 * time.Microsecond, Usage: "one-way latency, fixed part"},
			&cli.DurationFlag{Name: "jitter", Value: 100 * time.Microsecond, Usage: "mean exponential extra delay (reorders)"},
			&cli.DurationFlag{Name: "join-spread", Usage: "the membership forms over this long at the start (0: formed before the load)"},
			&cli.Float64Flag{Name: "churn", Usage: "fraction of nodes replaced per minute"},
			&cli.DurationFlag{Name: "partition-from", Usage: "partition: start"},
			&cli.DurationFlag{Name: "partition-to", Usage: "partition: end (none unless after the start)"},
			&cli.IntFlag{Name: "partition-split", Usage: "partition: nodes below this index on one side"},
			&cli.BoolFlag{Name: "report", Usage: "regenerate docs/SCALING.md's measured tables (the runs of scripts/scaling.sh); --nodes etc. are ignored"},
			&cli.BoolFlag{Name: "validate", Usage: "run the simulator against real sluiced processes (3, 10, 50) and rewrite docs/SCALING.md's validation table"},
			&cli.StringFlag{Name: "recorded", Value: "../../docs/benchmarks/raw/cluster.txt", Usage: "with --validate: BenchmarkGossipCost's recorded results, to compare traffic with"},
			&cli.BoolFlag{Name: "traffic-only", Usage: "with --validate: only the traffic comparison (no processes)"},
			&cli.StringFlag{Name: "sluiced", Usage: "with --validate: a sluiced binary to use instead of building one"},
			&cli.StringSliceFlag{Name: "tables", Usage: "with --report: only these tables (sim-hot, sim-loss, sim-fair, sim-spread, sim-churn)"},
			&cli.StringFlag{Name: "max-nodes", Value: "10000", Usage: "with --report: the largest cluster size to run"},
			&cli.StringFlag{Name: "doc", Value: "../../docs/SCALING.md", Usage: "with --report: the document to rewrite between its markers"},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("report") {
				return simReport(c)
			}
			if c.Bool("validate") {
				return simValidate(c)
			}
			cfg := sim.Config{
				Nodes: c.Int("nodes"), Duration: time.Duration(c.Float64("seconds") * float64(time.Second)), Seed: c.Uint64("seed"),
				Scenario: sim.Scenario(c.String("scenario")), Rate: c.Float64("rate"), Burst: c.Int64("burst"),
				Offered: c.Float64("offered"), MinPerNode: c.Float64("min-per-node"), PerHost: c.Float64("per-host"), Keys: c.Int("keys"),
				GossipInterval: c.Duration("gossip-interval"), FanoutLimit: c.Int("fanout-limit"), GossipNodes: c.Int("gossip-nodes"), GossipMode: c.String("gossip-mode"), AggregateAbove: c.Int("aggregate-above"), FirstShare: c.Bool("first-share"),
				PushPullInterval: c.Duration("push-pull-interval"), Loss: c.Float64("loss"), Latency: c.Duration("latency"),
				Jitter: c.Duration("jitter"), ChurnPerMinute: c.Float64("churn"), JoinSpread: c.Duration("join-spread"),
				Partition: sim.Partition{From: c.Duration("partition-from"), To: c.Duration("partition-to"), Split: c.Int("partition-split")},
			}
			s, err := sim.New(cfg)
			if err != nil {
				return err
			}
			s.Run().Write(os.Stdout)
			return nil
		},
	}
}

// simReport runs the baseline matrix and rewrites docs/SCALING.md's
// measured tables between their markers.
func simReport(c *cli.Context) error {
	maxNodes, err := strconv.Atoi(c.String("max-nodes"))
	if err != nil {
		return fmt.Errorf("--max-nodes: %w", err)
	}
	tables := map[string]string{}
	only := c.StringSlice("tables")
	for _, t := range reportTables {
		if len(only) > 0 && !slices.Contains(only, t.marker) {
			continue
		}
		var b strings.Builder
		b.WriteString(reportHeader)
		for _, run := range t.runs {
			if run.Nodes > maxNodes {
				continue
			}
			s, err := sim.New(run)
			if err != nil {
				return err
			}
			r := s.Run()
			r.Write(os.Stderr)
			writeRow(&b, r, "today")
		}
		tables[t.marker] = b.String()
	}
	return rewriteBetweenMarkers(c.String("doc"), tables)
}

type reportTable struct {
	marker string
	runs   []sim.Config
}

// reportTables are SCALING.md's simulated tables: the limit 100/s burst
// 100, 20 ms gossip, defaults otherwise.
var reportTables = func() []reportTable {
	var hot, lossy, spread, fair []sim.Config
	secs := func(n int) time.Duration {
		if n >= 1000 {
			return 5 * time.Second
		}
		return 10 * time.Second
	}
	for _, n := range []int{3, 10, 50, 100, 1000, 2000} {
		hot = append(hot, sim.Config{Nodes: n, Duration: secs(n), Seed: 1, MinPerNode: 20})
		if n > 1000 {
			continue
		}
		for _, loss := range []float64{0.1, 0.3} {
			lossy = append(lossy, sim.Config{Nodes: n, Duration: secs(n), Seed: 1, MinPerNode: 20, Loss: loss})
		}
		// The limit grows with N, so that a node's fair share of a 2 s
		// window is 100 requests: shares are measurable at every size.
		fair = append(fair, sim.Config{Nodes: n, Duration: secs(n), Seed: 1, Rate: 50 * float64(n)})
		if n <= 100 {
			spread = append(spread, sim.Config{Nodes: n, Duration: secs(n), Seed: 1, Scenario: sim.Spread})
		}
	}
	var churn []sim.Config
	for _, n := range []int{50, 100} {
		for _, perMinute := range []float64{0.01, 0.1} {
			churn = append(churn, sim.Config{Nodes: n, Duration: 2 * time.Minute, Seed: 1, MinPerNode: 20, ChurnPerMinute: perMinute})
		}
	}
	return []reportTable{{"sim-hot", hot}, {"sim-loss", lossy}, {"sim-fair", fair}, {"sim-spread", spread}, {"sim-churn", churn}}
}()

const reportHeader = "| N | design | mode | loss | admitted / allowed | first second | worst 1 s window over burst + rate | convergence p50 / p99 | fair 2 s shares (±25%) | per node: bytes/s sent | packets/s sent | est. CPU | sim: CPU s per simulated s, heap |\n" +
	"| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"

func writeRow(b *strings.Builder, r *sim.Report, design string) {
	fair := "-"
	if r.Fairness.Windows > 0 {
		fair = fmt.Sprintf("%.0f%%", 100*r.Fairness.Within25)
	}
	conv := fmt.Sprintf("%.0f / %.0f ms", r.Convergence.P50, r.Convergence.P99)
	if r.Convergence.Converged == 0 {
		conv = fmt.Sprintf("none of %d", r.Convergence.Probes)
	} else if r.Convergence.Converged < r.Convergence.Probes {
		conv += fmt.Sprintf(" (%d of %d)", r.Convergence.Converged, r.Convergence.Probes)
	}
	loss := fmt.Sprintf("%.0f%%", 100*r.Loss)
	if r.Churn > 0 {
		loss += fmt.Sprintf(", churn %g%%/min (%d replaced)", 100*r.Churn, r.Replaced)
	}
	fmt.Fprintf(b, "| %d | %s | %s | %s | %d / %.0f (%.0f%%) | %d | %+.0f (%.1f bursts) | %s | %s | %s | %.0f | %.2f%% | %.2f, %.0f MB |\n",
		r.Nodes, design, r.Mode, loss, r.Admitted, r.Allowed, 100*r.Accuracy, r.FirstSecond, r.WorstWindow, r.WorstBursts,
		conv, fair, human(r.PerNode.BytesSent), r.PerNode.PacketsSent, 100*r.EstimatedCPU, r.CPU.Seconds()/r.Seconds, float64(r.Heap)/(1<<20))
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

// rewriteBetweenMarkers replaces, in the file at path, what lies between
// each "<!-- NAME -->" and "<!-- /NAME -->" line with tables[NAME].
func rewriteBetweenMarkers(path string, tables map[string]string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("rewrite the tables: %w", err)
	}
	text := string(doc)
	for name, table := range tables {
		open, end := "<!-- "+name+" -->\n", "<!-- /"+name+" -->"
		i, j := strings.Index(text, open), strings.Index(text, end)
		if i < 0 || j < i {
			return fmt.Errorf("rewrite the tables: %s has no %q ... %q markers", path, open, end)
		}
		text = text[:i+len(open)] + table + text[j:]
	}
	return os.WriteFile(path, []byte(text), 0o644)
}
