package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/ipc"
)

// Embedded is the limiter running inside the calling process: the same rules
// file, the same gossip and the same decisions as sluiced, with no socket and
// no second process. Its AllowAll has clientlib.Client's signature, so code
// written against one (such as the HTTP middleware) takes the other.
//
// Choose it when one process per host is all there is and the ~10 µs socket
// hop matters; choose the sidecar when several processes or languages on a
// host share limits, or when the limiter's memory and CPU should be isolated
// from the service (and survive its restarts with the balances it holds).
//
// Its life is the daemon's (see Daemon.Start): NewEmbedded (nothing bound,
// nothing running) → Start → Leave → Shutdown, or Embed then Close.
type Embedded struct {
	d *Daemon
}

// NewEmbedded builds a limiter for this process without starting it: it
// loads the rules and binds nothing, starts nothing. The socket and HTTP
// settings are ignored.
func NewEmbedded(cfg Config) (*Embedded, error) {
	d, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &Embedded{d: d}, nil
}

// Start joins the cluster if cfg.Settings.Cluster says so (binding the
// gossip port) and sweeps idle buckets; it neither watches nor polls the
// rules (Reload does). A Start that fails has undone what it did; as for
// the daemon, an Embedded runs once.
func (e *Embedded) Start(ctx context.Context) error { return e.d.start(ctx, false) }

// Leave sends the last counts and tells the cluster this node is going
// (see Daemon.Leave). Decisions are still made until Shutdown.
func (e *Embedded) Leave(timeout time.Duration) error { return e.d.Leave(timeout) }

// Shutdown stops gossip and the sweep and waits for them (see
// Daemon.Shutdown); it is idempotent and safe before Start.
func (e *Embedded) Shutdown(ctx context.Context) error { return e.d.Shutdown(ctx) }

// Embed builds and starts a limiter in this process: NewEmbedded, then
// Start. On error nothing is left bound or running.
func Embed(cfg Config) (*Embedded, error) {
	e, err := NewEmbedded(cfg)
	if err != nil {
		return nil, err
	}
	if err := e.Start(context.Background()); err != nil {
		return nil, err
	}
	return e, nil
}

// Daemon returns the underlying daemon (rules, store, syncer).
func (e *Embedded) Daemon() *Daemon { return e.d }

// Reload re-reads the rules file, as SIGHUP does for sluiced.
func (e *Embedded) Reload() error { return e.d.Reload() }

// Allow asks whether key may make one request under rule.
func (e *Embedded) Allow(ctx context.Context, rule, key string) clientlib.Decision {
	return e.d.Local().Allow(ctx, rule, key)
}

// AllowAll decides exactly as sluiced would for a CHECK of these checks (see Local.AllowAll).
func (e *Embedded) AllowAll(ctx context.Context, checks ...clientlib.Check) clientlib.Decision {
	return e.d.Local().AllowAll(ctx, checks...)
}

// Close leaves the cluster (after sending the last counts) and stops: Leave
// then Shutdown. Calling it again does nothing.
func (e *Embedded) Close() error {
	err := e.Leave(leaveTimeout)
	if serr := e.Shutdown(context.Background()); err == nil {
		err = serr
	}
	return err
}

// Local decides in this process, on the daemon's own buckets: what Embedded
// uses, and what sluiced's built-in proxy uses so that its requests skip the
// socket. It has clientlib.Client's AllowAll.
type Local struct{ d *Daemon }

// Local returns a limiter deciding directly on d.
func (d *Daemon) Local() Local { return Local{d} }

// Allow asks whether key may make one request under rule.
func (l Local) Allow(ctx context.Context, rule, key string) clientlib.Decision {
	return l.AllowAll(ctx, clientlib.Check{Rule: rule, Key: key, Cost: 1})
}

// AllowAll decides exactly as sluiced would for a CHECK of these checks sent
// through clientlib: a key longer than the store takes is replaced by its
// clientlib.BoundedKey, and a request that is itself invalid (no checks, an
// empty key, a cost below 1 or above the burst) is denied and marked Invalid,
// never failed open.
func (l Local) AllowAll(_ context.Context, checks ...clientlib.Check) clientlib.Decision {
	var cbuf [8]ipc.Check
	var rbuf [8]ipc.Result
	cs, rs := cbuf[:0], rbuf[:0]
	if len(checks) > len(cbuf) {
		cs, rs = make([]ipc.Check, 0, len(checks)), make([]ipc.Result, 0, len(checks))
	}
	if len(checks) == 0 {
		return clientlib.InvalidDecision(fmt.Errorf("%w: no checks", clientlib.ErrInvalid))
	}
	maxKey := l.d.store.MaxKeyLen()
	for _, c := range checks {
		if c.Cost < 1 || len(c.Key) == 0 {
			return clientlib.InvalidDecision(fmt.Errorf("%w: each check needs a key and a cost of at least 1", clientlib.ErrInvalid))
		}
		key := c.Key
		if len(key) > maxKey {
			key = clientlib.BoundedKey(key, maxKey)
		}
		// Decide neither keeps nor changes these bytes (the store copies a
		// key when it creates its bucket), so the strings are lent, not copied.
		cs = append(cs, ipc.Check{Rule: bytesOf(c.Rule), Key: bytesOf(key), Cost: uint64(c.Cost), MaxDelay: c.MaxDelay})
	}
	rs = rs[:len(cs)]
	allowed, err := l.d.Decide(cs, rs)
	if err != nil {
		if e := (*ipc.Error)(nil); errors.As(err, &e) && e.Code != ipc.CodeInternal {
			return clientlib.InvalidDecision(fmt.Errorf("%w: %w", clientlib.ErrInvalid, err))
		}
		return l.failOpen(err)
	}
	return clientlib.DecisionOf(allowed, rs)
}

// failOpen admits a request the daemon could not decide, counted and logged
// (at most one line per cause per 10 s, with the count).
func (l Local) failOpen(err error) clientlib.Decision {
	l.d.undecided.Record(err)
	return clientlib.Decision{Allowed: true, FailedOpen: true, Denied: -1, Deciding: -1, Err: err}
}

// FailOpens counts, by cause, the in-process decisions that could not be
// made and failed open.
func (e *Embedded) FailOpens() *clientlib.FailOpenLog { return e.d.undecided }

func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
