package daemon

import (
	"sync/atomic"
	"time"
)

// The daemon's clock, and what happens when the wall clock steps.
//
// Decisions read the clock once per request. It advances with the
// monotonic clock, so time passes at the same pace whatever NTP does, and
// it reads as wall time, because the windowed algorithms (fixed and sliding
// windows) count in windows aligned to the Unix epoch, the same windows on
// every member, and gossip names a window by its number.
//
// When the wall clock steps (NTP's first sync after boot, an operator's
// `date -s`, a VM resumed after a pause), the two part: the clock notices
// within one check interval and jumps by the step, so windows realign with
// the wall and with the other members. A jump must not refill or drain a
// bucket: the store moves every elapsed-time state (token bucket, GCRA,
// leaky bucket, sliding log) by the same amount, so their balances are what
// they were, while window counts follow the wall clock into whichever
// window it now says it is. Each step is logged and counted.

// clockStepThreshold is how far the clock may drift from the wall before it
// is taken as a step: far above the monotonic clock's drift between two
// checks, and above the slews NTP makes without stepping.
const clockStepThreshold = 500 * time.Millisecond

// clockCheckInterval is how often the daemon compares its clock with the
// wall clock: a step is followed within about this long.
const clockCheckInterval = time.Second

// stepClock reads as wall time and advances with the monotonic clock; see
// above.
type stepClock struct {
	start   time.Time            // a wall reading at start
	elapsed func() time.Duration // monotonic time since start
	wall    func() time.Time     // the wall clock, without a monotonic reading
	offset  atomic.Int64         // nanoseconds added by the steps seen so far
	steps   atomic.Uint64        // how many steps were seen
}

// newStepClock returns the daemon's default clock, reading the system's
// wall and monotonic clocks.
func newStepClock() *stepClock {
	start := time.Now()
	return &stepClock{
		start:   start.Round(0),
		elapsed: func() time.Duration { return time.Since(start) },
		wall:    func() time.Time { return time.Now().Round(0) },
	}
}

// Now is the clock's reading.
func (c *stepClock) Now() time.Time {
	return c.start.Add(c.elapsed() + time.Duration(c.offset.Load()))
}

// resync compares the clock with the wall clock and, when they are more
// than clockStepThreshold apart, jumps to the wall clock and returns by how
// much (positive: the wall stepped forward). It is called by one goroutine.
func (c *stepClock) resync() (step time.Duration, stepped bool) {
	diff := c.wall().Sub(c.Now())
	if diff > -clockStepThreshold && diff < clockStepThreshold {
		return 0, false
	}
	c.offset.Add(int64(diff))
	c.steps.Add(1)
	return diff, true
}

// resyncClock follows a wall-clock step, if there was one: the clock jumps,
// the store moves every elapsed-time state by the same amount so no bucket
// is refilled or drained by it, and the step is logged and counted.
func (d *Daemon) resyncClock() {
	if d.clock == nil {
		return
	}
	step, stepped := d.clock.resync()
	if !stepped {
		return
	}
	d.store.Shift(step)
	d.metrics.clockSteps.Inc()
	d.log.Warn("the wall clock stepped; windows follow it, bucket balances are kept",
		"step", step, "steps_seen", d.clock.steps.Load())
}
