package bucket

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// MaxCost is the largest cost a single check or charge may carry.
const MaxCost = 1 << 32

// maxDebt caps how far into the future a bucket's full instant may be pushed,
// so absurd charges saturate instead of overflowing int64.
const maxDebt = int64(100 * 365 * 24 * time.Hour)

// Limit is a rate of Count tokens per Period with a capacity of Burst tokens,
// enforced by an Algorithm. Build one with NewLimit or NewLimitOf; the zero
// Limit is invalid. Limits compare equal with == when they mean the same.
type Limit struct {
	algo   Algorithm
	count  int64
	period time.Duration
	burst  int64

	nanosPerToken float64 // period / count
	burstNanos    int64   // burst × nanosPerToken: time to refill from empty to full
}

// ErrInvalidLimit is returned by NewLimit for non-positive counts, periods or bursts.
var ErrInvalidLimit = errors.New("invalid limit")

// NewLimit returns a token-bucket limit of count tokens per period, holding
// at most burst tokens.
func NewLimit(count int64, period time.Duration, burst int64) (Limit, error) {
	return NewLimitOf(AlgoTokenBucket, count, period, burst)
}

// MaxLogLimit is the largest Count a sliding log accepts: its memory per key
// grows with the count (see SlidingLog).
const MaxLogLimit = 10_000

// MaxWindowLimit is the largest Count a window algorithm accepts.
const MaxWindowLimit = math.MaxUint32 - 1

// NewLimitOf returns a limit of count per period enforced by algorithm a.
// For the buckets burst is the capacity; a window admits count per period,
// so burst must be count or 0 (meaning count).
func NewLimitOf(a Algorithm, count int64, period time.Duration, burst int64) (Limit, error) {
	if a >= numAlgorithms {
		return Limit{}, fmt.Errorf("%w: %s", ErrInvalidLimit, a)
	}
	if a.Windowed() {
		switch {
		case burst != 0 && burst != count:
			return Limit{}, fmt.Errorf("%w: %s admits count per period; a burst (%d) other than the count (%d) means nothing to it", ErrInvalidLimit, a, burst, count)
		case a == AlgoSlidingLog && count > MaxLogLimit:
			return Limit{}, fmt.Errorf("%w: sliding_log count %d exceeds %d (it remembers every request; use sliding_window)", ErrInvalidLimit, count, MaxLogLimit)
		case count > MaxWindowLimit:
			return Limit{}, fmt.Errorf("%w: %s count %d exceeds %d", ErrInvalidLimit, a, count, int64(MaxWindowLimit))
		case a == AlgoSlidingLog && period < logSubWindows:
			return Limit{}, fmt.Errorf("%w: sliding_log period %s is shorter than %dns", ErrInvalidLimit, period, logSubWindows)
		}
		burst = count
	}
	switch {
	case count <= 0:
		return Limit{}, fmt.Errorf("%w: count %d must be positive", ErrInvalidLimit, count)
	case period <= 0:
		return Limit{}, fmt.Errorf("%w: period %s must be positive", ErrInvalidLimit, period)
	case burst <= 0:
		return Limit{}, fmt.Errorf("%w: burst %d must be positive", ErrInvalidLimit, burst)
	case burst > MaxCost:
		return Limit{}, fmt.Errorf("%w: burst %d exceeds %d", ErrInvalidLimit, burst, int64(MaxCost))
	}
	npt := float64(period) / float64(count)
	bn := float64(burst) * npt
	if bn > float64(maxDebt) {
		return Limit{}, fmt.Errorf("%w: %d tokens at %d/%s take longer than 100 years to refill", ErrInvalidLimit, burst, count, period)
	}
	return Limit{algo: a, count: count, period: period, burst: burst, nanosPerToken: npt, burstNanos: int64(math.Round(bn))}, nil
}

// MustLimit is NewLimit for constants known to be valid; it panics otherwise.
func MustLimit(count int64, period time.Duration, burst int64) Limit {
	l, err := NewLimit(count, period, burst)
	if err != nil {
		panic(err)
	}
	return l
}

// Algorithm is the algorithm enforcing the limit.
func (l Limit) Algorithm() Algorithm { return l.algo }

// Count is the number of tokens added per Period.
func (l Limit) Count() int64 { return l.count }

// Period is the interval over which Count tokens are added.
func (l Limit) Period() time.Duration { return l.period }

// Burst is the bucket's capacity: the most tokens it can hold. For the
// window algorithms it equals Count.
func (l Limit) Burst() int64 { return l.burst }

// IsZero reports whether l is the zero (invalid) Limit.
func (l Limit) IsZero() bool { return l.count == 0 }

// PerSecond is the refill rate in tokens per second.
func (l Limit) PerSecond() float64 { return float64(time.Second) / l.nanosPerToken }

// String formats l as "count/period burst N", e.g. "100/1s burst 100",
// followed by the algorithm unless it is the token bucket; a window has no
// burst: "1000/24h0m0s fixed_window".
func (l Limit) String() string {
	switch {
	case l.algo == AlgoTokenBucket:
		return fmt.Sprintf("%d/%s burst %d", l.count, l.period, l.burst)
	case l.algo.Windowed():
		return fmt.Sprintf("%d/%s %s", l.count, l.period, l.algo)
	}
	return fmt.Sprintf("%d/%s burst %d %s", l.count, l.period, l.burst, l.algo)
}

// costNanos is how far cost tokens move a bucket's full instant, saturating at
// maxDebt. It truncates, so sub-nanosecond rounding never denies a request that
// exact arithmetic would admit.
func (l Limit) costNanos(cost int64) int64 {
	f := float64(cost) * l.nanosPerToken
	if f >= float64(maxDebt) {
		return maxDebt
	}
	return int64(f)
}

// tokens is how many whole tokens a span of refill time holds, as Take
// counts them: the largest c with costNanos(c) ≤ nanos, so that a Result
// never reports Remaining c while refusing a request of cost c. costNanos
// truncates, so that is the largest c with c × nanosPerToken < nanos + 1
// (and k tokens' worth of refill time reads back as k, not k−1).
func (l Limit) tokens(nanos int64) int64 {
	if nanos <= 0 {
		return 0
	}
	x := float64(nanos+1) / l.nanosPerToken
	c := int64(x)
	if float64(c) == x {
		c--
	}
	return c
}

// balance converts a span of refill time into fractional tokens.
func (l Limit) balance(nanos int64) float64 { return float64(nanos) / l.nanosPerToken }

// MustLimitOf is NewLimitOf for constants known to be valid; it panics otherwise.
func MustLimitOf(a Algorithm, count int64, period time.Duration, burst int64) Limit {
	l, err := NewLimitOf(a, count, period, burst)
	if err != nil {
		panic(err)
	}
	return l
}
