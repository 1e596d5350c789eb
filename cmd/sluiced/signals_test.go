package main

import (
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestHandleSignals: every SIGHUP calls reload, SIGTERM ends the context,
// and stop returns once the reload goroutine is gone. The signals go to this
// test process, which handles them while handleSignals holds them.
func TestHandleSignals(t *testing.T) {
	var reloads atomic.Int32
	ctx, stop := handleSignals(func() { reloads.Add(1) })
	defer stop()
	await := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		poll := time.NewTicker(5 * time.Millisecond)
		defer poll.Stop()
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15 s", what)
			}
			<-poll.C
		}
	}
	for want := int32(1); want <= 2; want++ {
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatalf("send SIGHUP: %v", err)
		}
		await("a reload per SIGHUP", func() bool { return reloads.Load() == want })
	}
	if ctx.Err() != nil {
		t.Fatalf("context ended by SIGHUP: %v", ctx.Err())
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatalf("send SIGTERM: %v", err)
	}
	await("the context ends on SIGTERM", func() bool { return ctx.Err() != nil })
	stop()
	if n := reloads.Load(); n != 2 {
		t.Fatalf("%d reloads, want 2", n)
	}
}
