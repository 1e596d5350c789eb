// Package stallwatch measures how long a process went unscheduled: tests
// that judge a limit in real time on a shared machine use it to tell a miss
// the limiter made from one the machine made (every daemon, gossip round
// and caller in a stalled process stops together, and on resuming decides
// on views as old as the stall).
package stallwatch

import "time"

// Start starts a goroutine that expects to run every tick and returns a
// function that stops it and reports the longest a tick came late: how
// long, at worst, the process went unscheduled between Start and stop.
func Start(tick time.Duration) (stop func() time.Duration) {
	done := make(chan struct{})
	worst := make(chan time.Duration, 1)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		last, w := time.Now(), time.Duration(0)
		for {
			select {
			case <-done:
				worst <- w
				return
			case now := <-t.C:
				w = max(w, now.Sub(last)-tick)
				last = now
			}
		}
	}()
	return func() time.Duration { close(done); return <-worst }
}
