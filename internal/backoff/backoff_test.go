package backoff

import (
	"math"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	const ms = time.Millisecond
	full := Policy{Min: 100 * ms, Max: 10 * time.Second, Spread: 1}
	half := Policy{Min: 200 * ms, Max: 30 * time.Second, Spread: 0.5}
	none := Accept()
	for _, tc := range []struct {
		name    string
		p       Policy
		attempt int
		r       float64
		want    time.Duration
	}{
		{"full jitter, first retry, r=0", full, 1, 0, 0},
		{"full jitter, first retry, r=0.5", full, 1, 0.5, 50 * ms},
		{"full jitter, third retry doubles twice", full, 3, 0.5, 200 * ms},
		{"full jitter, capped", full, 20, 0.5, 5 * time.Second},
		{"upper half, r=0 is the half", half, 1, 0, 100 * ms},
		{"upper half, r near 1 is near the whole", half, 1, 0.999, 199_900 * time.Microsecond},
		{"upper half, capped", half, 50, 0, 15 * time.Second},
		{"no jitter ignores r", none, 1, 0.7, 5 * ms},
		{"no jitter doubles", none, 4, 0, 40 * ms},
		{"no jitter capped", none, 9, 0, time.Second},
		{"attempt 0 counts as 1", none, 0, 0, 5 * ms},
		{"negative attempt counts as 1", none, -3, 0, 5 * ms},
		{"huge attempt stays capped", none, math.MaxInt, 0, time.Second},
		{"r above 1 is clamped", full, 1, 7, 100 * ms},
		{"r below 0 is clamped", full, 1, -1, 0},
		{"spread above 1 is clamped", Policy{Min: 8 * ms, Max: 8 * ms, Spread: 3}, 1, 0.5, 4 * ms},
		{"negative spread is clamped", Policy{Min: 8 * ms, Max: 8 * ms, Spread: -1}, 1, 0.5, 8 * ms},
		{"min above max is capped", Policy{Min: time.Minute, Max: time.Second}, 1, 0, time.Second},
		{"zero policy waits 0", Policy{}, 5, 0.5, 0},
		{"a max near the largest duration does not overflow", Policy{Min: time.Second, Max: math.MaxInt64}, 200, 0, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Delay(tc.attempt, tc.r); got != tc.want {
				t.Fatalf("Delay(%d, %v) = %v, want %v", tc.attempt, tc.r, got, tc.want)
			}
		})
	}
}

// TestDelayIsWithinBoundsAndGrows sweeps attempts and random numbers: every
// wait lies in [d×(1−Spread), d] of the attempt's d, and d never shrinks.
func TestDelayIsWithinBoundsAndGrows(t *testing.T) {
	p := Policy{Min: 10 * time.Millisecond, Max: 2 * time.Second, Spread: 0.5}
	prev := time.Duration(0)
	for attempt := 1; attempt <= 40; attempt++ {
		top := p.Delay(attempt, math.Nextafter(1, 0))
		if top < prev {
			t.Fatalf("attempt %d: top %v below the previous attempt's %v", attempt, top, prev)
		}
		prev = top
		for _, r := range []float64{0, 0.25, 0.5, 0.75} {
			if got := p.Delay(attempt, r); got < top/2 || got > top {
				t.Fatalf("attempt %d, r %v: %v outside [%v, %v]", attempt, r, got, top/2, top)
			}
		}
	}
}

func TestDelayAllocatesNothing(t *testing.T) {
	p := Policy{Min: time.Millisecond, Max: time.Second, Spread: 1}
	if n := testing.AllocsPerRun(100, func() { _ = p.Delay(7, 0.3) }); n != 0 {
		t.Fatalf("Delay allocates %v times", n)
	}
}
