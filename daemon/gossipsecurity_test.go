package daemon

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The warning is given at once and then once per interval, never more, and
// stops with its context.
func TestRepeatUntilWarnsOncePerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var calls atomic.Int64
		done := make(chan struct{})
		go func() { defer close(done); repeatUntil(ctx, 10*time.Minute, func() { calls.Add(1) }) }()
		synctest.Wait()
		if calls.Load() != 1 {
			t.Fatalf("%d warnings at start, want 1", calls.Load())
		}
		time.Sleep(35 * time.Minute) // fake time: three intervals
		synctest.Wait()
		if calls.Load() != 4 {
			t.Fatalf("%d warnings after 35 minutes, want 4", calls.Load())
		}
		cancel()
		<-done
	})
}
