package ipc

import (
	"sync"
	"time"
)

// Defaults of what clients' REPORTs may add to the server's counts.
const (
	DefaultMaxReportBurst = 10_000_000 // calls, over all clients
	DefaultMaxReportRate  = 1_000_000  // calls per second, over all clients
)

// reportBudget bounds what REPORTs may add, over all clients together: a
// token bucket holding at most burst calls, refilled at rate calls per
// second. A report beyond what the bucket holds is clamped, so no client,
// whatever it claims and however many connections it opens, can move the
// daemon's counts of calls decided without it by more than burst plus rate
// per second. A client cannot be trusted about calls the daemon never saw;
// the bound keeps a lie from swamping the truth.
type reportBudget struct {
	mu     sync.Mutex
	burst  float64
	rate   float64
	tokens float64
	last   time.Time
}

func newReportBudget(burst, rate uint64, now time.Time) *reportBudget {
	return &reportBudget{burst: float64(burst), rate: float64(rate), tokens: float64(burst), last: now}
}

// take admits what it can of a report of open and closed calls at now, open
// calls first, and returns the admitted report.
func (b *reportBudget) take(r Report, now time.Time) Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(b.burst, b.tokens+dt.Seconds()*b.rate)
		b.last = now
	}
	var got Report
	got.FailedOpen = min(r.FailedOpen, uint64(b.tokens))
	b.tokens -= float64(got.FailedOpen)
	got.FailedClosed = min(r.FailedClosed, uint64(b.tokens))
	b.tokens -= float64(got.FailedClosed)
	return got
}
