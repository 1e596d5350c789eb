// Package proctest starts real processes for the tests of the sluice-rules
// module (its process tests and internal/e2e): output collected while it
// is written, the process killed when the test ends and killed with the
// test binary if that dies, and a poll-with-deadline for waiting on them.
// It is a test helper: nothing but tests imports it.
package proctest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Buffer collects a process's output; it may be read while it is written.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Proc is a process a test started. Its methods are for the test's own
// goroutine.
type Proc struct {
	Cmd    *exec.Cmd
	Output *Buffer // stdout and stderr
	exited chan error
	done   bool
}

// Start starts cmd with its stdout and stderr in Output. The process is
// killed when the test ends (its output logged if the test failed) and
// when the test binary dies (a panic, a go test timeout).
func Start(t *testing.T, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Output: &Buffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.Output, p.Output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), p.Output.String())
		}
	})
	return p
}

// Kill kills the process and waits for it to exit; after the first call
// it does nothing.
func (p *Proc) Kill() {
	if p.done {
		return
	}
	p.Cmd.Process.Kill()
	<-p.exited
	p.done = true
}

// Stop sends SIGTERM and returns the exit, failing the test if there is
// none within 20 s.
func (p *Proc) Stop(t *testing.T) error {
	t.Helper()
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.done = true
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit 20 s after SIGTERM:\n%s", p.Output.String())
		return nil
	}
}

// Eventually polls cond every 5 ms until it holds, failing the test after
// within.
func Eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out after %v waiting until %s", within, what)
		}
	}
}

// TempDir is a temporary directory with a short path (Unix socket paths
// are limited to about 108 bytes), removed when the test ends.
func TempDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
