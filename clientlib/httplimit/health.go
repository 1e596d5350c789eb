package httplimit

import (
	"math/bits"
	"sync"
	"time"
)

// health measures the upstream over a sliding window: request count, errors
// (5xx) and a latency histogram, kept in slots that expire in turn, so the
// p99 and error rate always describe roughly the last window.
type health struct {
	mu    sync.Mutex
	slot  time.Duration
	slots [healthSlots]healthSlot
	now   func() time.Time
}

const (
	healthSlots = 10
	latBuckets  = 40 // power-of-two microsecond buckets: 1 µs .. ~9 min
)

type healthSlot struct {
	start  time.Time
	total  int64
	errors int64
	lat    [latBuckets]int64
}

func newHealth(window time.Duration, now func() time.Time) *health {
	return &health{slot: max(window/healthSlots, time.Millisecond), now: now}
}

// current returns the slot for now, recycling it if it is stale. Caller holds mu.
func (h *health) current(now time.Time) *healthSlot {
	idx := int(now.UnixNano()/int64(h.slot)) % healthSlots
	s := &h.slots[idx]
	start := now.Truncate(h.slot)
	if !s.start.Equal(start) {
		*s = healthSlot{start: start}
	}
	return s
}

func latBucket(d time.Duration) int {
	us := uint64(max(d.Microseconds(), 1))
	return min(bits.Len64(us), latBuckets-1)
}

func (h *health) observe(latency time.Duration, status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.current(h.now())
	s.total++
	if status >= 500 {
		s.errors++
	}
	s.lat[latBucket(latency)]++
}

// stats returns the window's p99 latency (an upper bound, to the power of
// two), error rate and request count.
func (h *health) stats() (p99 time.Duration, errRate float64, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var lat [latBuckets]int64
	var errs int64
	for i := range h.slots {
		s := &h.slots[i]
		if now.Sub(s.start) >= h.slot*healthSlots {
			continue // stale
		}
		n += s.total
		errs += s.errors
		for b, c := range s.lat {
			lat[b] += c
		}
	}
	if n == 0 {
		return 0, 0, 0
	}
	want := (n*99 + 99) / 100
	var seen int64
	for b, c := range lat {
		seen += c
		if seen >= want {
			p99 = time.Duration(uint64(1)<<b) * time.Microsecond
			break
		}
	}
	return p99, float64(errs) / float64(n), n
}
