package testcluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// These benchmarks measure the cluster rather than a function: run them with
// a fixed count, e.g.
//
//	go test -run '^$' -bench Convergence -benchtime 200x ./testcluster   # 200 probes per case
//	go test -run '^$' -bench 'Accuracy|GossipCost' -benchtime 1x ./testcluster
//
// With -short, BenchmarkAccuracy and BenchmarkGossipCost drive load for less
// time and over fewer cases. scripts/cluster-bench.sh runs them all. Every
// node runs in this process on 127.0.0.1, so nodes share the machine's cores
// with each other and with the load drivers; CPU figures are the process's.

const probeRules = "rules:\n  probe:\n    rate: 1000/1h\n  hot:\n    rate: 1000000/1s\n"

// The cluster sizes and gossip intervals the issue asks about.
var (
	benchNodes     = []int{3, 10, 25, 50}
	benchIntervals = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond}
)

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}

// startBench starts a cluster for a benchmark, closed when it ends.
func startBench(b *testing.B, opts Options) *Cluster {
	b.Helper()
	c, err := Start(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkConvergence times how long one admission takes to show on every
// other node, by cluster size and gossip interval, on an idle cluster; and,
// at 10, 25 and 50 nodes, with gossip forced to direct fan-out or to relaying.
// Each iteration is one probe.
func BenchmarkConvergence(b *testing.B) {
	type cfg struct {
		n      int
		iv     time.Duration
		mode   string
		fanout int
	}
	var cases []cfg
	for _, n := range benchNodes {
		for _, iv := range benchIntervals {
			cases = append(cases, cfg{n, iv, "default", 0})
		}
	}
	for _, n := range []int{10, 25, 50} {
		cases = append(cases, cfg{n, 50 * time.Millisecond, "fanout", 1000}, cfg{n, 50 * time.Millisecond, "relay", 1})
	}
	for _, tc := range cases {
		b.Run(fmt.Sprintf("nodes=%d/interval=%s/mode=%s", tc.n, tc.iv, tc.mode), func(b *testing.B) {
			opts := Options{N: tc.n, Rules: probeRules, GossipInterval: tc.iv, FanoutLimit: tc.fanout}
			if tc.mode == "relay" {
				opts.GossipMode = "relay" // FanoutLimit 1 alone is owner mode now
			}
			c := startBench(b, opts)
			var lags []float64
			probes, lost := 0, 0
			rnd := rand.New(rand.NewPCG(1, 2))
			sent0, bytes0 := totalSent(c)
			for b.Loop() {
				// Start each probe at a random phase of the gossip round, or
				// back-to-back probes would all start just after one.
				<-time.After(time.Duration(rnd.Int64N(int64(tc.iv))))
				lag, ok := ProbeLag(context.Background(), c, probes%tc.n, "probe", "k"+strconv.Itoa(probes), 20*tc.iv+5*time.Second)
				probes++
				if !ok {
					lost++
					continue
				}
				lags = append(lags, float64(lag)/float64(time.Millisecond))
			}
			sent, bytes := totalSent(c)
			slices.Sort(lags)
			b.ReportMetric(quantile(lags, 0.5), "p50-ms")
			b.ReportMetric(quantile(lags, 0.99), "p99-ms")
			b.ReportMetric(quantile(lags, 0.99)/float64(tc.iv.Milliseconds()), "p99-intervals")
			b.ReportMetric(float64(lost), "lost")
			b.ReportMetric(float64(sent-sent0)/float64(probes*tc.n), "packets/probe/node")
			b.ReportMetric(float64(bytes-bytes0)/float64(probes*tc.n), "bytes/probe/node")
		})
	}
}

// accuracyRules: the hot rule is the 100/1s burst 100; probe times
// convergence under the load.
const accuracyRules = "rules:\n  hot:\n    rate: 100/1s\n    burst: 100\n  probe:\n    rate: 1000/1h\n"

// BenchmarkAccuracy offers five times the limit of one hot key, 70% of it
// on node 0 and the rest spread evenly over the other nodes, for ten seconds
// (five with -short), and compares what the cluster admitted with what the
// limit allows: burst + rate × elapsed (overshoot is the difference, in
// tokens, at the end; max-overshoot the largest at any whole second). It
// also times convergence meanwhile. Each node's load is paced at
// a random phase; arrivals=aligned starts them all at once, so the nodes
// offered the same rate send together (the worst case: up to one admission
// per node whenever their shared view of the balance reaches a token).
// Each iteration is a fresh cluster and a whole run; figures are over all.
func BenchmarkAccuracy(b *testing.B) {
	const rate, burst = 100.0, 100.0
	dur := 10 * time.Second
	intervals := benchIntervals
	if testing.Short() {
		dur, intervals = 5*time.Second, []time.Duration{50 * time.Millisecond}
	}
	type cfg struct {
		n       int
		iv      time.Duration
		aligned bool
	}
	var cases []cfg
	for _, iv := range intervals {
		for _, n := range benchNodes {
			cases = append(cases, cfg{n: n, iv: iv})
		}
	}
	if !testing.Short() {
		// The worst case: the 49 lightly loaded nodes' requests land together.
		cases = append(cases, cfg{n: 50, iv: 50 * time.Millisecond, aligned: true})
	}
	for _, tc := range cases {
		name := fmt.Sprintf("nodes=%d/interval=%s", tc.n, tc.iv)
		if tc.aligned {
			name += "/arrivals=aligned"
		}
		b.Run(name, func(b *testing.B) {
			skew := make([]float64, tc.n)
			skew[0] = 0.7
			for i := 1; i < tc.n; i++ {
				skew[i] = 0.3 / float64(tc.n-1)
			}
			spec := WatchSpec{Rule: "hot", Key: "hot-key", Rate: rate, Burst: burst, Offered: 5 * rate,
				Skew: skew, Duration: dur, ProbeRule: "probe", Aligned: tc.aligned}
			var admitted int
			var allowed, peak float64
			var lags []float64
			for b.Loop() {
				c, err := Start(Options{N: tc.n, Rules: accuracyRules, GossipInterval: tc.iv})
				if err != nil {
					b.Fatal(err)
				}
				seconds, err := Watch(context.Background(), c, spec, nil)
				c.Close()
				if err != nil {
					b.Fatal(err)
				}
				last := seconds[len(seconds)-1]
				admitted += last.Cumulative
				allowed += last.Allowed
				for _, s := range seconds {
					lags = append(lags, s.LagMs...)
					peak = max(peak, float64(s.Cumulative)-s.Allowed)
				}
			}
			slices.Sort(lags)
			b.ReportMetric(100*float64(admitted)/allowed, "accuracy-%")
			b.ReportMetric(float64(admitted), "admitted")
			b.ReportMetric(allowed, "allowed")
			b.ReportMetric(float64(admitted)-allowed, "overshoot")
			b.ReportMetric(peak, "max-overshoot")
			b.ReportMetric(quantile(lags, 0.5), "probe-p50-ms")
			b.ReportMetric(quantile(lags, 0.99), "probe-p99-ms")
			b.ReportMetric(quantile(lags, 0.99)/float64(tc.iv.Milliseconds()), "probe-p99-intervals")
			b.ReportMetric(float64(len(lags)), "probes")
		})
	}
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkGossipCost drives the same cluster-wide request rate, spread
// round-robin over the nodes, each request on one of a number of hot keys
// picked at random, and reports per node what gossip sends and receives:
// counter packets, their bytes and the counters in them, and every UDP byte
// the node puts on the wire (memberlist's probes and framing included). CPU
// is the whole process's (load drivers, clients and daemons together: an
// upper bound) per node; achieved-req/s shows whether the driver kept up and
// min-alive whether membership held (every node counted every other).
//
// Gossip runs every 20 ms (the default) unless the name gives an interval.
// The default mode sends each dirty counter to every member (below the
// fan-out limit); mode=relay forces relayed gossip.
func BenchmarkGossipCost(b *testing.B) {
	const rate = 2000
	dur := 5 * time.Second
	type cfg struct {
		n, keys int
		iv      time.Duration
		relay   bool
	}
	var cases []cfg
	keySets := []int{10, 100, 1000}
	nodes := benchNodes
	if testing.Short() {
		dur, keySets, nodes = 3*time.Second, []int{10, 1000}, []int{3, 50}
	}
	for _, n := range nodes {
		for _, k := range keySets {
			cases = append(cases, cfg{n: n, keys: k})
		}
	}
	cases = append(cases, cfg{n: 50, keys: 0})
	if !testing.Short() {
		// Relayed gossip at two sizes (its cost per node should not depend
		// on N), and a longer interval, which coalesces more per packet.
		for _, n := range []int{10, 50} {
			for _, k := range []int{10, 1000} {
				cases = append(cases, cfg{n: n, keys: k, relay: true})
			}
		}
		for _, k := range []int{10, 1000} {
			cases = append(cases, cfg{n: 50, keys: k, iv: 100 * time.Millisecond})
		}
	}
	for _, tc := range cases {
		name := fmt.Sprintf("nodes=%d/hotkeys=%d/rate=%d", tc.n, tc.keys, rate)
		if tc.iv != 0 {
			name += "/interval=" + tc.iv.String()
		}
		if tc.relay {
			name += "/mode=relay"
		}
		b.Run(name, func(b *testing.B) {
			opts := Options{N: tc.n, Rules: probeRules, GossipInterval: tc.iv}
			if tc.relay {
				opts.FanoutLimit, opts.GossipMode = 1, "relay"
			}
			for b.Loop() {
				c, err := Start(opts)
				if err != nil {
					b.Fatal(err)
				}
				before := trafficOf(c)
				cpu0, t0 := cpuSeconds(), time.Now()
				stop := make(chan struct{})
				minAlive := make(chan int)
				go func() { minAlive <- watchMembers(c, stop) }()
				done := 0
				if tc.keys > 0 {
					done = driveKeys(c, tc.keys, rate, dur)
				} else {
					<-time.After(dur) // idle cost: measured over wall time, nothing to wait for
				}
				el := time.Since(t0).Seconds()
				d := trafficOf(c).minus(before)
				cpu := cpuSeconds() - cpu0
				close(stop)
				alive := <-minAlive
				c.Close()
				perNodeSec := func(v uint64) float64 { return float64(v) / el / float64(tc.n) }
				b.ReportMetric(perNodeSec(d.packets), "packets/s/node")
				b.ReportMetric(perNodeSec(d.bytes), "bytes/s/node")
				b.ReportMetric(perNodeSec(d.counters), "counters/s/node")
				b.ReportMetric(perNodeSec(d.recvBytes), "recv-bytes/s/node")
				b.ReportMetric(perNodeSec(d.wireBytes), "wire-bytes/s/node")
				b.ReportMetric(100*cpu/el/float64(tc.n), "cpu%/node")
				b.ReportMetric(float64(done)/el, "achieved-req/s")
				b.ReportMetric(float64(alive), "min-alive")
			}
		})
	}
}

// traffic sums every running node's gossip counters and wire counts.
type traffic struct {
	packets, bytes, counters, recvBytes, wireBytes uint64
}

func trafficOf(c *Cluster) traffic {
	var t traffic
	for _, n := range c.nodes {
		if d := n.Daemon(); d != nil {
			st := d.Syncer().Stats()
			t.packets += st.PacketsSent.Load()
			t.bytes += st.BytesSent.Load()
			t.counters += st.CountersSent.Load()
			t.recvBytes += st.BytesReceived.Load()
		}
		n.mu.Lock()
		if n.transport != nil {
			t.wireBytes += n.transport.wireBytes.Load()
		}
		n.mu.Unlock()
	}
	return t
}

func (t traffic) minus(u traffic) traffic {
	return traffic{t.packets - u.packets, t.bytes - u.bytes, t.counters - u.counters, t.recvBytes - u.recvBytes, t.wireBytes - u.wireBytes}
}

func totalSent(c *Cluster) (packets, bytes uint64) {
	t := trafficOf(c)
	return t.packets, t.bytes
}

// watchMembers samples every node's member count four times a second until
// stop closes, and returns the lowest seen.
func watchMembers(c *Cluster, stop <-chan struct{}) int {
	low := len(c.nodes)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return low
		case <-tick.C:
		}
		for _, n := range c.nodes {
			if d := n.Daemon(); d != nil {
				low = min(low, d.Syncer().NumAlive())
			}
		}
	}
}

// driveKeys offers rate requests per second on rule "hot" for d, round-robin
// over the nodes, each on one of keys distinct keys picked at random (keys
// ≤ 0: a fresh key every request). It stops at d or after rate × d requests,
// whichever comes first, and returns how many it made.
func driveKeys(c *Cluster, keys, rate int, d time.Duration) int {
	names := make([]string, max(keys, 0))
	for i := range names {
		names[i] = "key-" + strconv.Itoa(i)
	}
	const workers = 8
	limit := int64(float64(rate) * d.Seconds())
	deadline := time.Now().Add(d)
	var seq atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 0x5eed))
			tick := time.NewTicker(time.Second * workers / time.Duration(rate))
			defer tick.Stop()
			for time.Now().Before(deadline) {
				<-tick.C
				i := seq.Add(1)
				if i > limit {
					return
				}
				key := ""
				if keys > 0 {
					key = names[rnd.IntN(keys)]
				} else {
					key = "new-" + strconv.FormatInt(i, 10)
				}
				c.Allow(int(i)%len(c.nodes), "hot", key, 1)
			}
		}()
	}
	wg.Wait()
	return int(min(seq.Load(), limit))
}

// BenchmarkHotKeyThroughput offers ever more distinct keys per second, each
// used once, and times convergence meanwhile: past some rate the gossip
// packets per round grow until the lag does.
func BenchmarkHotKeyThroughput(b *testing.B) {
	const nodes = 5
	for _, rate := range []int{1000, 5000, 20000, 50000} {
		b.Run(fmt.Sprintf("nodes=%d/newkeys-per-s=%d", nodes, rate), func(b *testing.B) {
			for b.Loop() {
				c, err := Start(Options{N: nodes, Rules: probeRules, GossipInterval: 20 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				done := make(chan struct{})
				var achieved int
				go func() { defer close(done); achieved = driveKeys(c, 0, rate, 5*time.Second) }()
				var lags []float64
			probing:
				for i := 0; i < 100_000; i++ { // ends with the load, after 5 s
					select {
					case <-done:
						break probing
					default:
					}
					lag, ok := ProbeLag(context.Background(), c, i%nodes, "probe", "p"+strconv.Itoa(i), 5*time.Second)
					if ok {
						lags = append(lags, float64(lag)/float64(time.Millisecond))
					}
				}
				<-done
				c.Close()
				slices.Sort(lags)
				b.ReportMetric(quantile(lags, 0.5), "p50-ms")
				b.ReportMetric(quantile(lags, 0.99), "p99-ms")
				b.ReportMetric(float64(achieved)/5, "achieved-keys/s")
			}
		})
	}
}
