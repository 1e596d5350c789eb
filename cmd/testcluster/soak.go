package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"image/color"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/testcluster"
)

// soakCommand is `testcluster soak`: a bounded run at a steady load with
// churn (a node stopped or crashed and restarted every --churn, rules
// reloaded on every node every --reload), sampling the process's memory and
// goroutines each second, to show they stay flat and no decision is lost.
func soakCommand() *cli.Command {
	return &cli.Command{
		Name:  "soak",
		Usage: "run a 5-node cluster for a bounded time under load and churn; chart memory, goroutines and accuracy",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "n", Value: 5, Usage: "nodes"},
			&cli.DurationFlag{Name: "gossip-interval", Value: 20 * time.Millisecond, Usage: "gossip interval of every node"},
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Minute, Usage: "how long to run"},
			&cli.Float64Flag{Name: "offered", Value: 500, Usage: "requests per second on the hot key (limit 100/1s burst 100), all nodes together"},
			&cli.StringFlag{Name: "skew", Value: "60,20,10,5,5", Usage: "share of the hot load per node"},
			&cli.IntFlag{Name: "keys", Value: 1000, Usage: "background keys in play at once (the window slides, so buckets churn)"},
			&cli.Float64Flag{Name: "background", Value: 200, Usage: "background requests per second, over --keys keys"},
			&cli.BoolFlag{Name: "slide", Value: true, Usage: "slide the background key window (new keys keep coming); --slide=false keeps the same keys"},
			&cli.DurationFlag{Name: "reload", Value: 5 * time.Second, Usage: "reload rules on every node this often"},
			&cli.DurationFlag{Name: "churn", Value: 30 * time.Second, Usage: "stop or crash a node (not node 0) this often"},
			&cli.DurationFlag{Name: "down", Value: 8 * time.Second, Usage: "how long a churned node stays down"},
			&cli.StringFlag{Name: "out", Value: "docs/soak", Usage: "folder for soak.csv, memory.svg, goroutines.svg, admitted.svg and summary.txt"},
		},
		Action: soak,
	}
}

// soakRules alternate at each reload: the hot rule stays, the background
// rule's limit changes, so every reload really swaps a rule.
func soakRules(version int) string {
	bg := []string{"10/1s", "20/1s"}[version%2]
	return "rules:\n  hot:\n    rate: 100/1s\n    burst: 100\n  bg:\n    rate: " + bg + "\n"
}

// soakSample is one second of the soak.
type soakSample struct {
	testcluster.Second
	HeapInuse, HeapAlloc, RSS uint64 // bytes
	Goroutines                int
	Decisions                 uint64 // cumulative: calls the daemon decided
	FailedOpenUp              uint64 // cumulative: failed open while the node was up (lost)
	FailedOpenDown            uint64 // cumulative: failed open because the node was down (expected)
	Up                        int    // nodes running at the sample
	Buckets                   int    // buckets held, all running nodes together
	Reloads, Churns           int    // cumulative
}

// countingTarget counts every decision made through it, telling failed-open
// calls to a running node (lost decisions) from those to a stopped node.
type countingTarget struct {
	*testcluster.Cluster
	decisions, openUp, openDown atomic.Uint64
	lastErr                     atomic.Pointer[string]
}

func (t *countingTarget) Allow(i int, rule, key string, cost int64) clientlib.Decision {
	n := t.Node(i)
	upBefore := n.Running()
	d := t.Cluster.Allow(i, rule, key, cost)
	switch {
	case !d.FailedOpen:
		t.decisions.Add(1)
	case upBefore && n.Running(): // up throughout the call: nothing excuses it
		t.openUp.Add(1)
		if d.Err != nil {
			s := fmt.Sprintf("node %d: %v", i, d.Err)
			t.lastErr.Store(&s)
		}
	default:
		t.openDown.Add(1)
	}
	return d
}

func soak(c *cli.Context) error {
	n := c.Int("n")
	if n < 2 {
		return fmt.Errorf("soak: -n must be at least 2 (node 0 stays up, another churns)")
	}
	skew, err := parseSkew(c.String("skew"), n)
	if err != nil {
		return err
	}
	out := c.String("out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	duration := c.Duration("duration")
	cl, err := testcluster.Start(testcluster.Options{N: n, Rules: soakRules(0), GossipInterval: c.Duration("gossip-interval")})
	if err != nil {
		return err
	}
	defer cl.Close()
	target := &countingTarget{Cluster: cl}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()

	var reloads, churns atomic.Int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		background(ctx, target, c.Int("keys"), c.Float64("background"), c.Bool("slide"))
	}()
	go func() {
		defer wg.Done()
		operate(ctx, cl, c.Duration("reload"), c.Duration("churn"), c.Duration("down"), &reloads, &churns)
	}()

	fmt.Printf("soak: %d nodes, gossip %s, hot 100/1s burst 100 offered %.0f/s skew %v, background %.0f/s over %d keys, reload every %s, churn every %s (down %s), for %s\n\n",
		n, c.Duration("gossip-interval"), c.Float64("offered"), skew, c.Float64("background"), c.Int("keys"),
		c.Duration("reload"), c.Duration("churn"), c.Duration("down"), duration)
	fmt.Printf("%4s %9s %9s %8s %8s %6s %10s %7s %9s %3s %9s\n", "t", "heap MiB", "rss MiB", "gorout", "buckets", "hot/s", "cumulative", "acc %", "decisions", "up", "open up/dn")
	var samples []soakSample
	spec := testcluster.WatchSpec{Rule: "hot", Key: "hot-key", Rate: 100, Burst: 100, Offered: c.Float64("offered"), Skew: skew, Duration: duration}
	_, err = testcluster.Watch(ctx, target, spec, func(s testcluster.Second) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms) // no forced GC: what the process holds as it runs
		up, buckets := 0, 0
		for _, node := range cl.Nodes() {
			if d := node.Daemon(); d != nil {
				up++
				buckets += d.Store().Len()
			}
		}
		x := soakSample{Second: s, HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, RSS: rss(), Goroutines: runtime.NumGoroutine(),
			Decisions: target.decisions.Load(), FailedOpenUp: target.openUp.Load(), FailedOpenDown: target.openDown.Load(),
			Up: up, Buckets: buckets, Reloads: int(reloads.Load()), Churns: int(churns.Load())}
		samples = append(samples, x)
		fmt.Printf("%4d %9.1f %9.1f %8d %8d %6d %10d %7.1f %9d %3d %4d/%-5d\n", s.T, mib(x.HeapInuse), mib(x.RSS), x.Goroutines, buckets, s.Cluster,
			s.Cumulative, 100*float64(s.Cumulative)/s.Allowed, x.Decisions, up, x.FailedOpenUp, x.FailedOpenDown)
	})
	cancel()
	wg.Wait()
	if err != nil {
		return err
	}
	// Goroutines once the cluster is closed: what the run left behind.
	cl.Close()
	after := settledGoroutines(5 * time.Second)

	summary := summarize(samples, after, target.lastErr.Load())
	fmt.Print("\n" + summary)
	if err := os.WriteFile(filepath.Join(out, "summary.txt"), []byte(summary), 0o644); err != nil {
		return err
	}
	if err := writeSoakCSV(filepath.Join(out, "soak.csv"), samples); err != nil {
		return err
	}
	if err := writeSoakCharts(out, fmt.Sprintf("%d nodes, gossip %s, churn every %s, reload every %s", n, c.Duration("gossip-interval"), c.Duration("churn"), c.Duration("reload")), samples); err != nil {
		return err
	}
	fmt.Printf("wrote %s/soak.csv, summary.txt, memory.svg, goroutines.svg, admitted.svg\n", out)
	return nil
}

// background offers rate requests per second spread over a window of keys
// that (if slide) moves on by one key every fourth request, so old buckets
// go idle (and are swept) while new ones are created, on each node in turn.
func background(ctx context.Context, t testcluster.Target, keys int, rate float64, slide bool) {
	if rate <= 0 || keys <= 0 {
		return
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		base := 0
		if slide {
			base = seq / 4
		}
		key := "bg-" + strconv.Itoa(base+rand.N(keys))
		t.Allow(seq%t.Size(), "bg", key, 1)
	}
}

// operate reloads every node's rules every reload, and every churn takes a
// node other than 0 down (alternately stopped gracefully and crashed) and
// restarts it down later. One goroutine, so reloads and restarts never race.
func operate(ctx context.Context, cl *testcluster.Cluster, reload, churn, down time.Duration, reloads, churns *atomic.Int64) {
	reloadTick := time.NewTicker(reload)
	defer reloadTick.Stop()
	churnTick := time.NewTicker(churn)
	defer churnTick.Stop()
	restart := time.NewTimer(0)
	<-restart.C
	victim := -1
	version := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-reloadTick.C:
			version++
			for i, node := range cl.Nodes() {
				if err := cl.SetRules(i, soakRules(version)); err != nil && node.Running() {
					fmt.Fprintf(os.Stderr, "soak: reload node %d: %v\n", i, err)
				} // a stopped node's file is still rewritten: it restarts with the current rules
			}
			reloads.Add(1)
		case <-churnTick.C:
			if victim >= 0 {
				continue // the last one is still down
			}
			k := int(churns.Load())
			victim = 1 + k%(cl.Size()-1)
			how, f := "stop", cl.Stop
			if k%2 == 1 {
				how, f = "crash", cl.Crash
			}
			if err := f(victim); err != nil {
				fmt.Fprintf(os.Stderr, "soak: %s node %d: %v\n", how, victim, err)
			}
			churns.Add(1)
			restart.Reset(down)
		case <-restart.C:
			if err := cl.Restart(victim); err != nil {
				fmt.Fprintf(os.Stderr, "soak: restart node %d: %v\n", victim, err)
			}
			victim = -1
		}
	}
}

// rss reads the process's resident set size from /proc (0 if unavailable).
func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// settledGoroutines waits (up to timeout) for the goroutine count to stop
// falling after shutdown and returns it.
func settledGoroutines(timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := runtime.NumGoroutine()
	for time.Now().Before(deadline) {
		<-tick.C
		n := runtime.NumGoroutine()
		if n == last {
			return n
		}
		last = n
	}
	return last
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// slope fits y = a + b·x by least squares and returns b.
func slope(xs, ys []float64) float64 {
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	k := float64(len(xs))
	if d := k*sxx - sx*sx; d != 0 {
		return (k*sxy - sx*sy) / d
	}
	return 0
}

func summarize(s []soakSample, after int, lastErr *string) string {
	if len(s) == 0 {
		return "no samples\n"
	}
	first, last := s[0], s[len(s)-1]
	var maxHeap, maxRSS uint64
	maxG, maxB := 0, 0
	for _, x := range s {
		maxHeap, maxRSS, maxG, maxB = max(maxHeap, x.HeapInuse), max(maxRSS, x.RSS), max(maxG, x.Goroutines), max(maxB, x.Buckets)
	}
	// Slope over the last 8 minutes (or the last 80% of a shorter run),
	// after the warm-up.
	from := max(0, len(s)-480)
	if len(s) < 600 {
		from = len(s) / 5
	}
	var xs, heap, gor []float64
	for _, x := range s[from:] {
		xs = append(xs, float64(x.T)/60)
		heap = append(heap, mib(x.HeapInuse))
		gor = append(gor, float64(x.Goroutines))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "duration %d s, reloads %d, churns %d (stop and crash alternately)\n", last.T, last.Reloads, last.Churns)
	fmt.Fprintf(&b, "heap in use (MiB, HeapInuse, no forced GC): start %.1f, end %.1f, max %.1f; slope over t=%d..%d s: %+.3f MiB/min\n",
		mib(first.HeapInuse), mib(last.HeapInuse), mib(maxHeap), s[from].T, last.T, slope(xs, heap))
	fmt.Fprintf(&b, "RSS (MiB): start %.1f, end %.1f, max %.1f\n", mib(first.RSS), mib(last.RSS), mib(maxRSS))
	fmt.Fprintf(&b, "goroutines: start %d, end %d, max %d; slope over t=%d..%d s: %+.2f /min; after closing the cluster: %d\n",
		first.Goroutines, last.Goroutines, maxG, s[from].T, last.T, slope(xs, gor), after)
	fmt.Fprintf(&b, "buckets held (all nodes): start %d, end %d, max %d\n", first.Buckets, last.Buckets, maxB)
	fmt.Fprintf(&b, "decisions %d; failed open while the node was up (lost) %d; failed open while the node was down (expected) %d\n",
		last.Decisions, last.FailedOpenUp, last.FailedOpenDown)
	if lastErr != nil {
		fmt.Fprintf(&b, "last lost decision: %s\n", *lastErr)
	}
	fmt.Fprintf(&b, "hot key: admitted %d, the limit allows %.0f (burst 100 + 100/s × %.1f s): accuracy %.1f%%\n",
		last.Cumulative, last.Allowed, (last.Allowed-100)/100, 100*float64(last.Cumulative)/last.Allowed)
	return b.String()
}

func writeSoakCSV(path string, samples []soakSample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"t", "heap_inuse_bytes", "heap_alloc_bytes", "rss_bytes", "goroutines", "decisions", "failed_open_up", "failed_open_down",
		"nodes_up", "buckets", "reloads", "churns", "hot_admitted", "hot_cumulative", "hot_allowed"})
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	for _, x := range samples {
		w.Write([]string{strconv.Itoa(x.T), u(x.HeapInuse), u(x.HeapAlloc), u(x.RSS), strconv.Itoa(x.Goroutines), u(x.Decisions),
			u(x.FailedOpenUp), u(x.FailedOpenDown), strconv.Itoa(x.Up), strconv.Itoa(x.Buckets), strconv.Itoa(x.Reloads), strconv.Itoa(x.Churns),
			strconv.Itoa(x.Cluster), strconv.Itoa(x.Cumulative), strconv.FormatFloat(x.Allowed, 'f', 1, 64)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeSoakCharts draws memory.svg (heap in use and RSS), goroutines.svg and
// admitted.svg (the hot key's cumulative admissions against the limit).
func writeSoakCharts(dir, title string, samples []soakSample) error {
	series := func(f func(soakSample) float64) plotter.XYs {
		xy := make(plotter.XYs, len(samples))
		for i, x := range samples {
			xy[i] = plotter.XY{X: float64(x.T), Y: f(x)}
		}
		return xy
	}
	type line struct {
		name  string
		xy    plotter.XYs
		color color.Color
	}
	charts := []struct {
		name, title, y string
		lines          []line
	}{
		{"memory", "memory: " + title, "MiB", []line{
			{"heap in use", series(func(x soakSample) float64 { return mib(x.HeapInuse) }), palette[0]},
			{"RSS", series(func(x soakSample) float64 { return mib(x.RSS) }), palette[1]},
		}},
		{"goroutines", "goroutines: " + title, "goroutines", []line{
			{"goroutines", series(func(x soakSample) float64 { return float64(x.Goroutines) }), palette[2]},
			{"nodes up × 100", series(func(x soakSample) float64 { return 100 * float64(x.Up) }), color.Gray{Y: 150}},
		}},
		{"admitted", "hot key: " + title, "requests since the start", []line{
			{"admitted", series(func(x soakSample) float64 { return float64(x.Cumulative) }), color.Black},
			{"limit allows (burst + rate × t)", series(func(x soakSample) float64 { return x.Allowed }), palette[3]},
		}},
	}
	for _, ch := range charts {
		p := plot.New()
		p.Title.Text = ch.title
		p.X.Label.Text = "seconds"
		p.Y.Label.Text = ch.y
		for _, l := range ch.lines {
			if err := addLine(p, l.name, l.xy, l.color, 1.5); err != nil {
				return err
			}
		}
		p.Legend.Top = true
		p.Legend.Left = true
		p.Y.Min = 0
		p.Y.Max *= 1.25
		if err := p.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(dir, ch.name+".svg")); err != nil {
			return err
		}
	}
	return nil
}
