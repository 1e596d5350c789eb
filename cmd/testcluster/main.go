// Command testcluster starts an N-node Sluice cluster on loopback (in this
// process, or as real sluiced processes with --procs), drives a skewed load
// against one hot key for a bounded time, prints a live per-second table, and
// writes the run as CSV and SVG charts to a folder. It is a module of its
// own (cmd/testcluster/go.mod, using the sluice module in this checkout), so
// its plotting libraries stay out of the sluice module; from the
// repository's root (paths are then relative to cmd/testcluster/):
//
//	go run -C cmd/testcluster . -n 5 --gossip-interval 50ms --rate 100/s --skew 70,20,10 --duration 20s --out ../../out/run1
//
// The soak subcommand runs a cluster for a bounded time (10 minutes by
// default) under load, rule reloads and node churn, and charts the process's
// memory and goroutines (see scripts/soak.sh and docs/soak/):
//
//	go run -C cmd/testcluster . soak --duration 1m --out ../../out/soak
package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/testcluster"
)

func main() {
	app := &cli.App{
		Name:  "testcluster",
		Usage: "watch a local Sluice cluster converge under load",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "n", Value: 3, Usage: "nodes"},
			&cli.DurationFlag{Name: "gossip-interval", Value: 20 * time.Millisecond, Usage: "gossip interval of every node"},
			&cli.IntFlag{Name: "fanout-limit", Value: 0, Usage: "largest cluster gossiping to every member (0: the default)"},
			&cli.StringFlag{Name: "gossip-mode", Usage: "auto (default), direct, relay or owner"},
			&cli.StringFlag{Name: "rate", Value: "100/1s", Usage: "the hot rule's limit, COUNT/PERIOD"},
			&cli.IntFlag{Name: "burst", Value: 0, Usage: "the hot rule's burst (0: the rate's count)"},
			&cli.Float64Flag{Name: "offered", Value: 0, Usage: "requests per second offered, all nodes together (0: five times the limit)"},
			&cli.StringFlag{Name: "skew", Value: "", Usage: "share of the load per node, e.g. 70,20,10 (default: even)"},
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "how long to drive load"},
			&cli.Float64Flag{Name: "drop", Usage: "fraction of gossip packets dropped (in-process only)"},
			&cli.BoolFlag{Name: "procs", Usage: "run real sluiced processes (built from ./cmd/sluiced) instead of in-process nodes"},
			&cli.StringFlag{Name: "sluiced", Usage: "with --procs: a sluiced binary to use instead of building one"},
			&cli.StringFlag{Name: "out", Value: "", Usage: "folder for run.csv and the charts admitted and convergence (.svg and .png) (default: out/testcluster-TIMESTAMP)"},
		},
		Action:   run,
		Commands: []*cli.Command{soakCommand(), simCommand()},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "testcluster:", err)
		os.Exit(1)
	}
}

func run(c *cli.Context) error {
	n := c.Int("n")
	count, period, err := config.ParseRate(c.String("rate"))
	if err != nil {
		return fmt.Errorf("--rate: %w", err)
	}
	burst := int64(c.Int("burst"))
	if burst <= 0 {
		burst = count
	}
	perSec := float64(count) / period.Seconds()
	offered := c.Float64("offered")
	if offered <= 0 {
		offered = 5 * perSec
	}
	skew, err := parseSkew(c.String("skew"), n)
	if err != nil {
		return err
	}
	out := c.String("out")
	if out == "" {
		out = filepath.Join("out", "testcluster-"+time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	rules := fmt.Sprintf("rules:\n  hot:\n    rate: %d/%s\n    burst: %d\n  probe:\n    rate: 1000/1h\n", count, period, burst)

	var target testcluster.Target
	mode := "in-process"
	if c.Bool("procs") {
		mode = "processes"
		bin := c.String("sluiced")
		if bin == "" {
			if bin, err = buildSluiced(out); err != nil {
				return err
			}
		}
		target, err = testcluster.StartProcs(testcluster.ProcsOptions{N: n, Sluiced: bin, Rules: rules, GossipInterval: c.Duration("gossip-interval"), FanoutLimit: c.Int("fanout-limit"), GossipMode: c.String("gossip-mode")})
	} else {
		target, err = testcluster.Start(testcluster.Options{N: n, Rules: rules, GossipInterval: c.Duration("gossip-interval"), FanoutLimit: c.Int("fanout-limit"), GossipMode: c.String("gossip-mode"),
			Faults: testcluster.Faults{Drop: c.Float64("drop")}})
	}
	if err != nil {
		return err
	}
	defer target.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Printf("%d nodes (%s), gossip every %s, limit %s burst %d, offered %.0f/s skew %v, for %s\n\n",
		n, mode, c.Duration("gossip-interval"), c.String("rate"), burst, offered, skew, c.Duration("duration"))
	printHeader(os.Stdout, n)
	spec := testcluster.WatchSpec{Rule: "hot", Key: "hot-key", Rate: perSec, Burst: float64(burst), Offered: offered, Skew: skew, Duration: c.Duration("duration"), ProbeRule: "probe"}
	seconds, err := testcluster.Watch(ctx, target, spec, func(s testcluster.Second) { printRow(os.Stdout, s) })
	if err != nil {
		return err
	}
	last := seconds[len(seconds)-1]
	var lags []float64
	for _, s := range seconds {
		lags = append(lags, s.LagMs...)
	}
	slices.Sort(lags)
	fmt.Printf("\nadmitted %d, the limit allows %.0f: %.1f%%", last.Cumulative, last.Allowed, 100*float64(last.Cumulative)/last.Allowed)
	if len(lags) > 0 {
		fmt.Printf("; convergence p50 %.1f ms, p99 %.1f ms over %d probes", quantile(lags, 0.5), quantile(lags, 0.99), len(lags))
	}
	fmt.Println()
	if err := writeCSV(filepath.Join(out, "run.csv"), seconds); err != nil {
		return err
	}
	title := fmt.Sprintf("%d nodes (%s), gossip %s, limit %s, skew %v", n, mode, c.Duration("gossip-interval"), c.String("rate"), skew)
	if err := writeCharts(out, title, seconds, perSec); err != nil {
		return err
	}
	fmt.Printf("wrote %s/run.csv, admitted.svg/.png and convergence.svg/.png\n", out)
	return nil
}

func parseSkew(s string, n int) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > n {
		return nil, fmt.Errorf("--skew has %d shares for %d nodes", len(parts), n)
	}
	skew := make([]float64, n)
	total := 0.0
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("--skew %q: want non-negative numbers such as 70,20,10", s)
		}
		skew[i], total = v, total+v
	}
	if total == 0 {
		return nil, fmt.Errorf("--skew %q sums to zero", s)
	}
	for i := range skew {
		skew[i] /= total
	}
	return skew, nil
}

func buildSluiced(dir string) (string, error) {
	bin, err := filepath.Abs(filepath.Join(dir, "sluiced"))
	if err != nil {
		return "", err
	}
	// The sluice module's directory, wherever this command was started in
	// the scripts module (its go.mod replaces the module with ../).
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/sluicelabs/sluice").Output()
	if err != nil {
		return "", fmt.Errorf("build sluiced: find the sluice module (run inside the repository, or pass --sluiced): %w", err)
	}
	cmd := exec.Command("go", "build", "-C", strings.TrimSpace(string(out)), "-o", bin, "./cmd/sluiced")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build sluiced (run inside the repository, or pass --sluiced): %w", err)
	}
	return bin, nil
}

func printHeader(w io.Writer, n int) {
	fmt.Fprintf(w, "%4s", "t")
	for i := range n {
		fmt.Fprintf(w, " %6s", fmt.Sprint("n", i))
	}
	fmt.Fprintf(w, " %8s %10s %10s %8s %9s\n", "cluster", "cumulative", "allowed", "spread", "lag ms")
}

func printRow(w io.Writer, s testcluster.Second) {
	fmt.Fprintf(w, "%4d", s.T)
	for _, a := range s.Admitted {
		fmt.Fprintf(w, " %6d", a)
	}
	lag := "-"
	if len(s.LagMs) > 0 {
		lag = fmt.Sprintf("%.1f", slices.Max(s.LagMs))
	}
	fmt.Fprintf(w, " %8d %10d %10.0f %8.1f %9s\n", s.Cluster, s.Cumulative, s.Allowed, s.Spread, lag)
}

func writeCSV(path string, seconds []testcluster.Second) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	head := []string{"t", "cluster_admitted", "cumulative", "allowed", "spread", "max_lag_ms"}
	for i := range seconds[0].Admitted {
		head = append(head, fmt.Sprintf("n%d_admitted", i), fmt.Sprintf("n%d_balance", i))
	}
	w.Write(head)
	for _, s := range seconds {
		lag := ""
		if len(s.LagMs) > 0 {
			lag = strconv.FormatFloat(slices.Max(s.LagMs), 'f', 2, 64)
		}
		row := []string{strconv.Itoa(s.T), strconv.Itoa(s.Cluster), strconv.Itoa(s.Cumulative),
			strconv.FormatFloat(s.Allowed, 'f', 1, 64), strconv.FormatFloat(s.Spread, 'f', 2, 64), lag}
		for i := range s.Admitted {
			row = append(row, strconv.Itoa(s.Admitted[i]), strconv.FormatFloat(s.Balances[i], 'f', 2, 64))
		}
		w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func quantile(sorted []float64, q float64) float64 {
	return sorted[int(q*float64(len(sorted)-1))]
}
