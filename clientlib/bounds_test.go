package clientlib

import (
	"bufio"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func quiet(string, ...any) {}

// A request the daemon would refuse whole (a frame above max_frame, more
// checks than max_batch) is denied as invalid before it is queued; the
// callers sharing its connection keep being decided, on that connection.
func TestOversizeRequestFailsAloneOnASharedConnection(t *testing.T) {
	path := socketPath(t)
	d := startDaemon(t, path)
	c := openClient(t, Options{SocketPath: path, Timeout: generous, Conns: 1, Log: quiet})
	waitUp(t, c)
	ctx := context.Background()

	stop := make(chan struct{})
	var decided, wrong atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 100_000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if got := c.Allow(ctx, "api", "abc"); got.FailedOpen || got.Remaining != 3 {
				wrong.Add(1)
			}
			decided.Add(1)
		}
	}()
	huge := strings.Repeat("r", 70_000) // above the daemon's 64 KiB frame
	tooMany := make([]Check, 17)
	for i := range tooMany {
		tooMany[i] = Check{Rule: "api", Key: "k", Cost: 1}
	}
	for i := range 50 {
		for _, got := range []Decision{c.Allow(ctx, huge, "k"), c.AllowAll(ctx, tooMany...)} {
			if got.Allowed || got.FailedOpen || !got.Invalid || !errors.Is(got.Err, ErrInvalid) {
				t.Fatalf("oversize request %d: %+v", i, got)
			}
		}
	}
	eventually(t, "the other caller is decided meanwhile", func() bool { return decided.Load() > 100 })
	close(stop)
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Fatalf("%d of the other caller's calls were not decided", n)
	}
	s := c.Stats()
	if s.FailedOpen != 0 || s.Invalid != 100 || s.Reconnects != 0 {
		t.Fatalf("stats %+v: want 100 invalid, none failed open, no reconnect", s)
	}
	if n := d.srv.Stats().Accepted.Load(); n != 1 {
		t.Fatalf("%d connections accepted, want the one", n)
	}
}

// A daemon that accepts, completes the handshake and hangs up at once is
// redialled with a growing backoff, not at once (it was ~1,300 times a second).
func TestConnectionsThatDieYoungBackOff(t *testing.T) {
	path := socketPath(t)
	f := startFake(t, path, fakeWelcome, hangUp)
	c := openClient(t, Options{SocketPath: path, Conns: 2, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		Jitter: func() float64 { return 0 }, Log: quiet})
	// Calls keep coming meanwhile, as under load: they must not dial either.
	end := time.Now().Add(time.Second)
	for i := 0; i < 100_000_000 && time.Now().Before(end); i++ {
		if d := c.Allow(context.Background(), "api", "k"); !d.FailedOpen {
			t.Fatalf("decided by a daemon that hangs up: %+v", d)
		}
	}
	// Waits of 5, 10, 20, 40, 80, then 100 ms: about 14 dials in a second.
	if n := f.accepts.Load(); n > 40 {
		t.Fatalf("%d connections in 1s to a daemon that hangs up after the handshake: no backoff", n)
	}
	t.Logf("%d connections in 1s", f.accepts.Load())
}

// A daemon that stops reading fills its socket buffer; a call's Timeout
// still bounds it (the write deadline has no floor), and the callers behind
// the stuck write fail at their deadline, or at once when too much waits.
func TestTimeoutBoundsCallsWhenTheDaemonStopsReading(t *testing.T) {
	path := socketPath(t)
	w := fakeWelcome
	w.MaxKeyLen = 8 << 10
	startFake(t, path, w, neverRead)
	c := openClient(t, Options{SocketPath: path, Timeout: time.Millisecond, Conns: 1, Log: quiet})
	waitUp(t, c)
	key := strings.Repeat("k", 8<<10)
	var worst time.Duration
	var waited []time.Duration
	for range 2000 {
		start := time.Now()
		d := c.Allow(context.Background(), "api", key)
		took := time.Since(start)
		worst = max(worst, took)
		if !d.FailedOpen {
			t.Fatalf("decided by a daemon that reads nothing: %+v", d)
		}
		if errors.Is(d.Err, ErrTimeout) {
			waited = append(waited, took)
		}
	}
	slices.Sort(waited)
	s := c.Stats()
	t.Logf("2000 calls of 8 KiB, 1ms Timeout, daemon not reading: slowest %s; %d waited out the deadline; stats %+v", worst, len(waited), s)
	// 1 ms plus scheduling: the median is the code's, the maximum the
	// scheduler's on a loaded machine, so it only gets a loose bound.
	if len(waited) == 0 || waited[len(waited)/2] > 10*time.Millisecond || worst > time.Second {
		t.Fatalf("calls that waited took a median of %v, slowest %s, with a 1ms Timeout", waited[len(waited)/2], worst)
	}
}

// A cancelled context ends a call within about a millisecond in every state
// it can wait in: writing into a full socket, holding the read token, and
// waiting to be handed its reply.
func TestCancelEndsACallInEveryState(t *testing.T) {
	tests := []struct {
		name   string
		behave func(net.Conn, *bufio.Reader)
		// queueFirst makes another caller hold the read token first.
		queueFirst bool
		key        int
	}{
		{"writing into a full socket", neverRead, false, 2 << 20},
		{"holding the read token", readSilently, false, 1},
		{"waiting to be handed the reply", readSilently, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := socketPath(t)
			w := fakeWelcome
			w.MaxFrame, w.MaxKeyLen = 16<<20, 16<<20
			startFake(t, path, w, tt.behave)
			c := openClient(t, Options{SocketPath: path, Timeout: time.Minute, Conns: 1, Log: quiet})
			waitUp(t, c)
			if tt.queueFirst {
				holder, stop := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { c.Allow(holder, "api", "holder"); close(done) }()
				t.Cleanup(func() { stop(); <-done })
				eventually(t, "the first caller reads", func() bool { return len(c.slots[0].Load().readToken) == 0 })
			}
			var took []time.Duration
			for range 5 {
				if tt.key > 1 { // a stuck write leaves its connection full: start afresh
					c.Close()
					c = openClient(t, Options{SocketPath: path, Timeout: time.Minute, Conns: 1, Log: quiet})
				}
				waitUp(t, c)
				key := strings.Repeat("k", tt.key) // before the clock starts
				ctx, cancel := context.WithCancel(context.Background())
				var cancelled atomic.Int64
				timer := time.AfterFunc(20*time.Millisecond, func() { cancelled.Store(time.Now().UnixNano()); cancel() })
				d := c.Allow(ctx, "api", key)
				returned := time.Now().UnixNano()
				timer.Stop()
				cancel()
				if !d.FailedOpen || !errors.Is(d.Err, context.Canceled) {
					t.Fatalf("cancelled call: %+v", d)
				}
				took = append(took, time.Duration(returned-cancelled.Load()))
			}
			slices.Sort(took)
			if took[len(took)/2] > 20*time.Millisecond || took[len(took)-1] > time.Second {
				t.Fatalf("returned %v after the cancel", took)
			}
			t.Logf("returned %v after the cancel", took)
		})
	}
}

// The fast path allocates nothing with a cancellable context either (a
// request's context, in a server): the interrupter is armed only when a
// wait turns out long.
func TestAllowWithACancellableContextAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector; run without -race")
	}
	path := socketPath(t)
	startDaemon(t, path)
	c := openClient(t, Options{SocketPath: path, Timeout: generous, Conns: 1})
	waitUp(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	checks := []Check{{Rule: "api", Key: "alice", Cost: 1}}
	c.AllowAll(ctx, checks...)
	allocs := testing.AllocsPerRun(200, func() {
		if d := c.AllowAll(ctx, checks...); d.FailedOpen {
			t.Fatalf("failed open: %v", d.Err)
		}
	})
	// A reply slower than pollEvery on a loaded machine arms the
	// interrupter (a few allocations); most calls must not.
	if allocs > 1 {
		t.Fatalf("%v allocs per AllowAll with a cancellable context, want 0", allocs)
	}
}
