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

// Limit is a rate of Count tokens per Period with a capacity of Burst tokens.
// Build one with NewLimit; the zero Limit is invalid.
type Limit struct {
	count  int64
	period time.Duration
	burst  int64

	nanosPerToken float64 // period / count
	burstNanos    int64   // burst × nanosPerToken: time to refill from empty to full
}

// ErrInvalidLimit is returned by NewLimit for non-positive counts, periods or bursts.
var ErrInvalidLimit = errors.New("invalid limit")

// NewLimit returns a limit of count tokens per period, holding at most burst tokens.
func NewLimit(count int64, period time.Duration, burst int64) (Limit, error) {
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
	return Limit{count: count, period: period, burst: burst, nanosPerToken: npt, burstNanos: int64(math.Round(bn))}, nil
}

// MustLimit is NewLimit for constants known to be valid; it panics otherwise.
func MustLimit(count int64, period time.Duration, burst int64) Limit {
	l, err := NewLimit(count, period, burst)
	if err != nil {
		panic(err)
	}
	return l
}

// Count is the number of tokens added per Period.
func (l Limit) Count() int64 { return l.count }

// Period is the interval over which Count tokens are added.
func (l Limit) Period() time.Duration { return l.period }

// Burst is the bucket's capacity: the most tokens it can hold.
func (l Limit) Burst() int64 { return l.burst }

// IsZero reports whether l is the zero (invalid) Limit.
func (l Limit) IsZero() bool { return l.count == 0 }

// PerSecond is the refill rate in tokens per second.
func (l Limit) PerSecond() float64 { return float64(time.Second) / l.nanosPerToken }

// String formats l as "count/period burst N", e.g. "100/1s burst 100".
func (l Limit) String() string {
	return fmt.Sprintf("%d/%s burst %d", l.count, l.period, l.burst)
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

// tokens converts a span of refill time into whole tokens, rounding down.
func (l Limit) tokens(nanos int64) int64 {
	if nanos <= 0 {
		return 0
	}
	// The epsilon absorbs the truncation in costNanos: k tokens' worth of
	// refill time must read back as k tokens, not k−1.
	return int64(float64(nanos)/l.nanosPerToken + 1e-6)
}

// balance converts a span of refill time into fractional tokens.
func (l Limit) balance(nanos int64) float64 { return float64(nanos) / l.nanosPerToken }
