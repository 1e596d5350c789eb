package clientlib

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicelabs/sluice/ipc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// generous is a per-call timeout for tests that need real answers on a
// loaded, race-instrumented 2-core machine.
const generous = 5 * time.Second

// scriptDecider admits everything except rule "deny"; rule "block" waits on
// release before answering. It counts the charges it makes.
type scriptDecider struct {
	release    chan struct{}
	entered    chan struct{}
	charged    atomic.Int64
	failedOpen atomic.Uint64 // as reported by clients
}

func (d *scriptDecider) ClientReport(client string, r ipc.Report) { d.failedOpen.Add(r.FailedOpen) }

func newScript() *scriptDecider {
	return &scriptDecider{release: make(chan struct{}), entered: make(chan struct{}, 100)}
}

func (d *scriptDecider) Decide(checks []ipc.Check, results []ipc.Result) (bool, error) {
	allowed := true
	for i, c := range checks {
		switch string(c.Rule) {
		case "block":
			d.entered <- struct{}{}
			<-d.release
			results[i] = ipc.Result{Status: ipc.StatusOK, Limit: 1}
		case "deny":
			results[i] = ipc.Result{Status: ipc.StatusOverLimit, Limit: 5, RetryAfter: time.Duration(len(c.Key)) * time.Second, ResetAfter: 9 * time.Second}
			allowed = false
		default:
			results[i] = ipc.Result{Status: ipc.StatusOK, Limit: 10, Remaining: uint64(len(c.Key)), ResetAfter: time.Second}
		}
	}
	if allowed {
		d.charged.Add(1)
	}
	return allowed, nil
}

func socketPath(t *testing.T) string {
	dir, err := os.MkdirTemp("", "cl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "d.sock")
}

// daemon is a real ipc.Server on a socket, restartable on the same path.
type daemon struct {
	t       *testing.T
	path    string
	decider *scriptDecider
	srv     *ipc.Server
	done    chan error
}

func startDaemon(t *testing.T, path string) *daemon {
	t.Helper()
	d := &daemon{t: t, path: path, decider: newScript()}
	d.start()
	t.Cleanup(func() { d.stop(false) })
	return d
}

func (d *daemon) start() {
	l, err := ipc.Listen(d.path, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	d.srv = ipc.NewServer(ipc.ServerConfig{Name: "fake"}, d.decider)
	d.done = make(chan error, 1)
	go func(s *ipc.Server) { d.done <- s.Serve(l, d.path) }(d.srv)
}

// stop shuts the server down; abrupt closes connections without answering,
// as a killed daemon would.
func (d *daemon) stop(abrupt bool) {
	if d.srv == nil {
		return
	}
	ctx := context.Background()
	if abrupt {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		cancel()
	}
	d.srv.Shutdown(ctx)
	<-d.done
	d.srv = nil
}

func openClient(t *testing.T, opts Options) *Client {
	t.Helper()
	c := New(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// eventually polls cond every millisecond until it holds, failing after 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out after 10s waiting until %s", what)
		}
	}
}

// waitUp waits until the client has a connection.
func waitUp(t *testing.T, c *Client) {
	t.Helper()
	eventually(t, "the client connects", c.Up)
}

func TestDecisionsFromDaemon(t *testing.T) {
	path := socketPath(t)
	startDaemon(t, path)
	c, err := Dial(context.Background(), Options{SocketPath: path, Timeout: generous})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	tests := []struct {
		name   string
		checks []Check
		want   Decision
	}{
		{"admitted", []Check{{Rule: "api", Key: "alice", Cost: 1}}, Decision{Allowed: true, Limit: 10, Remaining: 5, ResetAfter: time.Second, Status: ipc.StatusOK, Denied: -1, Deciding: 0}},
		{"throttled", []Check{{Rule: "deny", Key: "ab", Cost: 1}}, Decision{Allowed: false, Limit: 5, RetryAfter: 2 * time.Second, ResetAfter: 9 * time.Second, Status: ipc.StatusOverLimit, Denied: 0, Deciding: 0}},
		{"multi: fewest remaining decides", []Check{{Rule: "api", Key: "longkey", Cost: 1}, {Rule: "api", Key: "k", Cost: 1}}, Decision{Allowed: true, Limit: 10, Remaining: 1, ResetAfter: time.Second, Status: ipc.StatusOK, Denied: -1, Deciding: 1}},
		{"multi: longest wait decides", []Check{{Rule: "api", Key: "x", Cost: 1}, {Rule: "deny", Key: "a", Cost: 1}, {Rule: "deny", Key: "abc", Cost: 1}}, Decision{Allowed: false, Limit: 5, RetryAfter: 3 * time.Second, ResetAfter: 9 * time.Second, Status: ipc.StatusOverLimit, Denied: 2, Deciding: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.AllowAll(ctx, tt.checks...); got != tt.want {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if s := c.Stats(); s.Decisions != uint64(len(tests)) || s.Denied != 2 || s.FailedOpen != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A call that is itself invalid is denied by the client, never failed open:
// a caller cannot switch its own limit off by asking wrongly.
func TestBadCallsAreRefusedLocally(t *testing.T) {
	c := openClient(t, Options{SocketPath: socketPath(t)})
	ctx := context.Background()
	for _, d := range []Decision{c.AllowN(ctx, "r", "k", 0), c.AllowAll(ctx), c.Allow(ctx, "r", "")} {
		if d.Allowed || d.FailedOpen || !d.Invalid || !errors.Is(d.Err, ErrInvalid) {
			t.Fatalf("bad call decided %+v", d)
		}
	}
	if s := c.Stats(); s.Invalid != 3 || s.FailedOpen != 0 {
		t.Fatalf("stats %+v, want 3 invalid and none failed open", s)
	}
}

func TestFailsOpenFastWithoutDiallingWhileDaemonAbsent(t *testing.T) {
	path := socketPath(t)
	// A "daemon" that accepts and hangs up at once: every dial attempt shows.
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var accepts atomic.Int64
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			conn.Close()
		}
	}()
	defer l.Close()

	c := openClient(t, Options{SocketPath: path, Timeout: time.Second, ReconnectMin: 50 * time.Millisecond})
	const calls = 2000
	for range calls {
		d := c.Allow(context.Background(), "api", "k")
		if !d.Allowed || !d.FailedOpen || !errors.Is(d.Err, ErrDaemonDown) {
			t.Fatalf("decision while daemon down: %+v", d)
		}
	}
	if s := c.Stats(); s.FailedOpen != calls || s.Timeouts != 0 {
		t.Fatalf("stats %+v: want %d failed open and no timeouts", s, calls)
	}
	if n := accepts.Load(); n >= calls/10 {
		t.Fatalf("%d connection attempts for %d calls: calls must not dial", n, calls)
	}
}

func TestFailClosedDeniesWhenUndecided(t *testing.T) {
	c := openClient(t, Options{SocketPath: socketPath(t), FailClosed: true})
	d := c.Allow(context.Background(), "api", "k")
	if d.Allowed || !d.FailedOpen || d.Err == nil {
		t.Fatalf("fail-closed decision %+v", d)
	}
	if s := c.Stats(); s.FailedClosed != 1 || s.FailedOpen != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestSlowDaemonFailsOpenAtDeadlineAndRecovers(t *testing.T) {
	path := socketPath(t)
	d := startDaemon(t, path)
	c := openClient(t, Options{SocketPath: path, Timeout: 30 * time.Millisecond, Conns: 1})
	waitUp(t, c)

	got := c.Allow(context.Background(), "block", "k")
	<-d.decider.entered
	if !got.Allowed || !got.FailedOpen || !errors.Is(got.Err, ErrTimeout) {
		t.Fatalf("slow daemon: %+v", got)
	}
	close(d.decider.release) // the late reply arrives for a caller who left
	c.opts.Timeout = generous
	if got := c.Allow(context.Background(), "api", "abc"); got.FailedOpen || got.Remaining != 3 {
		t.Fatalf("after the slow reply: %+v (a late reply must not answer a later call)", got)
	}
	if s := c.Stats(); s.Timeouts != 1 || s.FailedOpen != 1 || s.Decisions != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestContextCancelFailsOpen(t *testing.T) {
	path := socketPath(t)
	d := startDaemon(t, path)
	c := openClient(t, Options{SocketPath: path, Timeout: generous, Conns: 1})
	waitUp(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-d.decider.entered; cancel() }()
	got := c.Allow(ctx, "block", "k")
	close(d.decider.release)
	if !got.Allowed || !got.FailedOpen || !errors.Is(got.Err, context.Canceled) {
		t.Fatalf("cancelled call: %+v", got)
	}
}

func TestDaemonKilledMidRequestThenBack(t *testing.T) {
	path := socketPath(t)
	d := startDaemon(t, path)
	c := openClient(t, Options{SocketPath: path, Timeout: generous, Conns: 2, ReconnectMin: time.Millisecond, ReconnectMax: 20 * time.Millisecond})
	waitUp(t, c)

	result := make(chan Decision)
	go func() { result <- c.Allow(context.Background(), "block", "k") }()
	<-d.decider.entered
	// Kill: connections drop with the request in flight. Shutdown returns
	// once the blocked decision is released, so it runs aside.
	go d.srv.Shutdown(canceled())
	got := <-result
	close(d.decider.release)
	<-d.done
	d.srv = nil
	if !got.Allowed || !got.FailedOpen || !errors.Is(got.Err, ErrDaemonDown) {
		t.Fatalf("killed mid-request: %+v", got)
	}
	// Down: calls fail open at once.
	if got := c.Allow(context.Background(), "api", "k"); !got.FailedOpen {
		t.Fatalf("while down: %+v", got)
	}
	// Back: the client reconnects by itself.
	d.decider = newScript()
	d.start()
	eventually(t, "the client reconnects and gets decisions", func() bool {
		return !c.Allow(context.Background(), "api", "k").FailedOpen
	})
	if c.Stats().Reconnects < 1 {
		t.Fatalf("stats %+v: want a reconnect counted", c.Stats())
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestConfusedDaemonFailsOpen(t *testing.T) {
	path := socketPath(t)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			conn.Close()
		}
	}()
	if _, err := Dial(context.Background(), Options{SocketPath: path}); err == nil {
		t.Fatal("Dial to a confused daemon succeeded")
	}
	c := openClient(t, Options{SocketPath: path})
	if d := c.Allow(context.Background(), "api", "k"); !d.Allowed || !d.FailedOpen {
		t.Fatalf("confused daemon: %+v", d)
	}
}

func TestConcurrentCallersShareConnections(t *testing.T) {
	path := socketPath(t)
	d := startDaemon(t, path)
	c := openClient(t, Options{SocketPath: path, Timeout: generous, Conns: 2})
	waitUp(t, c)
	var wg sync.WaitGroup
	const callers, each = 64, 100
	var failed atomic.Int64
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := fmt.Sprintf("g%d-%d", g, i%5)
				got := c.Allow(context.Background(), "api", key)
				if got.FailedOpen || got.Remaining != int64(len(key)) {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 || d.decider.charged.Load() != callers*each {
		t.Fatalf("%d wrong answers, %d charged of %d", failed.Load(), d.decider.charged.Load(), callers*each)
	}
	if n := d.srv.Stats().Accepted.Load(); n > 2 {
		t.Fatalf("%d connections for %d callers, want at most 2", n, callers)
	}
}

func TestAllowAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector; run without -race")
	}
	path := socketPath(t)
	startDaemon(t, path)
	c := openClient(t, Options{SocketPath: path, Timeout: generous, Conns: 1})
	waitUp(t, c)
	ctx := context.Background()
	checks := []Check{{Rule: "api", Key: "alice", Cost: 1}, {Rule: "route", Key: "GET /", Cost: 2}}
	c.AllowAll(ctx, checks...) // warm the pool and buffers
	allocs := testing.AllocsPerRun(200, func() {
		if d := c.AllowAll(ctx, checks...); d.FailedOpen {
			t.Fatalf("failed open: %v", d.Err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per AllowAll, want 0", allocs)
	}
}

func TestCloseIsIdempotentAndFailsLaterCalls(t *testing.T) {
	path := socketPath(t)
	startDaemon(t, path)
	c := New(Options{SocketPath: path, Timeout: generous})
	waitUp(t, c)
	c.Close()
	c.Close()
	if d := c.Allow(context.Background(), "api", "k"); !d.FailedOpen || !errors.Is(d.Err, ErrClosed) {
		t.Fatalf("after Close: %+v", d)
	}
}

// A caller that takes over reading after another reader already handed it
// its reply must notice, not wait for a frame that never comes: every call
// of a burst finishes long before the (huge) timeout.
func TestBurstOfCallersNeverWaitsForTheDeadline(t *testing.T) {
	path := socketPath(t)
	startDaemon(t, path)
	c := openClient(t, Options{SocketPath: path, Timeout: time.Minute, Conns: 1})
	waitUp(t, c)
	for round := range 20 {
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() { defer wg.Done(); c.Allow(context.Background(), "api", "k") }()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: a burst of 64 calls did not finish within 20s (timeout 1m): a caller is stuck reading", round)
		}
	}
}

func TestCallsDecidedWithoutTheDaemonAreReportedToIt(t *testing.T) {
	path := socketPath(t)
	c := openClient(t, Options{SocketPath: path, Timeout: generous, Conns: 1, ReconnectMin: time.Millisecond, ReconnectMax: 5 * time.Millisecond})
	for range 5 {
		if got := c.Allow(context.Background(), "api", "k"); !got.FailedOpen {
			t.Fatalf("no daemon, yet %+v", got)
		}
	}
	d := startDaemon(t, path)
	waitUp(t, c)
	// The report travels ahead of the next request, so it has been taken
	// when that request's reply is back.
	if got := c.Allow(context.Background(), "api", "k"); got.FailedOpen {
		t.Fatalf("daemon up, yet %+v", got)
	}
	if got := d.decider.failedOpen.Load(); got != 5 {
		t.Fatalf("daemon heard of %d failed-open calls, want 5", got)
	}
	c.Allow(context.Background(), "api", "k")
	if got := d.decider.failedOpen.Load(); got != 5 {
		t.Fatalf("the same calls were reported again: %d", got)
	}
}
