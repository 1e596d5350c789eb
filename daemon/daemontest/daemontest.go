// Package daemontest runs a real sluiced daemon inside a test: its own rules
// file and Unix socket in a temporary directory, stopped when the test ends.
// It is for the tests of packages that talk to a daemon (clients, CLIs,
// middleware), not for production code.
package daemontest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
)

// Start runs a daemon with the given rules file contents and returns it once
// it is serving; d.SocketPath() is where to connect.
func Start(t testing.TB, rules string) *daemon.Daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "dt") // short: socket paths are limited to ~108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := config.DefaultSettings()
	s.SocketPath, s.RulesPath = filepath.Join(dir, "d.sock"), filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(s.RulesPath, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	return Run(t, daemon.Config{Settings: s})
}

// Run builds a daemon from cfg and runs it until the test ends, returning it
// once it is serving. The test fails if it does not start, or stops with an
// error.
func Run(t testing.TB, cfg daemon.Config) *daemon.Daemon {
	t.Helper()
	d, err := daemon.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-ran:
		cancel()
		t.Fatalf("daemon did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("daemon stopped with %v", err)
		}
	})
	return d
}
