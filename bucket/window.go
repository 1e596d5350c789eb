package bucket

import (
	"math"
	"math/bits"
	"time"
)

// FixedWindow counts requests in windows of one Period aligned to the Unix
// epoch, and admits while the current window's count plus the request's cost
// stays within Count. Every node cuts time at the same instants (clocks kept
// by NTP), so windows mean the same across a cluster, and a day is a UTC day.
//
// Its weakness is the boundary: a client can spend a whole window's Count
// just before a boundary and another just after, twice the limit within one
// Period. SlidingWindow and SlidingLog prevent that.
//
// State: full is the end of the window counted, cur its count (saturating at
// 2³²−1). Its zero value holds no count.
type FixedWindow state

// Take admits and charges a request if the window has room for its cost.
func (w *FixedWindow) Take(lim Limit, cost int64, now time.Time) Result {
	r, _ := w.decide(lim, cost, 0, true, now.UnixNano())
	return r
}

// Check reports what Take would decide, without charging.
func (w *FixedWindow) Check(lim Limit, cost int64, now time.Time) Result {
	r, _ := w.decide(lim, cost, 0, false, now.UnixNano())
	return r
}

// Charge counts cost in the current window unconditionally.
func (w *FixedWindow) Charge(lim Limit, cost int64, now time.Time) {
	w.charge(lim, cost, 0, now.UnixNano())
}

// Balance is Count less the current window's count.
func (w *FixedWindow) Balance(lim Limit, now time.Time) float64 {
	n := now.UnixNano()
	_, end := windowAt(n, int64(lim.period))
	return float64(lim.count - w.count(end))
}

// windowAt returns the number of the window of length span holding n, and
// when it ends.
func windowAt(n, span int64) (window, end int64) {
	window = floorDiv(n, span)
	return window, (window + 1) * span
}

// count is the current window's count, given the window's end.
func (w *FixedWindow) count(end int64) int64 {
	if w.full == end {
		return int64(w.cur)
	}
	return 0 // the state counts an earlier window (or none)
}

func (w *FixedWindow) decide(lim Limit, cost, over int64, commit bool, n int64) (Result, bool) {
	_, end := windowAt(n, int64(lim.period))
	count := w.count(end)
	if count+cost <= lim.count+over {
		if commit {
			w.full, w.cur = end, addSat32(uint32(count), cost)
		}
		return Result{Allowed: true, Limit: lim.count, Remaining: max(0, lim.count-count-cost), ResetAfter: time.Duration(end - n)}, count+cost > lim.count
	}
	r := Result{Limit: lim.count, Remaining: max(0, lim.count-count), RetryAfter: time.Duration(end - n), ResetAfter: time.Duration(end - n)}
	return r, false
}

// charge counts cost in window (as windowIndex numbers them; 0: the current
// one). Counts of past windows are dropped: they no longer matter. A window
// ahead of this node's clock counts in the current one.
func (w *FixedWindow) charge(lim Limit, cost int64, window uint64, n int64) {
	cw, end := windowAt(n, int64(lim.period))
	if window != 0 && int64(window-1) < cw {
		return
	}
	w.cur = addSat32(uint32(w.count(end)), cost)
	w.full = end
}

// adopt raises the current window's count to a peer's, if the peer counted
// the same window and more.
func (w *FixedWindow) adopt(lim Limit, window uint64, balance float64, n int64) bool {
	cw, end := windowAt(n, int64(lim.period))
	peer := int64(math.Ceil(float64(lim.count) - balance))
	if int64(window-1) != cw || peer <= w.count(end) {
		return false
	}
	w.full, w.cur = end, addSat32(0, peer)
	return true
}

// rescale keeps the current count across a limit change; when the period
// changes it carries the count into the new period's current window.
func (w *FixedWindow) rescale(old, new Limit, n int64) {
	if old.period == new.period {
		return
	}
	_, oldEnd := windowAt(n, int64(old.period))
	count := w.count(oldEnd)
	*w = FixedWindow{}
	if count > 0 {
		_, w.full = windowAt(n, int64(new.period))
		w.cur = uint32(count)
	}
}

// SlidingWindow approximates a rolling window of one Period from two fixed
// windows' counts: the previous window's count, weighted by the share of it
// the rolling window still covers, plus the current window's count. It
// admits while that estimate plus the request's cost stays within Count.
// The estimate assumes the previous window's requests were spread evenly, so
// it can be off either way when they were not; it never lets a client spend
// two windows' worth across a boundary as a fixed window does, in 16 bytes.
//
// State: full is the end of the window after the one counted, cur and prev
// the counted window's and the one before's counts. Its zero value holds no
// count.
type SlidingWindow state

// Take admits and charges a request if the estimate has room for its cost.
func (w *SlidingWindow) Take(lim Limit, cost int64, now time.Time) Result {
	r, _ := w.decide(lim, cost, 0, true, now.UnixNano())
	return r
}

// Check reports what Take would decide, without charging.
func (w *SlidingWindow) Check(lim Limit, cost int64, now time.Time) Result {
	r, _ := w.decide(lim, cost, 0, false, now.UnixNano())
	return r
}

// Charge counts cost in the current window unconditionally.
func (w *SlidingWindow) Charge(lim Limit, cost int64, now time.Time) {
	w.charge(lim, cost, 0, now.UnixNano())
}

// Balance is Count less the estimate.
func (w *SlidingWindow) Balance(lim Limit, now time.Time) float64 {
	n := now.UnixNano()
	cw, _ := windowAt(n, int64(lim.period))
	cur, prev := w.counts(int64(lim.period), cw)
	return float64(lim.count) - estimate(cur, prev, n-cw*int64(lim.period), int64(lim.period))
}

// counts returns the current and previous windows' counts at window cw.
func (w *SlidingWindow) counts(span, cw int64) (cur, prev int64) {
	switch w.full {
	case (cw + 2) * span: // the state counts window cw
		return int64(w.cur), int64(w.prev)
	case (cw + 1) * span: // the state counts window cw−1
		return 0, int64(w.cur)
	}
	return 0, 0
}

// estimate is the rolling window's count, elapsed into the current window.
func estimate(cur, prev, elapsed, span int64) float64 {
	return float64(prev)*(1-float64(elapsed)/float64(span)) + float64(cur)
}

func (w *SlidingWindow) decide(lim Limit, cost, over int64, commit bool, n int64) (Result, bool) {
	span := int64(lim.period)
	cw, end := windowAt(n, span)
	cur, prev := w.counts(span, cw)
	elapsed := n - cw*span
	est := estimate(cur, prev, elapsed, span)
	ceiling := lim.count + over
	if slidingFits(cur, prev, elapsed, span, cost, ceiling) {
		if commit {
			w.full, w.cur, w.prev = end+span, addSat32(uint32(cur), cost), uint32(prev)
		}
		r := Result{Allowed: true, Limit: lim.count, Remaining: max(0, int64(float64(lim.count)-est)-cost), ResetAfter: time.Duration(end + span - n)}
		return r, !slidingFits(cur, prev, elapsed, span, cost, lim.count)
	}
	r := Result{Limit: lim.count, Remaining: max(0, int64(float64(lim.count)-est)), ResetAfter: time.Duration(end - n)}
	if cur > 0 {
		r.ResetAfter += time.Duration(span)
	}
	r.RetryAfter = time.Duration(max(1, slidingRoomAt(cur, prev, span, cost, ceiling)-elapsed))
	return r, false
}

// slidingFits reports whether, elapsed into the current window, the
// estimate plus cost stays within ceiling. It decides in integers, scaled by
// span: prev·(span − elapsed) + (cur + cost)·span ≤ ceiling·span, so that
// slidingRoomAt can name the first nanosecond at which it holds. (In floating
// point the two disagreed by a nanosecond either way.)
func slidingFits(cur, prev, elapsed, span, cost, ceiling int64) bool {
	room := ceiling - cur - cost
	if room < 0 {
		return false
	}
	lh, ll := bits.Mul64(uint64(prev), uint64(span-elapsed))
	rh, rl := bits.Mul64(uint64(room), uint64(span))
	return lh < rh || lh == rh && ll <= rl
}

// slidingRoomAt is the first instant, in nanoseconds from the start of the
// current window, at which slidingFits holds for a request that does not fit
// now.
func slidingRoomAt(cur, prev, span, cost, ceiling int64) int64 {
	if room := ceiling - cur - cost; room >= 0 {
		// Within this window, as the previous window's weight falls:
		// prev·(span − at) ≤ room·span. prev > room, or it would fit now.
		return span - mulDivFloor(span, room, prev)
	}
	// In the next window, where cur becomes the weighted previous count:
	// cur·(span − e) ≤ (ceiling − cost)·span, and cur > ceiling − cost.
	room := ceiling - cost
	if room < 0 || cur == 0 {
		return 2 * span // the cost exceeds the ceiling: it never fits
	}
	return 2*span - mulDivFloor(span, room, cur)
}

// mulDivFloor is ⌊a·b/c⌋ for a, b ≥ 0, c > 0 and b ≤ c.
func mulDivFloor(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

// charge counts cost in window (as windowIndex numbers them; 0: the current
// one): the current or the previous window; older ones no longer matter. A
// window ahead of this node's clock counts in the current one.
func (w *SlidingWindow) charge(lim Limit, cost int64, window uint64, n int64) {
	span := int64(lim.period)
	cw, end := windowAt(n, span)
	if window != 0 && int64(window-1) < cw-1 {
		return
	}
	cur, prev := w.counts(span, cw)
	w.full, w.cur, w.prev = end+span, uint32(cur), uint32(prev)
	if window != 0 && int64(window-1) == cw-1 {
		w.prev = addSat32(w.prev, cost)
	} else {
		w.cur = addSat32(w.cur, cost)
	}
}

// adopt raises the estimate to a peer's, if the peer's is higher in the same window.
func (w *SlidingWindow) adopt(lim Limit, window uint64, balance float64, n int64) bool {
	span := int64(lim.period)
	cw, end := windowAt(n, span)
	cur, prev := w.counts(span, cw)
	mine := float64(lim.count) - estimate(cur, prev, n-cw*span, span)
	if int64(window-1) != cw || balance >= mine {
		return false
	}
	w.full, w.cur, w.prev = end+span, addSat32(uint32(cur), int64(math.Ceil(mine-balance))), uint32(prev)
	return true
}

// rescale keeps the counts across a limit change; when the period changes it
// carries the estimate into the new period's current window.
func (w *SlidingWindow) rescale(old, new Limit, n int64) {
	if old.period == new.period {
		return
	}
	ospan := int64(old.period)
	cw, _ := windowAt(n, ospan)
	cur, prev := w.counts(ospan, cw)
	est := int64(math.Ceil(estimate(cur, prev, n-cw*ospan, ospan)))
	*w = SlidingWindow{}
	if est > 0 {
		_, end := windowAt(n, int64(new.period))
		w.full, w.cur = end+int64(new.period), addSat32(0, est)
	}
}

// addSat32 adds cost to a window count, saturating at the largest uint32.
func addSat32(c uint32, cost int64) uint32 {
	return uint32(min(int64(c)+max(cost, 0), math.MaxUint32))
}
