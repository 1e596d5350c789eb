package bucket

import "time"

// LeakyBucket is a queue of capacity Burst that drains at Count per Period.
// Its state is one instant, full: when the queue will have drained empty.
//
// As a meter (Take) it admits a request if the queue has room for its cost,
// which is exactly when a token bucket of the same limit has the tokens: the
// queue's level is the bucket's deficit. It differs for callers who can wait
// (Reserve, the proxy's shaping): every admitted request is given its place
// in the queue and leaves when the requests ahead of it have drained, one
// emission interval apart, so what goes through is smooth at the drain rate
// however bursty what arrived. A token bucket lets a burst through at once.
// Its zero value is an empty queue.
type LeakyBucket state

// Take admits and charges a request if the queue has room for its cost.
func (q *LeakyBucket) Take(lim Limit, cost int64, now time.Time) Result {
	return (*Bucket)(q).Take(lim, cost, now)
}

// Check reports what Take would decide, without charging.
func (q *LeakyBucket) Check(lim Limit, cost int64, now time.Time) Result {
	return (*Bucket)(q).Check(lim, cost, now)
}

// Reserve queues a request if the queue has room for it and its turn to leave
// comes within maxWait. The result is allowed with RetryAfter set to how long
// the caller waits for its turn (0 when the queue is empty). A request the
// queue has no room for, or whose turn is too far off, is refused and changes
// nothing; RetryAfter then says when it would fit.
func (q *LeakyBucket) Reserve(lim Limit, cost int64, maxWait time.Duration, now time.Time) Result {
	n := now.UnixNano()
	drained := max(q.full, n) // when the requests ahead of this one have left
	wait := drained - n
	r := (*Bucket)(q).Check(lim, cost, now)
	if !r.Allowed {
		return r
	}
	if wait > int64(maxWait) {
		r.Allowed, r.RetryAfter = false, time.Duration(wait-int64(maxWait))
		r.Remaining, r.ResetAfter = lim.tokens(lim.burstNanos-wait), time.Duration(wait)
		return r
	}
	q.full = drained + lim.costNanos(cost)
	r = lim.result(true, q.full, n, 0)
	r.RetryAfter = time.Duration(wait)
	return r
}

// Charge adds cost to the queue unconditionally, letting it overflow.
func (q *LeakyBucket) Charge(lim Limit, cost int64, now time.Time) {
	(*Bucket)(q).Charge(lim, cost, now)
}

// Balance is the room left in the queue, in requests: Burst when empty,
// negative when the queue has overflowed (peers' requests counted in).
func (q *LeakyBucket) Balance(lim Limit, now time.Time) float64 {
	return (*Bucket)(q).Balance(lim, now)
}
