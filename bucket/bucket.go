package bucket

import (
	"time"
)

// Result is the outcome of a decision on one bucket.
type Result struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Limit is the number of requests the limit allows per period.
	Limit int64
	// Remaining is the number of whole tokens left after this decision; 0 when in debt.
	Remaining int64
	// RetryAfter is how long until the balance covers the same cost; 0 when allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
}

// Bucket is a token bucket whose balance may go below zero. Its zero value is a
// full bucket. A Bucket is not safe for concurrent use: Store serialises access,
// and anyone else holding one must do the same.
//
// A Bucket does not remember its Limit; every method takes it, so a limit change
// between calls is legal. Use Rescale to carry a balance across such a change
// proportionally instead of reinterpreting it.
//
// Its state is one instant, full: the unix nanoseconds at which the balance
// reaches Burst. (A Bucket is laid out as every algorithm's state is, so the
// Store can hold any; the other fields are unused.)
type Bucket state

// Take admits a request of the given cost if the balance covers it, and charges
// it. A denied request changes nothing. cost must lie in [1, lim.Burst()]; Store
// checks this for its callers.
func (b *Bucket) Take(lim Limit, cost int64, now time.Time) Result {
	n := now.UnixNano()
	full := max(b.full, n) // refill is capped at Burst
	costN := lim.costNanos(cost)
	// Balance covers cost ⇔ Burst − (full − n) ≥ cost, measured in nanoseconds of refill.
	if debt := full - n + costN; debt <= lim.burstNanos {
		full += costN
		b.full = full
		return lim.result(true, full, n, 0)
	}
	return lim.result(false, full, n, full-lim.burstNanos+costN-n)
}

// TakeOverdraft is Take with a soft margin: a request the balance does not
// cover is still admitted, and charged, if that leaves the bucket at most
// overdraft tokens below zero. soft reports that the margin was used.
func (b *Bucket) TakeOverdraft(lim Limit, cost, overdraft int64, now time.Time) (r Result, soft bool) {
	if r = b.Take(lim, cost, now); r.Allowed || overdraft <= 0 {
		return r, false
	}
	n := now.UnixNano()
	full := max(b.full, n)
	costN := lim.costNanos(cost)
	if full-n+costN > lim.burstNanos+lim.costNanos(overdraft) {
		return r, false
	}
	b.full = full + costN
	res := lim.result(true, b.full, n, 0)
	return res, true
}

// Reserve is Take for a caller willing to wait up to maxWait: if the
// balance does not cover cost now but will within maxWait, the cost is
// charged now (reserving the caller's turn, in arrival order, as a leaky
// bucket would) and the result is allowed with RetryAfter set to how long
// the caller must wait before going ahead. Otherwise it decides as Take.
func (b *Bucket) Reserve(lim Limit, cost int64, maxWait time.Duration, now time.Time) Result {
	r := b.Take(lim, cost, now)
	if r.Allowed || r.RetryAfter > maxWait {
		return r
	}
	n := now.UnixNano()
	b.full = max(b.full, n) + lim.costNanos(cost)
	res := lim.result(true, b.full, n, 0)
	res.RetryAfter = r.RetryAfter
	return res
}

// Check reports what Take would decide, without charging.
func (b *Bucket) Check(lim Limit, cost int64, now time.Time) Result {
	n := now.UnixNano()
	full := max(b.full, n)
	costN := lim.costNanos(cost)
	if full-n+costN <= lim.burstNanos {
		return lim.result(true, full+costN, n, 0)
	}
	return lim.result(false, full, n, full-lim.burstNanos+costN-n)
}

// Charge subtracts cost unconditionally, letting the balance go negative: it
// records consumption that was decided elsewhere (by a peer) or measured after
// the fact. Debt saturates at a century of refill rather than overflowing.
func (b *Bucket) Charge(lim Limit, cost int64, now time.Time) {
	if cost <= 0 {
		return
	}
	n := now.UnixNano()
	full := max(b.full, n) + lim.costNanos(cost)
	b.full = min(full, n+maxDebt)
}

// Balance returns the tokens in the bucket at now: at most Burst, negative when in debt.
func (b *Bucket) Balance(lim Limit, now time.Time) float64 {
	n := now.UnixNano()
	return lim.balance(lim.burstNanos - (max(b.full, n) - n))
}

// setBalance puts the bucket at the given balance (capped at the burst).
func (b *Bucket) setBalance(lim Limit, balance float64, now time.Time) {
	n := now.UnixNano()
	deficit := (float64(lim.burst) - balance) * lim.nanosPerToken
	b.full = n + min(int64(max(deficit, 0)), maxDebt)
}

// IsFull reports whether the bucket has refilled to capacity by now, whatever its limit.
func (b *Bucket) IsFull(now time.Time) bool { return b.full <= now.UnixNano() }

// Rescale carries the balance across a change of limit from old to new: the
// balance keeps its proportion of the burst, so a bucket at −8 of 4 moves to −16
// of 8 and a full bucket stays full. A limit change never resets debt.
func (b *Bucket) Rescale(old, new Limit, now time.Time) {
	if old == new || old.IsZero() || new.IsZero() {
		return
	}
	n := now.UnixNano()
	if b.full <= n {
		return // full under any limit
	}
	// The refill time still owed, as a share of the old burst, owed again of the new one.
	deficit := float64(b.full-n) * float64(new.burstNanos) / float64(old.burstNanos)
	b.full = n + min(int64(deficit), maxDebt)
}

// result builds a Result for a bucket whose full instant is full at n.
func (l Limit) result(allowed bool, full, n, retry int64) Result {
	return Result{
		Allowed:    allowed,
		Limit:      l.count,
		Remaining:  l.tokens(l.burstNanos - (full - n)),
		RetryAfter: time.Duration(retry),
		ResetAfter: time.Duration(full - n),
	}
}
