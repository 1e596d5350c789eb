package ipc

import (
	"strconv"
	"sync/atomic"
	"time"
)

// logCause is a kind of event a client can make the server log. Each cause
// is logged at most once per interval, whatever the clients do.
type logCause int

const (
	causeAtCap logCause = iota
	causeReaped
	causeProtocol
	causePeerRefused
	causeSlowFrame
	causeRequestRefused
	causeReport
	causeReportClamped
	causeAccept
	numLogCauses
)

// defaultLogInterval is how often each cause may write a line.
const defaultLogInterval = 10 * time.Second

// logCap rate-limits the server's lines per cause: a client that opens a
// million connections, or sends a million bad frames, makes one line per
// cause per interval, which says how many events it stands for.
type logCap struct {
	interval time.Duration
	base     time.Time // monotonic reference
	causes   [numLogCauses]struct {
		lastLine atomic.Int64  // nanoseconds since base, 0 before the first line
		unlogged atomic.Uint64 // events since the last line
	}
}

func newLogCap(interval time.Duration) *logCap {
	if interval <= 0 {
		interval = defaultLogInterval
	}
	return &logCap{interval: interval, base: time.Now()}
}

// allow counts one event of cause c and reports whether a line may be
// written for it now, with how many events (this one included) the line
// stands for.
func (l *logCap) allow(c logCause) (bool, uint64) {
	cc := &l.causes[c]
	cc.unlogged.Add(1)
	now := int64(time.Since(l.base)) + 1 // never 0
	last := cc.lastLine.Load()
	if last != 0 && now-last < int64(l.interval) {
		return false, 0
	}
	if !cc.lastLine.CompareAndSwap(last, now) {
		return false, 0 // another goroutine writes this interval's line
	}
	return true, cc.unlogged.Swap(0)
}

// maxLoggedName is the most bytes of a client-supplied string (a HELLO
// client name) the server keeps and logs.
const maxLoggedName = 64

// sanitize makes a client-supplied string safe to keep and log: at most
// maxLoggedName bytes of it, with control characters, quotes and invalid
// UTF-8 escaped as in a Go string literal (without the surrounding quotes),
// and a note of the original length when it was cut.
func sanitize(s string) string {
	cut := len(s) > maxLoggedName
	t := s
	if cut {
		t = s[:maxLoggedName]
	}
	q := strconv.Quote(t)
	q = q[1 : len(q)-1]
	if cut {
		q += "...(" + strconv.Itoa(len(s)) + " bytes)"
	}
	return q
}
