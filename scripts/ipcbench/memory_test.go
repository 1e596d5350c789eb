package ipcbench

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// sendUnique sends keys prefix+"1000000000", prefix+"1000000001", ... (all
// of one length) under rule, 16 distinct keys to a request, from callers
// goroutines, until n keys are sent or d has passed. It returns how many
// checks the daemon decided and how many it did not (the client failed
// open).
func sendUnique(c *clientlib.Client, rule, prefix string, n int64, callers int, d time.Duration) (decided, undecided int64) {
	const batch = 16
	var next, dec, undec atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			checks := make([]clientlib.Check, batch)
			buf := make([]byte, 0, len(prefix)+10)
			for time.Now().Before(stop) {
				lo := (next.Add(1) - 1) * batch
				if lo >= n {
					return
				}
				k := min(batch, n-lo)
				for j := range k {
					buf = strconv.AppendInt(append(buf[:0], prefix...), 1_000_000_000+lo+j, 10)
					checks[j] = clientlib.Check{Rule: rule, Key: string(buf), Cost: 1}
				}
				if d := c.AllowAll(context.Background(), checks[:k]...); d.FailedOpen {
					undec.Add(k)
				} else {
					dec.Add(k)
				}
			}
		}()
	}
	wg.Wait()
	return dec.Load(), undec.Load()
}

// fillCallers and fillConns drive the fills: enough requests in flight to
// keep both of the daemon's connection goroutines busy.
const (
	fillCallers = 64
	fillConns   = 4
)

// BenchmarkDaemonMemory fills a daemon with N idle keys (each in debt for an
// hour, so the sweep keeps them) and reports what holding them costs, as
// seen from outside the process: its resident set (VmRSS) and its Go heap
// (from /metrics), before and after, per key. Nothing inside the daemon is
// triggered, so the heap after the fill also holds whatever garbage the last
// collection left (the map's outgrown tables): bytes/key is an upper bound
// on the live bytes, loose at 10k keys where that garbage is a large share.
// Run it with -benchtime 1x: every iteration starts a daemon.
func BenchmarkDaemonMemory(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000, 5_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			for range b.N {
				p := launch(b, false, "--max-keys", strconv.Itoa(2*n)) // 2n: no shard reaches its share of the cap
				c := p.dial(b, fillConns)
				idleRSS := p.rssBytes(b)
				idle := p.metrics(b, "go_memstats_heap_alloc_bytes")
				start := time.Now()
				decided, undecided := sendUnique(c, "idle", "user-", int64(n), fillCallers, 2*time.Minute)
				took := time.Since(start)
				if undecided > 0 || decided != int64(n) {
					b.Fatalf("sent %d of %d keys in %v, %d undecided", decided+undecided, n, took.Round(time.Millisecond), undecided)
				}
				rss := p.rssBytes(b)
				after := p.metrics(b, "go_memstats_heap_alloc_bytes", "go_memstats_heap_inuse_bytes", "sluice_active_keys", "sluice_evictions_total")
				if held, evicted := int(after[2]), after[3]; held != n || evicted != 0 {
					b.Fatalf("daemon holds %d keys of %d, evicted %v", held, n, evicted)
				}
				c.Close()
				p.stop()
				b.ReportMetric(rss/(1<<20), "rss-MB")
				b.ReportMetric(idleRSS/(1<<20), "idle-rss-MB")
				b.ReportMetric(after[0]/(1<<20), "heap-MB")
				b.ReportMetric(after[1]/(1<<20), "heap-inuse-MB")
				b.ReportMetric((after[0]-idle[0])/float64(n), "bytes/key")
				b.ReportMetric((rss-idleRSS)/float64(n), "rss-bytes/key")
				b.ReportMetric(float64(n)/took.Seconds(), "keys/s")
			}
		})
	}
}

// BenchmarkUniqueKeyFlood sends never-repeated idle keys, 16 to a request,
// as fast as the callers can, at a daemon with its default cap, for
// floodFor, and samples the keys it holds and its RSS meanwhile: both must
// level off at the cap however many keys arrive. Every key is in debt, so
// the sweep frees nothing and the cap alone holds the line. Run it with
// -benchtime 1x.
//
// With IPCBENCH_PROFILE_DIR set, the daemon's CPU profile of the flood's
// second half is written there.
func BenchmarkUniqueKeyFlood(b *testing.B) {
	const (
		maxKeys  = 1 << 20 // sluiced's default --max-keys
		floodFor = 10 * time.Second
		most     = 50_000_000 // keys offered at most: 5M/s for floodFor
		every    = 200 * time.Millisecond
	)
	for range b.N {
		prof := profilePath(b.Name())
		p := launch(b, prof != "", "--max-keys", strconv.Itoa(maxKeys))
		c := p.dial(b, fillConns)
		var held, rssMax float64
		var sampleErr error
		sample := func() { // on the sampler's goroutine, then on the benchmark's
			m, err := p.scrape("sluice_active_keys")
			rss, rerr := p.rss()
			if err = cmp.Or(err, rerr); err != nil {
				sampleErr = cmp.Or(sampleErr, err)
				return
			}
			held, rssMax = max(held, m[0]), max(rssMax, rss)
		}
		stop, sampled := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					sample()
				}
			}
		}()
		var waitProfile func()
		if prof != "" { // the second half, at the cap
			waitProfile = p.profile(b, floodFor/2, floodFor/2, prof)
		}
		cpu0, self0, start := p.cpuTime(b), procCPU(b, "/proc/self/stat"), time.Now()
		decided, undecided := sendUnique(c, "idle", "flood-", most, fillCallers, floodFor)
		took := time.Since(start)
		cpu, self := p.cpuTime(b)-cpu0, procCPU(b, "/proc/self/stat")-self0
		close(stop)
		<-sampled
		sample()
		if waitProfile != nil {
			waitProfile()
		}
		end := p.rssBytes(b)
		c.Close()
		p.stop()
		if sampleErr != nil {
			b.Fatal(sampleErr)
		}
		if undecided > 0 {
			b.Errorf("%d of %d checks undecided", undecided, decided+undecided)
		}
		if held > maxKeys {
			b.Errorf("daemon held %v keys, over its cap of %d", held, maxKeys)
		}
		b.ReportMetric(float64(decided)/took.Seconds(), "keys/s")
		b.ReportMetric(held, "max-held-keys")
		b.ReportMetric(maxKeys, "cap")
		b.ReportMetric(rssMax/(1<<20), "rss-max-MB")
		b.ReportMetric(end/(1<<20), "rss-end-MB")
		b.ReportMetric(100*cpu.Seconds()/took.Seconds(), "daemon-cpu-%")
		b.ReportMetric(100*self.Seconds()/took.Seconds(), "client-cpu-%")
	}
}
