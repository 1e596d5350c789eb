package clientlib

import (
	"context"
	"sync"
	"time"
)

// longAgo is a deadline in the past: setting it wakes a blocked read or write.
var longAgo = time.Unix(1, 0)

// interrupter ends a blocked read or write on a connection when the context
// of the caller doing it ends. The runtime's network poller sleeps in
// millisecond steps, so polling ctx alone cannot notice a cancellation
// sooner than about a millisecond; an interrupter, armed once a wait turns
// out to be long, wakes the I/O at once. Arming allocates (context.AfterFunc),
// so it is done only after a first short wait, off the fast path.
//
// One goroutine at a time uses an interrupter: the read token's holder for
// reads, the flusher for writes.
type interrupter struct {
	set  func(time.Time) error // SetReadDeadline or SetWriteDeadline
	mu   sync.Mutex
	cl   *call // the call whose context may interrupt; nil when disarmed
	stop func() bool
}

// armed reports whether arm was called since the last disarm.
func (in *interrupter) armed() bool { return in.stop != nil }

// arm makes ctx's end interrupt the I/O done for cl until disarm.
func (in *interrupter) arm(ctx context.Context, cl *call) {
	in.mu.Lock()
	in.cl = cl
	in.mu.Unlock()
	in.stop = context.AfterFunc(ctx, func() {
		in.mu.Lock()
		defer in.mu.Unlock()
		if in.cl == cl { // not a later caller's I/O
			in.set(longAgo)
		}
	})
}

// disarm ends arm's effect: after it returns, ctx no longer touches the
// connection.
func (in *interrupter) disarm() {
	if in.stop == nil {
		return
	}
	in.mu.Lock()
	in.cl = nil
	in.mu.Unlock()
	in.stop()
	in.stop = nil
}
