package ipcbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluicelabs/sluice/clientlib"
)

// The daemon under test runs as a separate process built from cmd/sluiced,
// as it ships. Rules give every key far more tokens than the benchmark can
// spend, so both sides measure admitted decisions.
const rules = "rules:\n  bench:\n    rate: 1000000000/1s\n"

var sluicedBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ipcbench")
	if err != nil {
		panic(err)
	}
	sluicedBin = filepath.Join(dir, "sluiced")
	build := exec.Command("go", "build", "-o", sluicedBin, "./cmd/sluiced")
	build.Dir = "../.." // the main module, with its own go.sum
	if out, err := build.CombinedOutput(); err != nil {
		panic(fmt.Sprintf("build sluiced: %v\n%s", err, out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type daemonProc struct {
	cmd  *exec.Cmd
	sock string
}

func startSluiced(tb testing.TB, extra ...string) *daemonProc {
	tb.Helper()
	dir, err := os.MkdirTemp("", "sb")
	if err != nil {
		tb.Fatal(err)
	}
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte(rules), 0o600)
	sock := filepath.Join(dir, "d.sock")
	cmd := exec.Command(sluicedBin, append([]string{"--socket", sock, "--rules", rulesPath, "--log-level", "warn"}, extra...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	})
	deadline := time.After(20 * time.Second)
	poll := time.NewTicker(2 * time.Millisecond)
	defer poll.Stop()
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case <-deadline:
			tb.Fatal("sluiced did not create its socket within 20s")
		case <-poll.C:
		}
	}
	return &daemonProc{cmd: cmd, sock: sock}
}

func dialSluice(tb testing.TB, sock string) *clientlib.Client {
	c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sock, Timeout: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

var keys = func() []string {
	k := make([]string, 1000)
	for i := range k {
		k[i] = "user-" + strconv.Itoa(i)
	}
	return k
}()

// measure runs n decisions split over callers goroutines, records every
// latency, and reports p50/p99/p999 and decisions per second.
func measure(b *testing.B, callers int, decide func(ctx context.Context, key string) error) {
	ctx := context.Background()
	for range 200 { // warm connections and pools
		if err := decide(ctx, "warm"); err != nil {
			b.Fatal(err)
		}
	}
	per := b.N/callers + 1
	lat := make([][]time.Duration, callers)
	for i := range lat {
		lat[i] = make([]time.Duration, 0, per)
	}
	var failed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				t0 := time.Now()
				if err := decide(ctx, keys[(g*per+i)%len(keys)]); err != nil {
					failed.Add(1)
				}
				lat[g] = append(lat[g], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d decisions failed", f, per*callers)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(0.999), "p999-µs")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "decisions/s")
}

func BenchmarkRoundTrip(b *testing.B) {
	d := startSluiced(b)
	sluice := dialSluice(b, d.sock)
	var limiter *redis_rate.Limiter
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 256})
		b.Cleanup(func() { rdb.Close() })
		if err := rdb.FlushDB(context.Background()).Err(); err != nil {
			b.Fatalf("redis at %s: %v", addr, err)
		}
		limiter = redis_rate.NewLimiter(rdb)
	}
	for _, callers := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("callers=%d/impl=sluice", callers), func(b *testing.B) {
			measure(b, callers, func(ctx context.Context, key string) error {
				if d := sluice.Allow(ctx, "bench", key); d.FailedOpen {
					return d.Err
				}
				return nil
			})
		})
		b.Run(fmt.Sprintf("callers=%d/impl=redis_rate", callers), func(b *testing.B) {
			if limiter == nil {
				b.Skip("REDIS_ADDR not set; run scripts/bench.sh")
			}
			limit := redis_rate.PerSecond(1_000_000_000)
			measure(b, callers, func(ctx context.Context, key string) error {
				_, err := limiter.Allow(ctx, key, limit)
				return err
			})
		})
	}
}
