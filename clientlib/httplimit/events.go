package httplimit

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// Events counts the requests a Middleware could not limit in the ordinary
// way, and logs them rate-limited (at most one line per kind, or per cause,
// per interval, each with the count since the kind's previous line):
//
//   - undecided: the limiter did not decide (daemon down, slow, closed); the
//     request was admitted (fail open, counted by cause in FailOpen) or,
//     under fail-closed, answered 503 (counted by cause in FailClosed).
//   - invalid: the limiter refused the request as invalid (clientlib's
//     Decision.Invalid, or a rule the daemon does not know under
//     unknown_rule: deny): a misconfigured route, answered 500.
//   - unknown rule: the deciding rule is unknown to the daemon and its
//     policy admits unknown rules: the request passed unlimited.
//
// Share one Events among the Middlewares that replace one another (a proxy
// reloading its routes) so the counts run on. All methods are safe for
// concurrent use and allocate nothing unless they write a line.
type Events struct {
	// FailOpen counts and logs the undecided calls that were admitted, by cause.
	FailOpen *clientlib.FailOpenLog
	// FailClosed counts and logs the undecided calls that were refused
	// (the limiter fails closed), by cause.
	FailClosed *clientlib.FailOpenLog

	log      clientlib.LogFunc
	interval time.Duration
	now      func() time.Time
	invalid  everyInterval
	unknown  everyInterval
}

// NewEvents returns Events that log through log (nil: count only) at most
// once per kind or cause per interval (default 10 s). now is the clock
// (nil: time.Now).
func NewEvents(log clientlib.LogFunc, interval time.Duration, now func() time.Time) *Events {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	return &Events{
		FailOpen:   clientlib.NewFailOpenLog(log, interval, false, now),
		FailClosed: clientlib.NewFailOpenLog(log, interval, true, now),
		log:        log, interval: interval, now: now,
	}
}

// Invalid returns how many requests were refused as invalid (answered 500).
func (e *Events) Invalid() uint64 { return e.invalid.total.Load() }

// UnknownRule returns how many requests passed unlimited because the daemon
// does not know their rule and admits unknown rules.
func (e *Events) UnknownRule() uint64 { return e.unknown.total.Load() }

// Undecided returns how many requests the limiter did not decide, all
// causes, admitted or refused.
func (e *Events) Undecided() uint64 {
	var n uint64
	for _, v := range e.FailOpen.Totals() {
		n += v
	}
	for _, v := range e.FailClosed.Totals() {
		n += v
	}
	return n
}

func (e *Events) recordInvalid(rules string, err error) {
	if n, ok := e.invalid.record(e.now(), e.interval, e.log != nil); ok {
		e.log("sluice: rate-limit request refused as invalid (a misconfigured route); answering 500",
			"rules", rules, "count", n, "interval", e.interval.String(), "error", errString(err))
	}
}

func (e *Events) recordUnknownRule(rule string) {
	if n, ok := e.unknown.record(e.now(), e.interval, e.log != nil); ok {
		e.log("sluice: the daemon does not know the route's rule and admits unknown rules; requests pass unlimited",
			"rule", rule, "count", n, "interval", e.interval.String())
	}
}

// everyInterval counts events and says when one should be logged: the
// first, then at most one per interval, with the count since the last.
type everyInterval struct {
	total    atomic.Uint64
	unlogged atomic.Uint64
	lastLine atomic.Int64 // unix nanoseconds; 0 before the first line
}

// record counts one event; ok reports that the caller should write a line
// saying n events happened since the previous one.
func (c *everyInterval) record(now time.Time, interval time.Duration, logging bool) (n uint64, ok bool) {
	c.total.Add(1)
	c.unlogged.Add(1)
	if !logging {
		return 0, false
	}
	t, last := now.UnixNano(), c.lastLine.Load()
	if last != 0 && t-last < int64(interval) {
		return 0, false
	}
	if !c.lastLine.CompareAndSwap(last, t) {
		return 0, false
	}
	n = c.unlogged.Swap(0)
	return n, n > 0
}

// ruleList names the rules of a request's checks, for a log line.
func ruleList(checks []clientlib.Check) string {
	names := make([]string, 0, len(checks))
	for _, c := range checks {
		names = append(names, c.Rule)
	}
	return strings.Join(names, ",")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
