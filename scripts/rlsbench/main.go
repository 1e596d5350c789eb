// Command rlsbench measures rate limit decisions as a service sees them:
// Envoy's RateLimitService over gRPC (sluiced's, envoyproxy/ratelimit's, any
// other) with the generated client, and Sluice's own Unix socket with
// clientlib, each at several caller counts, one after another in the same
// run. It prints a Markdown table: p50, p99 and decisions per second.
// Every limit should be far above what the run can spend, so every side
// measures admitted decisions. scripts/bench-rls.sh starts the services.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicelabs/sluice/clientlib"
)

type targets []string

func (t *targets) String() string     { return strings.Join(*t, ",") }
func (t *targets) Set(s string) error { *t = append(*t, s); return nil }

func main() {
	var grpcTargets targets
	flag.Var(&grpcTargets, "grpc", "NAME=TARGET of a rate limit service (unix:/path or host:port); repeatable")
	socket := flag.String("socket", "", "also measure sluiced's Unix socket with clientlib (rule -rule)")
	rule := flag.String("rule", "bench", "the rule checked on -socket")
	domain := flag.String("domain", "bench", "the domain asked of the rate limit services")
	callers := flag.String("callers", "1,64", "caller counts, comma-separated")
	dur := flag.Duration("duration", 5*time.Second, "how long each measurement runs")
	keys := flag.Int("keys", 64, "distinct descriptor values (keys) the callers spread over")
	flag.Parse()

	var counts []int
	for _, s := range strings.Split(*callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fail("-callers %q: want positive whole numbers", *callers)
		}
		counts = append(counts, n)
	}
	fmt.Println("| path | callers | p50 | p99 | decisions/s | errors | over limit |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, t := range grpcTargets {
		name, target, ok := strings.Cut(t, "=")
		if !ok {
			fail("-grpc %q: want NAME=TARGET", t)
		}
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fail("dial %s: %v", target, err)
		}
		c := rlsv3.NewRateLimitServiceClient(cc)
		reqs := make([]*rlsv3.RateLimitRequest, *keys)
		for i := range reqs {
			reqs[i] = &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t" + strconv.Itoa(i)}},
			}}}
		}
		for _, n := range counts {
			report(name+" (gRPC)", n, measure(n, *dur, func(ctx context.Context, i int) (bool, error) {
				r, err := c.ShouldRateLimit(ctx, reqs[i%len(reqs)])
				return r.GetOverallCode() == rlsv3.RateLimitResponse_OK, err
			}))
		}
		cc.Close()
	}
	if *socket != "" {
		c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: *socket, Timeout: time.Second})
		if err != nil {
			fail("dial %s: %v", *socket, err)
		}
		ks := make([]string, *keys)
		for i := range ks {
			ks[i] = "t" + strconv.Itoa(i)
		}
		for _, n := range counts {
			report("sluiced Unix socket (clientlib)", n, measure(n, *dur, func(ctx context.Context, i int) (bool, error) {
				d := c.Allow(ctx, *rule, ks[i%len(ks)])
				if d.FailedOpen {
					return true, fmt.Errorf("failed open")
				}
				return d.Allowed, nil
			}))
		}
		c.Close()
	}
}

type result struct {
	lat          []time.Duration
	took         time.Duration
	errors, over int
}

// measure runs n callers, each calling one at a time, for d.
func measure(n int, d time.Duration, call func(ctx context.Context, i int) (bool, error)) result {
	// Warm up connections and caches.
	for i := range 100 {
		call(context.Background(), i)
	}
	per := make([]result, n)
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &per[g]
			r.lat = make([]time.Duration, 0, 1<<16)
			for i := g; ; i += n {
				t0 := time.Now()
				if t0.After(end) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				ok, err := call(ctx, i)
				cancel()
				r.lat = append(r.lat, time.Since(t0))
				switch {
				case err != nil:
					r.errors++
				case !ok:
					r.over++
				}
			}
		}()
	}
	wg.Wait()
	var all result
	all.took = time.Since(start)
	for _, r := range per {
		all.lat = append(all.lat, r.lat...)
		all.errors += r.errors
		all.over += r.over
	}
	slices.Sort(all.lat)
	return all
}

func report(name string, n int, r result) {
	if len(r.lat) == 0 {
		fmt.Printf("| %s | %d | - | - | 0 | %d | %d |\n", name, n, r.errors, r.over)
		return
	}
	q := func(p float64) time.Duration { return r.lat[min(len(r.lat)-1, int(p*float64(len(r.lat))))] }
	fmt.Printf("| %s | %d | %v | %v | %.0f | %d | %d |\n", name, n, q(0.50).Round(time.Microsecond/10), q(0.99).Round(time.Microsecond/10),
		float64(len(r.lat))/r.took.Seconds(), r.errors, r.over)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rlsbench: "+format+"\n", args...)
	os.Exit(2)
}
