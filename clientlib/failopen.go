package clientlib

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// LogFunc writes one structured log line: a message and alternating keys and
// values. slog.Logger.Warn and hclog.Logger.Warn both have this shape.
type LogFunc func(msg string, keyvals ...any)

// Cause classifies why a call was not decided by the daemon.
type Cause uint8

// Causes of undecided calls.
const (
	CauseDaemonDown Cause = iota // no connection, or the connection failed
	CauseTimeout                 // the daemon did not answer within the deadline
	CauseProtocol                // the daemon said something the client cannot read
	CauseClosed                  // the client was closed
	CauseCanceled                // the caller's context ended first
	CauseInternal                // the daemon could not decide (ERROR CodeInternal, or anything else)
	CauseUntrusted               // the socket's server is not a trusted daemon (see Options.DaemonUIDs)
	numCauses
)

var causeNames = [numCauses]string{"daemon_down", "timeout", "protocol", "closed", "canceled", "internal", "untrusted_daemon"}

func (c Cause) String() string {
	if c < numCauses {
		return causeNames[c]
	}
	return "unknown"
}

// CauseOf classifies the error of an undecided call.
func CauseOf(err error) Cause {
	switch {
	case errors.Is(err, ErrUntrustedDaemon):
		return CauseUntrusted
	case errors.Is(err, ErrTimeout):
		return CauseTimeout
	case errors.Is(err, ErrClosed):
		return CauseClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return CauseCanceled
	case errors.Is(err, ErrProtocol):
		return CauseProtocol
	case errors.Is(err, ErrDaemonDown):
		return CauseDaemonDown
	}
	return CauseInternal
}

// FailOpenLog counts calls that were not decided, by cause, and logs them
// rate-limited: at most one line per cause per interval, each saying how
// many calls of that cause went undecided since the cause's previous line.
// A daemon outage under load thus shows as one line per cause per interval,
// not one per request, and never goes unseen.
//
// Record is safe for concurrent use and does not allocate unless it writes
// a line.
type FailOpenLog struct {
	log      LogFunc
	interval time.Duration
	now      func() time.Time
	what     string // "failing open" or "failing closed"
	causes   [numCauses]causeCounts
}

type causeCounts struct {
	total    atomic.Uint64
	unlogged atomic.Uint64
	lastLine atomic.Int64 // unix nanoseconds of the last line, 0 before the first
}

// NewFailOpenLog returns a log that writes through log (nil: count only) at
// most once per cause per interval (default 10 s). failClosed only changes
// the wording: undecided calls were denied rather than admitted. now is the
// clock (nil: time.Now); tests inject their own.
func NewFailOpenLog(log LogFunc, interval time.Duration, failClosed bool, now func() time.Time) *FailOpenLog {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	what := "sluice: daemon did not decide; failing open (request allowed)"
	if failClosed {
		what = "sluice: daemon did not decide; failing closed (request denied)"
	}
	return &FailOpenLog{log: log, interval: interval, now: now, what: what}
}

// Record counts one undecided call and logs if its cause has not been
// logged within the interval.
func (l *FailOpenLog) Record(err error) {
	cause := CauseOf(err)
	cc := &l.causes[cause]
	cc.total.Add(1)
	cc.unlogged.Add(1)
	if l.log == nil {
		return
	}
	now := l.now().UnixNano()
	last := cc.lastLine.Load()
	if last != 0 && now-last < int64(l.interval) {
		return
	}
	if !cc.lastLine.CompareAndSwap(last, now) {
		return // another caller writes this interval's line
	}
	n := cc.unlogged.Swap(0)
	if n == 0 {
		return
	}
	l.log(l.what, "cause", cause.String(), "count", n, "interval", l.interval.String(), "error", errString(err))
}

// Total returns how many undecided calls of a cause were recorded.
func (l *FailOpenLog) Total(c Cause) uint64 {
	if c >= numCauses {
		return 0
	}
	return l.causes[c].total.Load()
}

// Totals returns the undecided calls recorded per cause, by cause name.
func (l *FailOpenLog) Totals() map[string]uint64 {
	out := make(map[string]uint64, numCauses)
	for c := range numCauses {
		out[c.String()] = l.causes[c].total.Load()
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
