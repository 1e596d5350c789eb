package daemon

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/gossip/gossiptest"
	"github.com/sluicelabs/sluice/ipc"
)

// lifeSettings are a daemon's settings with every bind in play: a socket in
// a fresh directory, an admin endpoint and a gossip port on loopback.
func lifeSettings(t *testing.T) config.Settings {
	t.Helper()
	dir, err := os.MkdirTemp("", "lc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := config.DefaultSettings()
	s.SocketPath = filepath.Join(dir, "d.sock")
	s.RulesPath = filepath.Join(dir, "rules.yaml")
	writeRules(t, s.RulesPath, testRules)
	s.AdminAddr = "127.0.0.1:" + strconv.Itoa(gossiptest.FreePort(t))
	s.Cluster = config.ClusterSettings{Bind: "127.0.0.1:" + strconv.Itoa(gossiptest.FreePort(t)), Label: "lifecycle"}
	s.ShutdownTimeout = 5 * time.Second
	return s
}

// holdPort binds addr's port for TCP and UDP until the test ends.
func holdPort(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
}

// assertUnbound fails unless the daemon's admin address and gossip port
// can be bound again (TCP and UDP) and its socket file is gone; held names
// what the test itself holds ("admin", "gossip" or "socket"), not checked.
func assertUnbound(t *testing.T, s config.Settings, held ...string) {
	t.Helper()
	if slices.Contains(held, "gossip") {
		s.Cluster.Bind = ""
	}
	if slices.Contains(held, "admin") {
		s.AdminAddr = ""
	}
	if slices.Contains(held, "socket") {
		s.SocketPath = ""
	}
	for _, addr := range []string{s.AdminAddr, s.Cluster.Bind} {
		if addr == "" {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still bound (TCP): %v", addr, err)
			continue
		}
		l.Close()
	}
	if s.Cluster.Bind != "" {
		if u, err := net.ListenPacket("udp", s.Cluster.Bind); err != nil {
			t.Errorf("gossip port %s still bound (UDP): %v", s.Cluster.Bind, err)
		} else {
			u.Close()
		}
	}
	if s.SocketPath != "" {
		if _, err := os.Stat(s.SocketPath); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket file left behind: %v", err)
		}
	}
}

// New binds nothing and starts nothing: the daemon's addresses stay free
// and no goroutine appears until Start.
func TestNewBindsAndStartsNothing(t *testing.T) {
	defer goleak.VerifyNone(t, gossiptest.MemberlistLeftovers()...)
	s := lifeSettings(t)
	d, err := New(Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	// Only memberlist's known leftovers, from earlier tests, are ignored: a
	// memberlist New started would show its triggerFunc and listeners.
	if err := goleak.Find(gossiptest.MemberlistLeftovers()...); err != nil {
		t.Errorf("New left goroutines running: %v", err)
	}
	assertUnbound(t, s)
	select {
	case <-d.Ready():
		t.Error("ready before Start")
	default:
	}
	if d.Syncer().Addr() != "" {
		t.Errorf("gossip bound before Start: %s", d.Syncer().Addr())
	}
}

// Each order of Start, Leave and Shutdown either works or returns an error,
// never panics, and leaves nothing bound and no goroutine behind; a Start
// failing at any bind undoes the binds before it.
func TestLifecycleOrders(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tt := range []struct {
		name string
		// take, if set, takes something the daemon needs before it starts.
		take func(t *testing.T, s config.Settings)
		// before, if set, runs between New and Start.
		before   func(t *testing.T, d *Daemon)
		startCtx context.Context // default: ctx
		// startErr is what Start must fail with: a sentinel, or (wantIn) a
		// part of the message; neither for a Start that works.
		startErr error
		wantIn   string
		// after runs on a daemon whose Start worked.
		after func(t *testing.T, d *Daemon)
		held  string // what take holds (see assertUnbound)
	}{
		{name: "start twice", after: func(t *testing.T, d *Daemon) {
			if err := d.Start(ctx); !errors.Is(err, ErrStarted) {
				t.Errorf("second Start: %v, want ErrStarted", err)
			}
			if err := d.Run(ctx); !errors.Is(err, ErrStarted) {
				t.Errorf("Run on a started daemon: %v, want ErrStarted", err)
			}
		}},
		{name: "shutdown twice", after: func(t *testing.T, d *Daemon) {
			mustShutdown(t, d)
			mustShutdown(t, d)
			if err := d.Start(ctx); !errors.Is(err, ErrShutdown) {
				t.Errorf("Start after Shutdown: %v, want ErrShutdown", err)
			}
		}},
		{name: "leave and shutdown, each twice", after: func(t *testing.T, d *Daemon) {
			for range 2 {
				if err := d.Leave(time.Second); err != nil {
					t.Errorf("Leave: %v", err)
				}
			}
			mustShutdown(t, d)
			if err := d.Leave(time.Second); err != nil {
				t.Errorf("Leave after Shutdown: %v", err)
			}
		}},
		{name: "shutdown before start", before: mustShutdown, startErr: ErrShutdown},
		{name: "leave before start", before: func(t *testing.T, d *Daemon) {
			if err := d.Leave(time.Second); err != nil {
				t.Errorf("Leave before Start: %v", err)
			}
		}},
		{name: "socket taken", held: "socket", startErr: ipc.ErrSocketInUse, take: func(t *testing.T, s config.Settings) {
			l, err := ipc.Listen(s.SocketPath, 0o600) // a live daemon's socket
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close(); os.Remove(s.SocketPath) })
		}},
		{name: "admin address taken", held: "admin", wantIn: "admin endpoint: listen on", take: func(t *testing.T, s config.Settings) {
			holdPort(t, s.AdminAddr)
		}},
		{name: "gossip port taken", held: "gossip", wantIn: "gossip: bind", take: func(t *testing.T, s config.Settings) {
			holdPort(t, s.Cluster.Bind)
		}},
		{name: "context already done", startCtx: cancelled, startErr: context.Canceled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, gossiptest.MemberlistLeftovers()...)
			s := lifeSettings(t)
			d, err := New(Config{Settings: s})
			if err != nil {
				t.Fatal(err)
			}
			if tt.take != nil {
				tt.take(t, s)
			}
			if tt.before != nil {
				tt.before(t, d)
			}
			sctx := tt.startCtx
			if sctx == nil {
				sctx = ctx
			}
			err = d.Start(sctx)
			switch {
			case tt.startErr == nil && tt.wantIn == "":
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				<-d.Ready()
				if tt.after != nil {
					tt.after(t, d)
				}
				mustShutdown(t, d)
				assertUnbound(t, s)
				return
			case tt.startErr != nil && !errors.Is(err, tt.startErr),
				tt.wantIn != "" && (err == nil || !strings.Contains(err.Error(), tt.wantIn)):
				t.Fatalf("Start: %v, want %v%s", err, tt.startErr, tt.wantIn)
			}
			select {
			case <-d.Ready():
				t.Error("a failed Start closed Ready")
			default:
			}
			assertUnbound(t, s, tt.held)
			if tt.held == "socket" {
				// The live daemon's socket is left alone.
				if _, err := os.Stat(s.SocketPath); err != nil {
					t.Errorf("the live daemon's socket was removed: %v", err)
				}
			}
			if err := d.Start(ctx); !errors.Is(err, ErrShutdown) {
				t.Errorf("Start after a failed Start: %v, want ErrShutdown", err)
			}
			if err := d.Run(ctx); !errors.Is(err, ErrShutdown) {
				t.Errorf("Run after a failed Start: %v, want ErrShutdown", err)
			}
			mustShutdown(t, d)
			mustShutdown(t, d)
		})
	}
}

func mustShutdown(t *testing.T, d *Daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// A started daemon serves on everything it bound; Shutdown releases all of
// it and waits for every goroutine it began.
func TestStartServesShutdownReleases(t *testing.T) {
	defer goleak.VerifyNone(t, gossiptest.MemberlistLeftovers()...)
	s := lifeSettings(t)
	d, err := New(Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-d.Ready()
	if _, err := os.Stat(s.SocketPath); err != nil {
		t.Errorf("no socket after Start: %v", err)
	}
	if c, err := net.Dial("tcp", s.AdminAddr); err != nil {
		t.Errorf("admin endpoint not serving after Start: %v", err)
	} else {
		c.Close()
	}
	if d.Syncer().Addr() != s.Cluster.Bind {
		t.Errorf("gossip on %q, want %s", d.Syncer().Addr(), s.Cluster.Bind)
	}
	if err := d.Leave(time.Second); err != nil {
		t.Errorf("Leave: %v", err)
	}
	mustShutdown(t, d)
	assertUnbound(t, s)
}

// Embedded has the same life: NewEmbedded binds nothing, Start binds the
// gossip port only, Close (Leave, Shutdown) releases it, and a second
// Start is refused.
func TestEmbeddedLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, gossiptest.MemberlistLeftovers()...)
	s := lifeSettings(t)
	e, err := NewEmbedded(Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	assertUnbound(t, s)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start: %v, want ErrStarted", err)
	}
	if _, err := os.Stat(s.SocketPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an embedded limiter made a socket: %v", err)
	}
	if c, err := net.Dial("tcp", s.AdminAddr); err == nil {
		c.Close()
		t.Error("an embedded limiter serves the admin endpoint")
	}
	if d := e.Allow(context.Background(), "four", "k"); !d.Allowed || d.FailedOpen {
		t.Errorf("decision: %+v", d)
	}
	if err := e.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	assertUnbound(t, s)

	holdPort(t, s.Cluster.Bind)
	if _, err := Embed(Config{Settings: s}); err == nil || !strings.Contains(err.Error(), "gossip: bind") {
		t.Errorf("Embed with the gossip port taken: %v", err)
	}
}

// When serving the socket fails, Run still leaves and shuts everything
// down before it returns the error (on main it returned with gossip, the
// endpoints and the loops still running).
func TestRunStopsEverythingWhenServingFails(t *testing.T) {
	defer goleak.VerifyNone(t, gossiptest.MemberlistLeftovers()...)
	s := lifeSettings(t)
	d, err := New(Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- d.Run(context.Background()) }()
	<-d.Ready()
	d.life.sock.Close() // Accept fails, not because of Shutdown
	select {
	case err := <-ran:
		if err == nil || !strings.Contains(err.Error(), "serve "+s.SocketPath) {
			t.Errorf("Run: %v, want the serving error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after serving failed")
	}
	assertUnbound(t, s)
}

// readyWatchWriter records, for each log line, whether the daemon had
// already announced readiness when the line was written.
type readyWatchWriter struct {
	ready       <-chan struct{}
	afterReady  []string
	beforeReady []string
}

func (w *readyWatchWriter) Write(p []byte) (int, error) {
	select {
	case <-w.ready:
		w.afterReady = append(w.afterReady, string(p))
	default:
		w.beforeReady = append(w.beforeReady, string(p))
	}
	return len(p), nil
}

// The start-up lines (the socket served, the gossip and whether it is
// encrypted) are written before readiness is announced: a probe that sees
// the daemon ready can read how it started (CI once read the log between
// the two and found no "encrypted" line).
func TestStartUpLinesComeBeforeReady(t *testing.T) {
	defer goleak.VerifyNone(t, gossiptest.MemberlistLeftovers()...)
	s := lifeSettings(t)
	w := &readyWatchWriter{}
	d, err := New(Config{Settings: s, Logger: hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Info})})
	if err != nil {
		t.Fatal(err)
	}
	w.ready = d.Ready()
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-d.Ready()
	mustShutdown(t, d)
	for _, want := range []string{"sluiced serving", "cluster gossip on"} {
		if !slices.ContainsFunc(w.beforeReady, func(l string) bool { return strings.Contains(l, want) }) {
			t.Errorf("%q was not logged before the daemon was ready; logged after: %q", want, w.afterReady)
		}
	}
}
