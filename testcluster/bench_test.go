package testcluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// These benchmarks measure the cluster rather than a function: run them with
// a fixed count, e.g.
//
//	go test -run '^$' -bench Convergence -benchtime 40x ./testcluster
//
// scripts/cluster-bench.sh runs them all.

const probeRules = "rules:\n  probe:\n    rate: 1000/1h\n  hot:\n    rate: 1000000/1s\n"

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}

// BenchmarkConvergence times how long one admission takes to show on every
// other node, by cluster size and gossip interval, on an idle cluster; and,
// at 10 and 25 nodes, with gossip forced to direct fan-out or to relaying.
func BenchmarkConvergence(b *testing.B) {
	type cfg struct {
		n      int
		iv     time.Duration
		mode   string
		fanout int
	}
	var cases []cfg
	for _, n := range []int{3, 5, 10, 25} {
		for _, iv := range []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond} {
			cases = append(cases, cfg{n, iv, "default", 0})
		}
	}
	for _, n := range []int{10, 25} {
		cases = append(cases, cfg{n, 50 * time.Millisecond, "fanout", 1000}, cfg{n, 50 * time.Millisecond, "relay", 1})
	}
	for _, tc := range cases {
		b.Run(fmt.Sprintf("nodes=%d/interval=%s/mode=%s", tc.n, tc.iv, tc.mode), func(b *testing.B) {
			c, err := Start(Options{N: tc.n, Rules: probeRules, GossipInterval: tc.iv, FanoutLimit: tc.fanout})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var lags []float64
			lost := 0
			rnd := rand.New(rand.NewPCG(1, 2))
			sent0, bytes0 := totalSent(c)
			b.ResetTimer()
			for i := range b.N {
				// Start each probe at a random phase of the gossip round, or
				// back-to-back probes would all start just after one.
				<-time.After(time.Duration(rnd.Int64N(int64(tc.iv))))
				lag, ok := ProbeLag(context.Background(), c, i%tc.n, "probe", fmt.Sprint("k", i), 20*tc.iv+5*time.Second)
				if !ok {
					lost++
					continue
				}
				lags = append(lags, float64(lag)/float64(time.Millisecond))
			}
			b.StopTimer()
			sent, bytes := totalSent(c)
			slices.Sort(lags)
			b.ReportMetric(quantile(lags, 0.5), "p50-ms")
			b.ReportMetric(quantile(lags, 0.99), "p99-ms")
			b.ReportMetric(quantile(lags, 0.99)/float64(tc.iv.Milliseconds()), "p99-intervals")
			b.ReportMetric(float64(lost), "lost")
			b.ReportMetric(float64(sent-sent0)/float64(b.N*tc.n), "packets/probe/node")
			b.ReportMetric(float64(bytes-bytes0)/float64(b.N*tc.n), "bytes/probe/node")
		})
	}
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkGossipCost drives a fixed request rate spread over a number of
// hot keys and reports what gossip sends per node, and the whole process's
// CPU per node (load drivers, clients and daemons together: an upper bound).
func BenchmarkGossipCost(b *testing.B) {
	const nodes, rate, secs = 5, 2000, 5
	for _, keys := range []int{0, 100, 10_000} {
		b.Run(fmt.Sprintf("nodes=%d/hotkeys=%d/rate=%d", nodes, keys, rate), func(b *testing.B) {
			for range b.N {
				c, err := Start(Options{N: nodes, Rules: probeRules, GossipInterval: 20 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				sent0, bytes0 := totalSent(c)
				cpu0, t0 := cpuSeconds(), time.Now()
				if keys > 0 {
					driveKeys(c, keys, rate, secs*time.Second)
				} else {
					<-time.After(secs * time.Second) // idle cost: measured over wall time, nothing to wait for
				}
				el := time.Since(t0).Seconds()
				sent, bytes := totalSent(c)
				cpu := cpuSeconds() - cpu0
				c.Close()
				b.ReportMetric(float64(sent-sent0)/el/nodes, "packets/s/node")
				b.ReportMetric(float64(bytes-bytes0)/el/nodes, "bytes/s/node")
				b.ReportMetric(100*cpu/el/nodes, "cpu%/node")
			}
		})
	}
}

func totalSent(c *Cluster) (packets, bytes uint64) {
	for _, n := range c.nodes {
		if d := n.Daemon(); d != nil {
			packets += d.Syncer().Stats().PacketsSent.Load()
			bytes += d.Syncer().Stats().BytesSent.Load()
		}
	}
	return
}

// driveKeys offers rate requests per second for d, round-robin over keys
// distinct keys and over the nodes, and returns how many it made.
func driveKeys(c *Cluster, keys, rate int, d time.Duration) int {
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	var seq atomic.Int64
	const workers = 8
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second * workers / time.Duration(rate))
			defer tick.Stop()
			for time.Now().Before(deadline) {
				<-tick.C
				i := seq.Add(1)
				c.Allow(int(i)%len(c.nodes), "hot", fmt.Sprint("key-", int(i)%keys), 1)
			}
		}()
	}
	wg.Wait()
	return int(seq.Load())
}

// BenchmarkHotKeyThroughput offers ever more distinct keys per second, each
// used once, and times convergence meanwhile: past some rate the gossip
// packets per round grow until the lag does.
func BenchmarkHotKeyThroughput(b *testing.B) {
	const nodes = 5
	for _, rate := range []int{1000, 5000, 20000, 50000} {
		b.Run(fmt.Sprintf("nodes=%d/newkeys-per-s=%d", nodes, rate), func(b *testing.B) {
			for range b.N {
				c, err := Start(Options{N: nodes, Rules: probeRules, GossipInterval: 20 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				done := make(chan struct{})
				var achieved int
				go func() { defer close(done); achieved = driveKeys(c, 1<<30, rate, 5*time.Second) }()
				var lags []float64
				for i := 0; ; i++ {
					select {
					case <-done:
					default:
						lag, ok := ProbeLag(context.Background(), c, i%nodes, "probe", fmt.Sprint("p", i), 5*time.Second)
						if ok {
							lags = append(lags, float64(lag)/float64(time.Millisecond))
						}
						continue
					}
					break
				}
				c.Close()
				slices.Sort(lags)
				b.ReportMetric(quantile(lags, 0.5), "p50-ms")
				b.ReportMetric(quantile(lags, 0.99), "p99-ms")
				b.ReportMetric(float64(achieved)/5, "achieved-keys/s")
			}
		})
	}
}
