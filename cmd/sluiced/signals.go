package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// handleSignals is the one place sluiced's commands take signals: the
// returned context ends on SIGINT or SIGTERM, and every SIGHUP until then
// calls reload (in its own goroutine, one at a time). stop releases the
// signals and waits for that goroutine to finish; calling it again is harmless.
func handleSignals(reload func()) (ctx context.Context, stop func()) {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload()
			}
		}
	}()
	return ctx, func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}
