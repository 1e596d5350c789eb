package ipcbench

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The figures deploy/kubernetes sizes its sidecar from: a sluiced as the
// example runs it (keyed gossip in a cluster of three, the default
// --max-keys), in phases a pod goes through. The three daemons share this
// machine's cores with each other and with the load, so the CPU figures
// are upper bounds.

// sidecarKey is a test gossip key (base64 of 16 bytes, "kkkk...").
const sidecarKey = "a2tra2tra2tra2tra2traw=="

// launchCluster starts n keyed daemons on loopback, joined to the first,
// with the extra flags, and waits until each counts n members alive.
func launchCluster(b *testing.B, n int, extra ...string) []*proc {
	b.Helper()
	keyDir := b.TempDir()
	keyFile := filepath.Join(keyDir, "gossip.key")
	if err := os.WriteFile(keyFile, []byte(sidecarKey), 0o600); err != nil {
		b.Fatal(err)
	}
	var nodes []*proc
	first := ""
	for i := range n {
		gossip := freeLoopbackAddr(b) // TCP free now; UDP on the same port is almost always too
		args := append([]string{"--node-name", fmt.Sprintf("pod-%d", i), "--bind", gossip, "--gossip-key-file", keyFile}, extra...)
		if first != "" {
			args = append(args, "--join", first)
		} else {
			first = gossip
		}
		nodes = append(nodes, launch(b, false, args...))
	}
	deadline := time.Now().Add(30 * time.Second)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for _, p := range nodes {
		for {
			v, err := p.scrape("sluice_members_alive")
			if err == nil && int(v[0]) == n {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("cluster of %d not formed within 30s (last: %v, %v)", n, v, err)
			}
			<-poll.C
		}
	}
	return nodes
}

// sampleRSS samples every node's RSS every 100ms until stop is called,
// which returns each node's highest.
func sampleRSS(nodes []*proc) (stop func() ([]float64, error)) {
	peak := make([]float64, len(nodes))
	var firstErr error
	done, sampled := make(chan struct{}), make(chan struct{})
	sample := func() {
		for i, p := range nodes {
			rss, err := p.rss()
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				continue
			}
			peak[i] = max(peak[i], rss)
		}
	}
	go func() {
		defer close(sampled)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() ([]float64, error) {
		close(done)
		<-sampled
		sample()
		return peak, firstErr
	}
}

// maxOf is the largest value.
func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v[1:] {
		m = max(m, x)
	}
	return m
}

// BenchmarkSidecarIdleAndSteady: three keyed members joined, then each
// offered rate decisions per second (one check to a call, 1000 hot keys)
// for 5 s, paced: each member's RSS idle and its peak under the load, and
// the CPU each used (share of one core; the worst member). Run it with
// -benchtime 1x.
func BenchmarkSidecarIdleAndSteady(b *testing.B) {
	const (
		callers = 16
		measure = 5 * time.Second
	)
	for _, rate := range []int{1000, 10_000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			for range b.N {
				nodes := launchCluster(b, 3)
				idle := make([]float64, len(nodes))
				for i, p := range nodes {
					idle[i] = p.rssBytes(b)
				}
				stop := sampleRSS(nodes)
				cpu0 := make([]time.Duration, len(nodes))
				for i, p := range nodes {
					cpu0[i] = p.cpuTime(b)
				}
				var wg sync.WaitGroup
				var undecided [3]int64
				var took [3]time.Duration
				for i, p := range nodes {
					c := p.dial(b, 0)
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, undecided[i], took[i] = pace(c, rate, 1, callers, measure)
					}()
				}
				wg.Wait()
				cpu := make([]float64, len(nodes))
				for i, p := range nodes {
					cpu[i] = 100 * (p.cpuTime(b) - cpu0[i]).Seconds() / took[i].Seconds()
				}
				peak, err := stop()
				if err != nil {
					b.Fatal(err)
				}
				for i, u := range undecided {
					if u > 0 {
						b.Errorf("pod-%d: %d checks undecided", i, u)
					}
				}
				b.ReportMetric(maxOf(idle)/(1<<20), "idle-rss-MB")
				b.ReportMetric(maxOf(peak)/(1<<20), "load-rss-max-MB")
				b.ReportMetric(maxOf(cpu), "cpu-%-max")
				b.ReportMetric(maxOf(cpu)/(float64(rate)/10_000), "cpu-%-per-10k/s")
			}
		})
	}
}

// BenchmarkSidecarHoldsKeys: n idle keys (each in debt for an hour) spent
// on one member reach the other two; the RSS of the member they were spent
// on and of a peer that learned them, and per key above idle (a peer's per
// key it holds: a fill this fast outruns gossip, see BENCHMARKS' new keys
// per second the cluster keeps in sync). Run it with -benchtime 1x.
func BenchmarkSidecarHoldsKeys(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			for range b.N {
				nodes := launchCluster(b, 3)
				idle := make([]float64, len(nodes))
				for i, p := range nodes {
					idle[i] = p.rssBytes(b)
				}
				c := nodes[0].dial(b, fillConns)
				decided, undecided := sendUnique(c, "idle", "user-", int64(n), fillCallers, 2*time.Minute)
				if undecided > 0 || decided != int64(n) {
					b.Fatalf("sent %d of %d keys, %d undecided", decided+undecided, n, undecided)
				}
				// Peers hold what gossip carried: all of it at a pace
				// gossip keeps, less when the fill outruns it (counters
				// dropped in memberlist's full queues). Wait until
				// their counts stop growing.
				held := make([]float64, len(nodes))
				deadline := time.Now().Add(2 * time.Minute)
				poll := time.NewTicker(time.Second)
				for stable := 0; stable < 3 && time.Now().Before(deadline); {
					<-poll.C
					grew := false
					for i, p := range nodes {
						v := p.metrics(b, "sluice_active_keys")
						if v[0] != held[i] {
							grew = true
						}
						held[i] = v[0]
					}
					if grew {
						stable = 0
					} else {
						stable++
					}
				}
				poll.Stop()
				peerHeld := min(held[1], held[2])
				spent, peer := nodes[0].rssBytes(b), max(nodes[1].rssBytes(b), nodes[2].rssBytes(b))
				b.ReportMetric(spent/(1<<20), "spent-on-rss-MB")
				b.ReportMetric(peer/(1<<20), "peer-rss-MB")
				b.ReportMetric((spent-idle[0])/float64(n), "spent-on-rss-bytes/key")
				b.ReportMetric(peerHeld, "peer-held-keys")
				b.ReportMetric((peer-max(idle[1], idle[2]))/peerHeld, "peer-rss-bytes/key")
			}
		})
	}
}

// BenchmarkSidecarKeyFlood: never-repeated keys sent to every member at
// once, as fast as the callers can, for 20 s, against a cap of buckets
// (--max-keys; 1,048,576 is the default, 262,144 the Kubernetes
// example's): the highest RSS any member reaches, which the memory limit
// must stay above whatever arrives. Run it with -benchtime 1x.
func BenchmarkSidecarKeyFlood(b *testing.B) {
	for _, maxKeys := range []int{262_144, 1_048_576} {
		b.Run(fmt.Sprintf("cap=%d", maxKeys), func(b *testing.B) { sidecarKeyFlood(b, maxKeys) })
	}
}

func sidecarKeyFlood(b *testing.B, maxKeys int) {
	const (
		floodFor = 20 * time.Second
		most     = 50_000_000
	)
	for range b.N {
		nodes := launchCluster(b, 3, "--max-keys", strconv.Itoa(maxKeys))
		stop := sampleRSS(nodes)
		var wg sync.WaitGroup
		var decided [3]int64
		for i, p := range nodes {
			c := p.dial(b, fillConns)
			wg.Add(1)
			go func() {
				defer wg.Done()
				decided[i], _ = sendUnique(c, "idle", "flood-"+strconv.Itoa(i)+"-", most, fillCallers/2, floodFor)
			}()
		}
		wg.Wait()
		peak, err := stop()
		if err != nil {
			b.Fatal(err)
		}
		held := 0.0
		for _, p := range nodes {
			v := p.metrics(b, "sluice_active_keys")
			held = max(held, v[0])
		}
		b.ReportMetric(float64(decided[0]+decided[1]+decided[2])/floodFor.Seconds(), "keys/s")
		if held > float64(maxKeys) {
			b.Errorf("a member held %v keys, over its cap of %d", held, maxKeys)
		}
		b.ReportMetric(held, "max-held-keys")
		b.ReportMetric(maxOf(peak)/(1<<20), "rss-max-MB")
	}
}
