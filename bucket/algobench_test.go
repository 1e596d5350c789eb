package bucket

import (
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// The algorithms side by side, the token bucket (the default) first as the
// anchor: docs/ALGORITHMS.md gives each one's cost as a ratio to it, measured
// in the same run.
//
//	go test -run '^$' -bench 'BenchmarkAlgorithm' -benchmem -count 3 ./bucket

// benchLimitOf is count per period under algorithm a, with a burst of count
// for the buckets (the windows take none).
func benchLimitOf(a Algorithm, count int64, period time.Duration) Limit {
	burst := count
	if a.Windowed() {
		burst = 0
	}
	return MustLimitOf(a, count, period, burst)
}

// benchStep is how far the fake clock moves per decision: 1 µs, so that in a
// run of millions of decisions windows roll over and the log ages out, as
// they do in service.
const benchStep = time.Microsecond

// BenchmarkAlgorithm is one decision per algorithm:
//
//   - state/admit: one key's state alone at 10,000 per 5 ms (twice the
//     offered 1 per µs): nearly every request is admitted and charged, and a
//     sliding log holds about 5,000 entries;
//   - state/refuse: the same state at 1,000 per second: 999 in 1,000 are
//     refused (a sliding log holds 1,000 entries);
//   - store/keys=100000: Store.Take on keys drawn at random from 100k, each
//     limited to 100 per second (each key sees about 10 a second of fake
//     time), from one goroutine and from GOMAXPROCS (b.RunParallel).
//
// Each run first warms up untimed (two periods of fake time for one state,
// six seconds for the store), so a sliding log has grown its slices and what
// is timed is its steady state: 0 allocs/op and 0 B/op for every algorithm.
func BenchmarkAlgorithm(b *testing.B) {
	for _, a := range Algorithms() {
		b.Run("algo="+a.String()+"/state=admit", func(b *testing.B) {
			benchState(b, benchLimitOf(a, 10_000, 5*time.Millisecond))
		})
		b.Run("algo="+a.String()+"/state=refuse", func(b *testing.B) {
			benchState(b, benchLimitOf(a, 1_000, time.Second))
		})
	}
	const n = 100_000
	keys := makeKeys(n)
	for _, a := range Algorithms() {
		lim := benchLimitOf(a, 100, time.Second)
		for _, mode := range []string{"serial", "parallel"} {
			b.Run(fmt.Sprintf("algo=%s/store/keys=%d/mode=%s", a, n, mode), func(b *testing.B) {
				s := NewStore(StoreConfig{MaxKeys: 2 * n})
				// Warm-up: six seconds of fake time at one decision per µs,
				// some 60 requests a key: enough for a sliding log's slice
				// to reach its steady size (it compacts once 32 entries
				// have aged out).
				x := uint64(88172645463325252)
				now := t0
				for range 6 * int(time.Second/benchStep) {
					x = next(x)
					now = now.Add(benchStep)
					s.Take(1, keys[x%n], lim, 1, now)
				}
				if mode == "serial" {
					var admitted int
					b.ReportAllocs()
					for b.Loop() {
						x = next(x)
						now = now.Add(benchStep)
						if r, _ := s.Take(1, keys[x%n], lim, 1, now); r.Allowed {
							admitted++
						}
					}
					b.ReportMetric(float64(admitted)/float64(b.N), "admitted/op")
					return
				}
				// Each goroutine keeps its own clock and its own share of
				// the keys, so every key still sees time move forward.
				procs := uint64(runtime.GOMAXPROCS(0))
				var g, admitted atomic.Int64
				start := now
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					id := uint64(g.Add(1)-1) % procs
					x := (id + 1) * 0x9E3779B97F4A7C15
					now, mine := start, int64(0)
					for pb.Next() {
						x = next(x)
						now = now.Add(benchStep)
						if r, _ := s.Take(1, keys[(x%(n/procs))*procs+id], lim, 1, now); r.Allowed {
							mine++
						}
					}
					admitted.Add(mine)
				})
				b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
			})
		}
	}
}

// benchState times Take on one key's state of lim's algorithm, each call on
// the concrete type (as the store's dispatch makes it), the clock moving
// benchStep per decision. It reports the share admitted.
func benchState(b *testing.B, lim Limit) {
	warm := 2 * int(lim.period/benchStep)
	now := t0
	admitted := 0
	// One loop per algorithm, so that each Take is a direct call, not a call
	// through the Limiter interface the token bucket would not pay in service.
	switch lim.algo {
	case AlgoTokenBucket:
		var s Bucket
		for range warm {
			now = now.Add(benchStep)
			s.Take(lim, 1, now)
		}
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(benchStep)
			if s.Take(lim, 1, now).Allowed {
				admitted++
			}
		}
	case AlgoLeakyBucket:
		var s LeakyBucket
		for range warm {
			now = now.Add(benchStep)
			s.Take(lim, 1, now)
		}
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(benchStep)
			if s.Take(lim, 1, now).Allowed {
				admitted++
			}
		}
	case AlgoGCRA:
		var s GCRA
		for range warm {
			now = now.Add(benchStep)
			s.Take(lim, 1, now)
		}
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(benchStep)
			if s.Take(lim, 1, now).Allowed {
				admitted++
			}
		}
	case AlgoFixedWindow:
		var s FixedWindow
		for range warm {
			now = now.Add(benchStep)
			s.Take(lim, 1, now)
		}
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(benchStep)
			if s.Take(lim, 1, now).Allowed {
				admitted++
			}
		}
	case AlgoSlidingWindow:
		var s SlidingWindow
		for range warm {
			now = now.Add(benchStep)
			s.Take(lim, 1, now)
		}
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(benchStep)
			if s.Take(lim, 1, now).Allowed {
				admitted++
			}
		}
	case AlgoSlidingLog:
		var s SlidingLog
		for range warm {
			now = now.Add(benchStep)
			s.Take(lim, 1, now)
		}
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(benchStep)
			if s.Take(lim, 1, now).Allowed {
				admitted++
			}
		}
	default:
		b.Fatalf("no benchmark for %s", lim.algo)
	}
	b.ReportMetric(float64(admitted)/float64(b.N), "admitted/op")
}

// BenchmarkAlgorithmKeyMemory reports the heap held per idle key, with 100k
// keys, alone and with the consumption tracking a clustered daemon keeps.
// Each key has admitted one request under 10 per hour, so none has refilled
// or aged out. A sliding log's memory grows with what it remembers, so it is
// also measured with its log full (10 requests under 10 per hour, and 100
// under 100 per hour), and in steady use: 60 requests 100 ms apart under 10
// per second, the last 10 still in the rolling window, as a key used at its
// limit for a while holds them.
func BenchmarkAlgorithmKeyMemory(b *testing.B) {
	type variant struct {
		name     string
		lim      Limit
		requests int           // per key
		spacing  time.Duration // between a key's requests
	}
	var vs []variant
	for _, a := range Algorithms() {
		vs = append(vs, variant{"algo=" + a.String(), benchLimitOf(a, 10, time.Hour), 1, 0})
	}
	for _, count := range []int{10, 100} {
		vs = append(vs, variant{fmt.Sprintf("algo=%s/limit=%d/full", AlgoSlidingLog, count), benchLimitOf(AlgoSlidingLog, int64(count), time.Hour), count, time.Millisecond})
	}
	vs = append(vs, variant{fmt.Sprintf("algo=%s/limit=10/steady", AlgoSlidingLog), benchLimitOf(AlgoSlidingLog, 10, time.Second), 60, 100 * time.Millisecond})
	const n = 100_000
	for _, v := range vs {
		for _, track := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/tracking=%v", v.name, track), func(b *testing.B) {
				for range b.N {
					var before, after runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&before)
					s := NewStore(StoreConfig{MaxKeys: 2 * n, TrackConsumption: track})
					key := []byte("user-0000000000")
					for i := range n {
						strconv.AppendInt(key[:5], int64(1_000_000_000+i), 10)
						for j := range v.requests {
							if r, _ := s.Take(1, key, v.lim, 1, at(time.Duration(j)*v.spacing)); !r.Allowed {
								b.Fatalf("request %d of key %d refused", j, i)
							}
						}
					}
					s.DrainDirty(func(Consumption) {}) // what gossip does every round
					runtime.GC()
					runtime.ReadMemStats(&after)
					if s.Len() != n {
						b.Fatalf("held %d keys", s.Len())
					}
					b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/key")
					runtime.KeepAlive(s)
				}
			})
		}
	}
}
