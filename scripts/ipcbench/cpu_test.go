package ipcbench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// pace offers rate checks per second, batch distinct keys to a request,
// from callers goroutines that each keep their own schedule, for d. A caller
// that falls behind sends at once until it is back on schedule, and gives up
// what is left of it at 2d, so the offered load is fixed in count and the
// run bounded in time. It returns the checks the daemon decided and did not
// decide, and how long the callers took.
func pace(c *clientlib.Client, rate, batch, callers int, d time.Duration) (decided, undecided int64, took time.Duration) {
	interval := time.Duration(float64(time.Second) * float64(batch*callers) / float64(rate))
	per := int(d / interval)
	var dec, undec atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	giveUp := start.Add(2 * d)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			checks := make([]clientlib.Check, batch)
			due := start.Add(interval * time.Duration(g) / time.Duration(callers)) // callers spread over one interval
			pace := time.NewTimer(0)
			defer pace.Stop()
			<-pace.C
			for i := range per {
				if wait := time.Until(due); wait > 0 {
					pace.Reset(wait) // paced: the next call is due then
					<-pace.C
				} else if time.Now().After(giveUp) {
					return
				}
				for j := range checks {
					checks[j] = clientlib.Check{Rule: "bench", Key: keys[((g*per+i)*batch+j)%len(keys)], Cost: 1}
				}
				if r := c.AllowAll(context.Background(), checks...); r.FailedOpen {
					undec.Add(int64(batch))
				} else {
					dec.Add(int64(batch))
				}
				due = due.Add(interval)
			}
		}()
	}
	wg.Wait()
	return dec.Load(), undec.Load(), time.Since(start)
}

// BenchmarkDaemonCPU offers the daemon a fixed rate of decisions on 1000
// keys, from paced callers sharing one client as an application would, and
// reports the CPU the daemon process used (user and system time from
// /proc/PID/stat), as a share of one core, and that share per 10,000
// decisions per second. Run it with -benchtime 1x.
//
// With IPCBENCH_PROFILE_DIR set, the daemon runs with --pprof and its CPU
// profile of each measured window is written there.
func BenchmarkDaemonCPU(b *testing.B) {
	const (
		callers = 64
		warm    = time.Second
		measure = 5 * time.Second
	)
	for _, tc := range []struct{ rate, batch int }{
		{10_000, 1}, {50_000, 1}, {100_000, 1}, {100_000, 16},
	} {
		b.Run(fmt.Sprintf("rate=%d/batch=%d", tc.rate, tc.batch), func(b *testing.B) {
			for range b.N {
				prof := profilePath(b.Name())
				p := launch(b, prof != "")
				c := p.dial(b, 0) // the client's default connections
				pace(c, tc.rate, tc.batch, callers, warm)
				var waitProfile func()
				if prof != "" {
					waitProfile = p.profile(b, 0, measure, prof)
				}
				cpu0 := p.cpuTime(b)
				decided, undecided, took := pace(c, tc.rate, tc.batch, callers, measure)
				cpu := p.cpuTime(b) - cpu0
				if waitProfile != nil {
					waitProfile()
				}
				c.Close()
				p.stop()
				if undecided > 0 {
					b.Errorf("%d of %d checks undecided", undecided, decided+undecided)
				}
				achieved := float64(decided) / took.Seconds()
				pct := 100 * cpu.Seconds() / took.Seconds()
				b.ReportMetric(achieved, "achieved/s")
				b.ReportMetric(pct, "cpu-%")
				b.ReportMetric(pct/(achieved/10_000), "cpu-%-per-10k/s")
			}
		})
	}
}
