package bucket

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkKeyLengthMemory reports the heap held per idle key at 10k, 100k
// and 1M keys, for short keys (15 bytes, as BenchmarkIdleKeyMemory) and for the
// longest a default daemon accepts (DefaultMaxKeyLen, 256 bytes), alone and
// with the consumption tracking a clustered daemon keeps. The README's
// memory table must hold for the longest keys.
func BenchmarkKeyLengthMemory(b *testing.B) {
	lim := MustLimit(1, time.Hour, 10)
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		for _, keyLen := range []int{15, DefaultMaxKeyLen} {
			for _, track := range []bool{false, true} {
				b.Run(fmt.Sprintf("keys=%d/keylen=%d/tracking=%v", n, keyLen, track), func(b *testing.B) {
					for range b.N {
						var before, after runtime.MemStats
						runtime.GC()
						runtime.ReadMemStats(&before)
						s := NewStore(StoreConfig{MaxKeys: 2 * n, TrackConsumption: track})
						key := make([]byte, keyLen)
						for i := range key {
							key[i] = 'k'
						}
						for i := range n {
							copy(key[keyLen-10:], fmt.Appendf(nil, "%010d", i))
							s.Take(1, key, lim, 1, t0)
						}
						s.DrainDirty(func(Consumption) {})
						runtime.GC()
						runtime.ReadMemStats(&after)
						if s.Len() != n {
							b.Fatalf("held %d keys", s.Len())
						}
						b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "bytes/key")
						b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MB")
						runtime.KeepAlive(s)
					}
				})
			}
		}
	}
}

// BenchmarkSlidingLogBudgetMemory reports the heap held per key by 100k
// keys that each logged 64 requests under a sliding log of 10,000 per hour,
// with the default log budget and with one too large to matter.
func BenchmarkSlidingLogBudgetMemory(b *testing.B) {
	const n, requests = 100_000, 64
	lim := MustLimitOf(AlgoSlidingLog, MaxLogLimit, time.Hour, 0)
	for _, budget := range []int64{DefaultMaxLogBytes, 1 << 40} {
		b.Run(fmt.Sprintf("budget=%d", budget), func(b *testing.B) {
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				s := NewStore(StoreConfig{MaxKeys: 2 * n, MaxLogBytes: budget})
				key := []byte("user-0000000000")
				for i := range n {
					copy(key[5:], fmt.Appendf(nil, "%010d", i))
					for j := range requests {
						s.Take(1, key, lim, 1, at(time.Duration(j)*time.Millisecond))
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				used, _, refused := s.LogStats()
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/key")
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MB")
				b.ReportMetric(float64(used)/(1<<20), "log-MB")
				b.ReportMetric(float64(refused), "growth-refused")
				runtime.KeepAlive(s)
			}
		})
	}
}
