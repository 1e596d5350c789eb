package bucket

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The anchors: golang.org/x/time/rate's Limiter for a single bucket, and a
// mutex-guarded map of Limiters (what services hand-write) for keyed lookups.
// Both sides get the same injected times and the same keys.

func BenchmarkDecision(b *testing.B) {
	b.Run("impl=sluice", func(b *testing.B) {
		lim := MustLimit(1e9, time.Second, 1000)
		var bk Bucket
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Nanosecond)
			bk.Take(lim, 1, now)
		}
	})
	b.Run("impl=sluice-mutex", func(b *testing.B) {
		lim := MustLimit(1e9, time.Second, 1000)
		var mu sync.Mutex
		var bk Bucket
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Nanosecond)
			mu.Lock()
			bk.Take(lim, 1, now)
			mu.Unlock()
		}
	})
	b.Run("impl=x-time-rate", func(b *testing.B) {
		l := rate.NewLimiter(1e9, 1000)
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Nanosecond)
			l.AllowN(now, 1)
		}
	})
}

// rateMap is the hand-written alternative: one mutex over a map of Limiters.
type rateMap struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (r *rateMap) allow(key []byte, now time.Time) bool {
	r.mu.Lock()
	l := r.m[string(key)]
	if l == nil {
		l = rate.NewLimiter(1000, 1000)
		r.m[string(key)] = l
	}
	r.mu.Unlock()
	return l.AllowN(now, 1)
}

func makeKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user-%010d", i)
	}
	return keys
}

// next is a xorshift step: cheap per-goroutine key choice without locks.
func next(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}

// appendKey writes key i as makeKeys spells it ("user-%010d") into buf: the
// benchmarks hand each request's key over in a buffer just written, as the
// daemon hands over a key it has just decoded from a request, so that what
// they time is the lookup and not the reading of a key list larger than the
// caches (which took two cache misses per request of its own, on both sides).
func appendKey(buf []byte, i uint64) []byte {
	buf = append(buf[:0], "user-0000000000"...)
	for j := len(buf) - 1; i > 0; j-- {
		buf[j] = byte('0' + i%10)
		i /= 10
	}
	return buf
}

// BenchmarkStore is a keyed lookup and decision: one hot key (every caller
// on one bucket, and in parallel on one shard lock), and keys drawn at random
// from 100k and 1M, each handed over in a buffer just written (appendKey).
func BenchmarkStore(b *testing.B) {
	for _, n := range []int{1, 100_000, 1_000_000} {
		keys := makeKeys(n)
		lim := MustLimit(1000, time.Second, 1000)
		store := NewStore(StoreConfig{MaxKeys: 2 * n})
		rm := &rateMap{m: make(map[string]*rate.Limiter, n)}
		for _, k := range keys {
			store.Take(1, k, lim, 1, t0)
			rm.allow(k, t0)
		}
		impls := []struct {
			name string
			op   func(key []byte, now time.Time)
		}{
			{"sluice", func(key []byte, now time.Time) { store.Take(1, key, lim, 1, now) }},
			{"x-time-rate-map", func(key []byte, now time.Time) { rm.allow(key, now) }},
		}
		for _, impl := range impls {
			b.Run(fmt.Sprintf("keys=%d/impl=%s/mode=serial", n, impl.name), func(b *testing.B) {
				x := uint64(88172645463325252)
				now := t0
				buf := make([]byte, 0, 16)
				b.ReportAllocs()
				for b.Loop() {
					x = next(x)
					now = now.Add(time.Nanosecond)
					buf = appendKey(buf, x%uint64(n))
					impl.op(buf, now)
				}
			})
			b.Run(fmt.Sprintf("keys=%d/impl=%s/mode=parallel", n, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				var seed sync.Mutex
				s := uint64(1)
				b.RunParallel(func(pb *testing.PB) {
					seed.Lock()
					s++
					x := s * 0x9E3779B97F4A7C15
					seed.Unlock()
					now := t0
					buf := make([]byte, 0, 16)
					for pb.Next() {
						x = next(x)
						now = now.Add(time.Nanosecond)
						buf = appendKey(buf, x%uint64(n))
						impl.op(buf, now)
					}
				})
			})
		}
	}
}

// BenchmarkStoreAtCap decides never-seen keys on a store at its cap whose
// buckets are all in debt, as in a flood of unique keys: every new key
// evicts one from a sampled few. path=take is a request of one check;
// path=check-charge is what a request of several checks does for each
// (Check, then Charge once all admit).
func BenchmarkStoreAtCap(b *testing.B) {
	const maxKeys = DefaultMaxKeys
	lim := MustLimit(1, time.Hour, 1)
	fill := func(s *Store) {
		for i := range maxKeys + maxKeys/2 { // past the cap: every shard is full
			s.Take(1, strconv.AppendInt([]byte("fill-"), int64(i), 10), lim, 1, t0)
		}
	}
	for _, path := range []string{"take", "check-charge"} {
		b.Run("path="+path+"/mode=serial", func(b *testing.B) {
			s := NewStore(StoreConfig{MaxKeys: maxKeys})
			fill(s)
			key := []byte("flood-0000000000")
			i := int64(0)
			b.ReportAllocs()
			for b.Loop() {
				i++
				k := strconv.AppendInt(key[:6], 1_000_000_000+i, 10)
				if path == "take" {
					s.Take(1, k, lim, 1, t0)
				} else {
					s.Check(1, k, lim, 1, t0)
					s.Charge(1, k, lim, 1, t0)
				}
			}
			if s.Len() > s.Capacity() {
				b.Fatalf("held %d keys, cap %d", s.Len(), s.Capacity())
			}
		})
	}
	// New keys from every core at once: can the store itself take a flood of
	// a million new keys a second and stay at its cap?
	b.Run("path=take/mode=parallel", func(b *testing.B) {
		s := NewStore(StoreConfig{MaxKeys: maxKeys})
		fill(s)
		var next atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			key := []byte("flood-0000000000")
			for pb.Next() {
				s.Take(1, strconv.AppendInt(key[:6], 1_000_000_000+next.Add(1), 10), lim, 1, t0)
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "new-keys/s")
		if s.Len() > s.Capacity() {
			b.Fatalf("held %d keys, cap %d", s.Len(), s.Capacity())
		}
	})
}

// BenchmarkIdleKeyMemory reports the heap held per idle key with 1M keys,
// alone and with the consumption tracking a clustered daemon keeps.
func BenchmarkIdleKeyMemory(b *testing.B) {
	const n = 1_000_000
	lim := MustLimit(1, time.Hour, 10)
	for _, track := range []bool{false, true} {
		b.Run(fmt.Sprintf("tracking=%v", track), func(b *testing.B) {
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				s := NewStore(StoreConfig{MaxKeys: 2 * n, TrackConsumption: track})
				key := []byte("user-0000000000")
				for i := range n {
					strconv.AppendInt(key[:5], int64(1_000_000_000+i), 10)
					s.Take(1, key, lim, 1, t0)
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

func TestAppendKeySpellsAsMakeKeys(t *testing.T) {
	keys := makeKeys(1001)
	for _, i := range []int{0, 7, 1000} {
		if got := appendKey(nil, uint64(i)); string(got) != string(keys[i]) {
			t.Fatalf("appendKey(%d) = %q, makeKeys has %q", i, got, keys[i])
		}
	}
}
