package bucket

import "time"

// GCRA is the generic cell rate algorithm (ITU-T I.371), as rate limiters
// built on Redis commonly use it. Its state is one instant, the theoretical
// arrival time (TAT): when the next request would arrive if requests came
// exactly one emission interval T = Period/Count apart. A request of cost c
// conforms if, after pushing the TAT c intervals later, it lies no further
// ahead of now than the tolerance τ = (Burst−1)·T plus one interval.
//
// That is the token bucket told from the other side: the TAT is the instant
// the bucket would be full, and τ + T is the time to refill Burst tokens. So
// GCRA and Bucket make the same decisions, to the nanosecond (a test replays
// random traffic through both); GCRA is offered under its own name so that
// rules ported from GCRA limiters read as their authors expect. Its zero
// value holds no consumption.
type GCRA state

// Take admits and charges a conforming request of the given cost.
func (g *GCRA) Take(lim Limit, cost int64, now time.Time) Result {
	return g.conform(lim, cost, true, now)
}

// Check reports what Take would decide, without charging.
func (g *GCRA) Check(lim Limit, cost int64, now time.Time) Result {
	return g.conform(lim, cost, false, now)
}

func (g *GCRA) conform(lim Limit, cost int64, commit bool, now time.Time) Result {
	n := now.UnixNano()
	tat := max(g.full, n)
	limitAhead := lim.burstNanos // τ + T: how far ahead of now the TAT may run
	newTAT := tat + lim.costNanos(cost)
	if newTAT-n > limitAhead {
		// Non-conforming: it would conform once now reaches newTAT − (τ + T).
		return lim.result(false, tat, n, newTAT-limitAhead-n)
	}
	if commit {
		g.full = newTAT
	}
	return lim.result(true, newTAT, n, 0)
}

// Charge pushes the TAT on by cost intervals unconditionally.
func (g *GCRA) Charge(lim Limit, cost int64, now time.Time) { (*Bucket)(g).Charge(lim, cost, now) }

// Balance is how many intervals of tolerance are left, in requests: Burst
// when the TAT has passed, negative when it runs beyond the tolerance.
func (g *GCRA) Balance(lim Limit, now time.Time) float64 {
	n := now.UnixNano()
	return lim.balance(lim.burstNanos - (max(g.full, n) - n))
}
