package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/sluicelabs/sluice/internal/buildinfo"
	"github.com/sluicelabs/sluice/ipc"
)

// A Daemon's life follows serf's agent, as gossip.Syncer's does: New
// (validate and load the rules; nothing bound, nothing running) → Start
// (bind the socket, the HTTP endpoints and the gossip port, then run) →
// Leave (send the last counts, tell the cluster) → Shutdown (stop serving,
// stop everything Start began, wait for it). Run does all of it.

// Lifecycle errors.
var (
	// ErrStarted is returned by Start (and Run) on a daemon already started.
	ErrStarted = errors.New("daemon: already started")
	// ErrShutdown is returned by Start (and Run) after Shutdown, or after a
	// Start that failed: a daemon runs at most once (its gossip cannot
	// rejoin once it has left); make a new one.
	ErrShutdown = errors.New("daemon: shut down")
)

// lifeState is where a daemon is in its life; under lifecycle.mu.
type lifeState int

const (
	created lifeState = iota
	running
	left
	shutDown
)

// lifecycle is what Start began and Shutdown ends.
type lifecycle struct {
	mu    sync.Mutex // held by Start, Leave and Shutdown throughout
	state lifeState
	serve bool // the socket and the HTTP endpoints are served (not Embedded)

	sock     net.Listener // the socket's listener, nil when not serving
	sockInfo os.FileInfo  // the socket file Start created, to remove it and no other
	eps      []*httpEndpoint

	stop         context.CancelFunc // ends the loops below
	wg           sync.WaitGroup     // every goroutine Start began
	stopWarnings func()             // the insecure-gossip warnings
	serveErr     chan error         // the socket's serving, ended by an error
}

// Start binds, in this order, the socket, the admin and metrics endpoints
// and the gossip port (UDP and TCP), then serves: the socket, the endpoints, the cluster's
// gossip and joining, the rules file's watch or the rules service's poll,
// and the sweep of idle buckets. "sluiced serving" is logged, and Ready
// closed, only once all of it is bound. ctx bounds the start only (a
// context already done starts nothing); the daemon runs until Shutdown.
//
// A Start that fails has undone what it did (nothing is left bound or
// running, and the socket file it created is removed) and returns what
// failed; the daemon is then shut down: Start again returns ErrShutdown,
// and Shutdown is safe. Start on a started daemon returns ErrStarted.
func (d *Daemon) Start(ctx context.Context) error { return d.start(ctx, true) }

func (d *Daemon) start(ctx context.Context, serve bool) (err error) {
	lc := &d.life
	lc.mu.Lock()
	defer lc.mu.Unlock()
	switch lc.state {
	case created:
	case shutDown:
		return ErrShutdown
	default:
		return ErrStarted
	}
	lc.state, lc.serve = shutDown, serve // until everything is up
	defer func() {
		if err != nil {
			d.undoStart()
		}
	}()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if serve {
		// The socket first: what is wrong with it (a path too long, a
		// directory that cannot be made, another daemon serving there) is
		// reported whatever the state of the HTTP addresses.
		l, err := ipc.ListenWith(d.settings.SocketPath, d.settings.SocketMode, ipc.ListenOptions{SharedVolume: d.settings.SocketSharedVolume})
		if err != nil {
			return err
		}
		lc.sock = l
		lc.sockInfo, _ = os.Stat(d.settings.SocketPath)
		if lc.eps, err = d.listenHTTP(); err != nil {
			return err
		}
	}
	if d.syncer != nil {
		if err := d.syncer.Start(); err != nil {
			return err
		}
	}

	// Everything is bound: run.
	bg, stop := context.WithCancel(context.Background())
	lc.stop, lc.stopWarnings = stop, func() {}
	d.goRun(func() { d.sweepLoop(bg) })
	if serve {
		d.serveHTTP(lc.eps, &lc.wg)
		if d.fetcher != nil {
			d.goRun(func() { d.pollRules(bg) })
		}
		if d.settings.RulesPath != "" && !d.settings.NoWatch {
			if loop, ok := d.startWatch(); ok { // set up before Ready: no change after it is missed
				d.goRun(func() { loop(bg) })
			}
		}
		stopEnvoy := d.watchEnvoy(bg) // the Envoy configuration's watch, if any
		d.goRun(func() { <-bg.Done(); stopEnvoy() })
		if d.syncer != nil {
			lc.stopWarnings = d.startInsecureWarnings(bg)
		}
		lc.serveErr = make(chan error, 1)
		d.goRun(func() {
			if err := d.server.Serve(lc.sock, d.settings.SocketPath); !errors.Is(err, ipc.ErrServerClosed) {
				lc.serveErr <- fmt.Errorf("serve %s: %w", d.settings.SocketPath, err)
			}
		})
	}
	lc.state = running
	// The start-up lines are written before readiness is announced, so a
	// probe that sees the daemon ready can also read how it started.
	if serve {
		rs := d.rules.Load()
		d.log.Info("sluiced serving", "socket", d.settings.SocketPath, "node", d.settings.NodeName,
			"rules", rs.rules.Source, "rule_count", len(rs.byName), "rules_hash", rs.rules.Hash,
			"version", version, "revision", buildinfo.Get().RevisionString(), "go", buildinfo.Get().GoVersion)
		if d.syncer != nil {
			d.log.Info("cluster gossip on", "addr", d.syncer.Addr(), "join", d.settings.Cluster.Join,
				"encrypted", d.settings.Cluster.Encrypted())
		}
	}
	close(d.ready)
	return nil
}

// goRun runs fn in a goroutine Shutdown waits for.
func (d *Daemon) goRun(fn func()) {
	d.life.wg.Add(1)
	go func() { defer d.life.wg.Done(); fn() }()
}

// undoStart releases what a failed Start bound, before any goroutine began.
func (d *Daemon) undoStart() {
	lc := &d.life
	closeHTTP(lc.eps)
	waitHTTP(lc.eps)
	d.closeSocket()
	if d.syncer != nil {
		d.syncer.Shutdown() // safe whether or not its Start ran or failed
	}
}

// closeSocket closes the socket's listener and removes the socket file if
// it is still the one Start created (never another daemon's).
func (d *Daemon) closeSocket() {
	lc := &d.life
	if lc.sock == nil {
		return
	}
	lc.sock.Close()
	if fi, err := os.Stat(d.settings.SocketPath); err == nil && lc.sockInfo != nil && os.SameFile(fi, lc.sockInfo) {
		os.Remove(d.settings.SocketPath)
	}
}

// ServeError delivers the error that ended the socket's serving before
// Shutdown (the daemon then still needs Shutdown); nothing is ever sent
// otherwise, and nil is returned before Start.
func (d *Daemon) ServeError() <-chan error {
	d.life.mu.Lock()
	defer d.life.mu.Unlock()
	return d.life.serveErr
}

// Leave sends what this node admitted and has not yet reported, then tells
// the cluster it is leaving and waits up to timeout for that to be sent.
// The daemon keeps answering until Shutdown, whose counts still go out. It
// does nothing outside a cluster, before Start, a second time or after
// Shutdown.
func (d *Daemon) Leave(timeout time.Duration) error {
	lc := &d.life
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.state != running {
		return nil
	}
	lc.state = left
	if d.syncer == nil {
		return nil
	}
	d.syncer.Flush()
	if err := d.syncer.Leave(timeout); err != nil {
		return fmt.Errorf("leave the cluster: %w", err)
	}
	return nil
}

// Shutdown stops the daemon: it stops accepting on the socket and answers
// the requests already received (until ctx ends; then their connections
// are closed), removes the socket, closes the HTTP endpoints, stops the
// rules' watch or poll, the sweep and gossip, and waits for every goroutine
// Start began. After Leave, the counts admitted since are sent before
// gossip stops; without Leave, gossip stops first and the cluster is told
// nothing, as after a crash. Shutdown is idempotent (a second call waits
// for the first), and safe before Start and after a failed Start. The error
// is ctx's when requests were cut short.
func (d *Daemon) Shutdown(ctx context.Context) error {
	lc := &d.life
	lc.mu.Lock()
	defer lc.mu.Unlock()
	switch lc.state {
	case shutDown:
		return nil
	case created:
		lc.state = shutDown
		return nil
	}
	wasLeft := lc.state == left
	lc.state = shutDown
	if lc.serve {
		d.log.Info("shutting down")
	}
	if d.syncer != nil && !wasLeft {
		d.shutdownGossip() // vanish without a word, as a crash would
	}
	var err error
	if lc.serve {
		if serr := d.server.Shutdown(ctx); serr != nil {
			err = fmt.Errorf("shutdown: %w", serr)
		}
		d.closeSocket() // if Serve never took the listener, or ended early
		closeHTTP(lc.eps)
	}
	if d.syncer != nil && wasLeft {
		d.syncer.Flush() // peers learn what was admitted last
		d.shutdownGossip()
	}
	lc.stopWarnings()
	lc.stop()
	lc.wg.Wait()
	waitHTTP(lc.eps)
	if d.fetcher != nil {
		d.fetcher.closeIdle()
	}
	if lc.serve {
		d.log.Info("stopped")
	}
	return err
}

func (d *Daemon) shutdownGossip() {
	if err := d.syncer.Shutdown(); err != nil {
		d.log.Warn("stopping gossip", "error", err)
	}
}

// Run starts the daemon, serves until ctx ends (or serving the socket
// fails), then leaves the cluster and shuts down gracefully, waiting up to
// Settings.ShutdownTimeout for the requests already received. It returns
// Start's error, serving's, or Shutdown's.
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.Start(ctx); err != nil {
		return err
	}
	var err error
	select {
	case err = <-d.ServeError():
	case <-ctx.Done():
	}
	if lerr := d.Leave(leaveTimeout); lerr != nil {
		d.log.Warn("leaving the cluster", "error", lerr)
	}
	sctx, cancel := context.WithTimeout(context.Background(), d.settings.ShutdownTimeout)
	defer cancel()
	if serr := d.Shutdown(sctx); err == nil {
		err = serr
	}
	return err
}
