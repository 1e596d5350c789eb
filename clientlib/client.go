package clientlib

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice/internal/backoff"
	"github.com/sluicelabs/sluice/ipc"
)

// Errors carried by Decision.Err when the daemon did not decide.
var (
	ErrDaemonDown = errors.New("sluiced unavailable")
	ErrTimeout    = errors.New("sluiced did not answer in time")
	ErrClosed     = errors.New("client closed")
	ErrProtocol   = errors.New("sluiced protocol error")
)

// ErrInvalid is carried by Decision.Err when the request itself is invalid
// (no checks, a cost below 1, an empty key, more checks than the daemon
// takes, a cost above the rule's burst): the daemon, or the client on its
// behalf, decided to refuse it. Such a request is denied, never failed open,
// so that no caller can switch its own limit off by asking wrongly.
var ErrInvalid = errors.New("invalid rate-limit request")

// Options configure a Client. Zero fields take the defaults noted.
type Options struct {
	// SocketPath is the daemon's socket. Default: ipc.DefaultSocketPath().
	SocketPath string
	// Timeout bounds each call, including a context's longer deadline. Default 5ms.
	Timeout time.Duration
	// FailClosed makes undecided calls deny instead of allow.
	FailClosed bool
	// Conns is the number of connections callers share. Default 2.
	Conns int
	// DialTimeout bounds one connection attempt including the handshake. Default 1s.
	DialTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the reconnect backoff. Defaults 10ms and 2s.
	ReconnectMin, ReconnectMax time.Duration
	// Name identifies this client to the daemon. Default: the program's name.
	Name string
	// Jitter returns a random number in [0, 1) used to spread reconnects.
	// Default: math/rand/v2.Float64. Tests inject their own.
	Jitter func() float64

	// Log receives a line for every cause of undecided calls, at most one
	// per cause per LogInterval, with the count since the cause's last line
	// (see FailOpenLog), and a line, once, for each distinct reason the
	// socket cannot be reached or trusted (see ReachError). Default: the
	// log/slog default logger at Warn. To count without logging, pass a
	// function that does nothing.
	Log LogFunc
	// LogInterval is the least time between two lines of the same cause. Default 10s.
	LogInterval time.Duration

	// DaemonUIDs are the users the daemon may run as. Before trusting a
	// connection the client reads the credentials of the process serving
	// the socket (SO_PEERCRED, which that process cannot forge) and refuses
	// it unless its uid is listed: a local user who puts its own socket at
	// the path cannot answer for the daemon. A refused connection is a
	// failure to decide (CauseUntrusted: counted, logged with the path, the
	// uid found and the uids expected). Default: $SLUICE_DAEMON_UIDS
	// (comma-separated) if set, else root and this process's own uid.
	// Checked on Linux only; elsewhere see PeerCredChecked.
	DaemonUIDs []uint32
}

// setDefaults fills in zero fields and returns why the socket path is what
// it is.
func (o *Options) setDefaults() (pathWhy string) {
	pathWhy = "set by Options.SocketPath"
	if o.SocketPath == "" {
		o.SocketPath, pathWhy = SocketPathChoice()
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Millisecond
	}
	if o.Conns <= 0 {
		o.Conns = 2
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = time.Second
	}
	if o.ReconnectMin <= 0 {
		o.ReconnectMin = 10 * time.Millisecond
	}
	if o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = max(2*time.Second, o.ReconnectMin)
	}
	if o.Name == "" {
		o.Name = filepath.Base(os.Args[0])
	}
	if o.Jitter == nil {
		o.Jitter = rand.Float64
	}
	if o.Log == nil {
		o.Log = slogWarn
	}
	if len(o.DaemonUIDs) == 0 {
		if uids, err := defaultDaemonUIDs(); err == nil {
			o.DaemonUIDs = uids
		} else {
			// A malformed $SLUICE_DAEMON_UIDS trusts only root, and says so.
			o.DaemonUIDs = []uint32{0}
			o.Log("sluice: ignoring a malformed trusted-daemon list; trusting root only", "error", err.Error())
		}
	} else {
		o.DaemonUIDs = slices.Clone(o.DaemonUIDs)
	}
	return pathWhy
}

// slogWarn logs through the log/slog default logger as it is when the line
// is written, so a program may set its logger after making its clients.
func slogWarn(msg string, keyvals ...any) { slog.Default().Warn(msg, keyvals...) }

// Check is one limit to check: the named rule, applied to key, at a cost in tokens.
type Check struct {
	Rule string
	Key  string
	Cost int64
	// MaxDelay, when positive, asks for shaping: if the tokens will be there
	// within MaxDelay they are reserved now, and the decision is allowed
	// with a Delay the caller must wait before going ahead.
	MaxDelay time.Duration
}

// Decision is the answer to a call.
type Decision struct {
	// Allowed says whether to let the request through. Always meaningful: when
	// the daemon did not decide it is true, or false under FailClosed.
	Allowed bool
	// Limit, Remaining, RetryAfter and ResetAfter describe the deciding check:
	// the denying check with the longest wait, or when all admit the one with
	// the fewest tokens left. Zero when the daemon did not decide.
	Limit      int64
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	// Period is the deciding check's rule period: Limit tokens per Period.
	Period time.Duration
	// Delay is how long to wait before going ahead, when a shaped check was
	// admitted by reserving a later turn (see Check.MaxDelay); 0 otherwise.
	Delay time.Duration
	// Status is the deciding check's status.
	Status ipc.Status
	// Denied is the index of the deciding check when the request is denied, else -1.
	Denied int
	// Deciding is the index of the check Limit, Remaining and the durations
	// describe (-1 when the daemon did not decide).
	Deciding int
	// FailedOpen is true when the daemon did not decide (even under
	// FailClosed, where the decision is then a denial); Err says why.
	FailedOpen bool
	// Invalid is true when the request itself was invalid (see ErrInvalid):
	// it is denied whatever FailClosed says, and Err says why.
	Invalid bool
	Err     error
}

// Stats counts a client's outcomes since it was made.
type Stats struct {
	Decisions    uint64 // calls the daemon decided
	Denied       uint64 // of those, denied
	FailedOpen   uint64 // calls not decided and allowed
	FailedClosed uint64 // calls not decided and denied (FailClosed)
	Timeouts     uint64 // of the undecided, those that hit the deadline
	Reconnects   uint64 // connections made to replace ones that died
	Invalid      uint64 // calls refused as invalid requests (see ErrInvalid)
	Untrusted    uint64 // connections refused: the socket's server is not a trusted daemon (see Options.DaemonUIDs)
}

// Client talks to one daemon. Make one with New or Dial and share it.
type Client struct {
	opts    Options
	pathWhy string // why opts.SocketPath is what it is
	slots   []atomic.Pointer[conn]
	next    atomic.Uint32
	// up is set while at least one connection is live; callers fail fast otherwise.
	up atomic.Bool

	calls sync.Pool

	kick     chan struct{}
	closed   chan struct{}
	closeOne sync.Once
	wg       sync.WaitGroup

	decisions, denied, failedOpen, failedClosed, timeouts, reconnects, invalid, untrusted atomic.Uint64

	// failLog counts and logs undecided calls by cause.
	failLog *FailOpenLog
	// downErr is what calls fail with while no connection is up: the last
	// reason the daemon could not be reached (a *ReachError once known).
	downErr atomic.Pointer[error]
	// reachLogged is the text of the last ReachError logged (reconnect loop only).
	reachLogged string
	// reportedOpen and reportedClosed are the counts already sent to the
	// daemon in REPORTs, so it can count what its clients decided without it.
	reportedOpen, reportedClosed atomic.Uint64
}

// New returns a client that connects in the background; calls made before the
// first connection is up fail open. New does not block.
//
// New looks at the socket path before returning, without connecting: when
// the path is missing, or this process lacks the permissions to connect,
// the first call already fails with a ReachError naming the path, the cause
// and the fix, and the log says so once.
func New(opts Options) *Client {
	why := opts.setDefaults()
	c := newClient(opts, why)
	if re := examinePath(opts.SocketPath, why); re != nil {
		c.unreachable(re)
	}
	c.start()
	return c
}

// Dial connects to the daemon before returning, and returns an error (and no
// client) if the first attempt fails or ctx ends first. After that the client
// behaves as one from New.
//
// A failure to reach or trust the daemon is a *ReachError, which names the
// socket path, what was found there and how to fix it.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	why := opts.setDefaults()
	if dl, ok := ctx.Deadline(); ok {
		opts.DialTimeout = min(opts.DialTimeout, time.Until(dl))
	}
	c := newClient(opts, why)
	cn, err := dial(c, opts)
	if err != nil {
		var re *ReachError
		if errors.As(err, &re) {
			return nil, err
		}
		return nil, fmt.Errorf("dial sluiced at %s: %w", opts.SocketPath, err)
	}
	c.slots[0].Store(cn)
	c.up.Store(true)
	c.start()
	return c, nil
}

func newClient(opts Options, pathWhy string) *Client {
	c := &Client{
		opts:    opts,
		pathWhy: pathWhy,
		failLog: NewFailOpenLog(opts.Log, opts.LogInterval, opts.FailClosed, nil),
		slots:   make([]atomic.Pointer[conn], opts.Conns),
		kick:    make(chan struct{}, 1),
		closed:  make(chan struct{}),
	}
	down := error(&ReachError{Path: opts.SocketPath, Cause: "not connected yet", Err: ErrDaemonDown,
		Fix: "the client is still making its first connection"})
	c.downErr.Store(&down)
	c.calls.New = func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return &call{done: make(chan struct{}, 1), timer: t}
	}
	return c
}

func (c *Client) start() {
	c.wg.Add(1)
	go c.reconnectLoop()
	c.wake()
}

// Close closes the connections and stops reconnecting; later calls fail open
// (or closed) with ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	c.closeOne.Do(func() {
		close(c.closed)
		for i := range c.slots {
			if cn := c.slots[i].Swap(nil); cn != nil {
				cn.fail(ErrClosed)
			}
		}
	})
	c.wg.Wait()
	return nil
}

// Up reports whether the client has a live connection to the daemon.
func (c *Client) Up() bool { return c.up.Load() }

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{
		Decisions:    c.decisions.Load(),
		Denied:       c.denied.Load(),
		FailedOpen:   c.failedOpen.Load(),
		FailedClosed: c.failedClosed.Load(),
		Timeouts:     c.timeouts.Load(),
		Reconnects:   c.reconnects.Load(),
		Invalid:      c.invalid.Load(),
		Untrusted:    c.untrusted.Load(),
	}
}

// FailOpens returns the log that counts this client's undecided calls by
// cause (FailOpenLog.Total, Totals).
func (c *Client) FailOpens() *FailOpenLog { return c.failLog }

// SocketPath returns the socket the client connects to, and why that path.
func (c *Client) SocketPath() (path, why string) { return c.opts.SocketPath, c.pathWhy }

// Allow asks whether key may make one request under rule.
func (c *Client) Allow(ctx context.Context, rule, key string) Decision {
	return c.AllowN(ctx, rule, key, 1)
}

// AllowN asks whether key may make a request costing cost tokens under rule.
func (c *Client) AllowN(ctx context.Context, rule, key string, cost int64) Decision {
	single := [1]Check{{Rule: rule, Key: key, Cost: cost}}
	return c.AllowAll(ctx, single[:]...)
}

// AllowAll checks several limits at once (for example per user and per
// route). The request is admitted only if every check admits, and only then
// is every check charged.
func (c *Client) AllowAll(ctx context.Context, checks ...Check) Decision {
	if len(checks) == 0 {
		return c.refuseInvalid(fmt.Errorf("%w: no checks", ErrInvalid))
	}
	for i := range checks {
		if checks[i].Cost < 1 {
			return c.refuseInvalid(fmt.Errorf("%w: check %d: cost %d must be at least 1", ErrInvalid, i, checks[i].Cost))
		}
		if checks[i].Key == "" {
			return c.refuseInvalid(fmt.Errorf("%w: check %d: empty key", ErrInvalid, i))
		}
	}
	select {
	case <-c.closed:
		return c.undecided(ErrClosed, false)
	default:
	}
	if !c.up.Load() {
		return c.undecided(*c.downErr.Load(), false)
	}
	cn := c.pick()
	if cn == nil {
		return c.undecided(*c.downErr.Load(), false)
	}
	if err := ctx.Err(); err != nil {
		return c.undecided(err, false)
	}
	deadline := c.deadline(ctx)

	cl := c.calls.Get().(*call)
	defer c.calls.Put(cl)
	if err := cn.send(ctx, cl, checks, deadline); err != nil {
		if errors.Is(err, ErrInvalid) {
			return c.refuseInvalid(err)
		}
		return c.undecided(err, errors.Is(err, ErrTimeout))
	}
	if err := cn.await(ctx, cl, deadline); err != nil {
		return c.undecided(err, errors.Is(err, ErrTimeout))
	}
	if cl.err != nil {
		if IsInvalidRequest(cl.err) {
			return c.refuseInvalid(fmt.Errorf("%w: %w", ErrInvalid, cl.err))
		}
		return c.undecided(cl.err, false)
	}
	return c.decided(&cl.reply)
}

// deadline is when a call made now must have returned: Options.Timeout
// from now, or ctx's deadline if that is sooner.
func (c *Client) deadline(ctx context.Context) time.Time {
	d := time.Now().Add(c.opts.Timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

// IsInvalidRequest reports whether err is the daemon refusing one request as
// invalid (an ERROR with a request id and a request-level code other than
// CodeInternal), as opposed to failing to decide it.
func IsInvalidRequest(err error) bool {
	var e *ipc.Error
	if !errors.As(err, &e) {
		return errors.Is(err, ErrInvalid)
	}
	return e.ID != 0 && e.Code >= ipc.CodeBatchTooLarge && e.Code != ipc.CodeInternal
}

// Inspect reads a key's bucket in the daemon without charging it. Unlike
// the Allow family it reports failure as an error: there is nothing to fail
// open to.
func (c *Client) Inspect(ctx context.Context, rule, key string) (ipc.Inspection, error) {
	select {
	case <-c.closed:
		return ipc.Inspection{}, ErrClosed
	default:
	}
	cn := c.pick()
	if cn == nil {
		return ipc.Inspection{}, *c.downErr.Load()
	}
	deadline := c.deadline(ctx)
	cl := c.calls.Get().(*call)
	defer c.calls.Put(cl)
	if maxKey := int(cn.welcome.MaxKeyLen); maxKey > 0 && len(key) > maxKey {
		key = BoundedKey(key, maxKey)
	}
	if err := cn.write(ctx, cl, deadline, inspectSize(rule, key), func(b []byte, id uint64) []byte {
		return ipc.AppendInspect(b, id, rule, key)
	}); err != nil {
		return ipc.Inspection{}, err
	}
	if err := cn.await(ctx, cl, deadline); err != nil {
		return ipc.Inspection{}, err
	}
	if cl.err != nil {
		return ipc.Inspection{}, cl.err
	}
	return cl.inspect, nil
}

// pick returns a live connection, starting from the next slot in turn.
func (c *Client) pick() *conn {
	n := uint32(len(c.slots))
	start := c.next.Add(1)
	for i := range n {
		if cn := c.slots[(start+i)%n].Load(); cn != nil && !cn.dead.Load() {
			return cn
		}
	}
	return nil
}

func (c *Client) decided(rep *ipc.Reply) Decision {
	c.decisions.Add(1)
	d := DecisionOf(rep.Allowed, rep.Results)
	if !rep.Allowed {
		c.denied.Add(1)
	}
	return d
}

// DecisionOf summarises a daemon's per-check results as one Decision. An
// embedded limiter, deciding in-process, uses it to answer exactly as a
// Client would.
func DecisionOf(allowed bool, results []ipc.Result) Decision {
	d := Decision{Allowed: allowed, Denied: -1, Deciding: -1}
	best := -1
	for i := range results {
		if best < 0 || moreRestrictive(results[i], results[best]) {
			best = i
		}
		if allowed && results[i].Status == ipc.StatusDelayed {
			d.Delay = max(d.Delay, results[i].RetryAfter)
		}
	}
	if best < 0 {
		return d
	}
	r := results[best]
	d.Limit, d.Remaining, d.ResetAfter, d.Period, d.Status = int64(r.Limit), int64(r.Remaining), r.ResetAfter, r.Period, r.Status
	d.Deciding = best
	if !allowed {
		d.RetryAfter, d.Denied = r.RetryAfter, best
	}
	return d
}

// moreRestrictive orders check results: denials before admissions, then the
// longer wait, or among admissions the fewer tokens left.
func moreRestrictive(a, b ipc.Result) bool {
	if a.Status.Admits() != b.Status.Admits() {
		return !a.Status.Admits()
	}
	if !a.Status.Admits() {
		return a.RetryAfter > b.RetryAfter
	}
	return a.Remaining < b.Remaining
}

// refuseInvalid denies a request that is itself invalid. It is a decision,
// not a failure to decide: FailClosed does not matter and nothing fails open.
func (c *Client) refuseInvalid(err error) Decision {
	c.invalid.Add(1)
	return InvalidDecision(err)
}

// InvalidDecision is the denial of an invalid request (see ErrInvalid). An
// embedded limiter uses it to answer exactly as a Client would.
func InvalidDecision(err error) Decision {
	return Decision{Allowed: false, Invalid: true, Denied: -1, Deciding: -1, Err: err}
}

func (c *Client) undecided(err error, timedOut bool) Decision {
	if timedOut {
		c.timeouts.Add(1)
	}
	c.failLog.Record(err)
	if c.opts.FailClosed {
		c.failedClosed.Add(1)
		return Decision{Allowed: false, Denied: -1, Deciding: -1, FailedOpen: true, Err: err}
	}
	c.failedOpen.Add(1)
	return Decision{Allowed: true, Denied: -1, Deciding: -1, FailedOpen: true, Err: err}
}

// appendReport appends a REPORT of the calls decided without the daemon
// since the last one, if there were any; most calls find none and append
// nothing. A report lost with its connection is not sent again.
func (c *Client) appendReport(b []byte) []byte {
	fo, ro := c.failedOpen.Load(), c.reportedOpen.Load()
	fc, rc := c.failedClosed.Load(), c.reportedClosed.Load()
	if fo == ro && fc == rc {
		return b
	}
	var r ipc.Report
	if fo != ro && c.reportedOpen.CompareAndSwap(ro, fo) {
		r.FailedOpen = fo - ro
	}
	if fc != rc && c.reportedClosed.CompareAndSwap(rc, fc) {
		r.FailedClosed = fc - rc
	}
	if r == (ipc.Report{}) {
		return b
	}
	return ipc.AppendReport(b, r)
}

// connLost is called by a connection that died of err: callers fail fast,
// with err and the path, once no connection is left, and the reconnect loop
// starts.
func (c *Client) connLost(err error) {
	down := error(&ReachError{Path: c.opts.SocketPath, Cause: "connection lost", Detail: err.Error(), Err: err,
		Fix: "reconnecting with backoff; if this repeats, see sluiced's log"})
	c.downErr.Store(&down)
	if c.pick() == nil {
		c.up.Store(false)
	}
	c.wake()
}

func (c *Client) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// youngDeath is how long a connection must live to count as a success: one
// that dies sooner (a daemon that accepts, handshakes, then closes or speaks
// nonsense) counts as a failed dial, so the backoff keeps growing instead of
// starting over at every handshake.
const youngDeath = time.Second

// unreachable records why the daemon cannot be reached, so that calls fail
// with it, and logs each distinct reason once.
//
// The line is written before calls can see err, so a caller that has been
// refused with it can rely on the log already saying why.
func (c *Client) unreachable(err error) {
	var re *ReachError
	if errors.As(err, &re) && errors.Is(err, ErrUntrustedDaemon) {
		c.untrusted.Add(1)
	}
	if msg := err.Error(); msg != c.reachLogged {
		c.reachLogged = msg
		c.opts.Log("sluice: cannot reach sluiced; calls fail "+c.failMode()+" until it can be reached",
			"path", c.opts.SocketPath, "error", msg)
	}
	c.downErr.Store(&err)
}

// reachable notes a connection made: after a logged failure, it says so.
func (c *Client) reachable() {
	if c.reachLogged == "" {
		return
	}
	c.reachLogged = ""
	c.opts.Log("sluice: reached sluiced again", "path", c.opts.SocketPath)
}

func (c *Client) failMode() string {
	if c.opts.FailClosed {
		return "closed (denied)"
	}
	return "open (allowed)"
}

// reconnectLoop fills empty connection slots, backing off while dials fail
// and while connections die young (see youngDeath).
func (c *Client) reconnectLoop() {
	defer c.wg.Done()
	// Full jitter over [d/2, d): reconnecting clients spread out.
	retry := backoff.Policy{Min: c.opts.ReconnectMin, Max: c.opts.ReconnectMax, Spread: 0.5}
	failures := 0           // dials failed (or connections died young) in a row
	var notBefore time.Time // no dialling before this: the backoff in force
	replacing := make([]bool, len(c.slots))
	timer := time.NewTimer(0)
	timer.Stop()
	wait := func(now time.Time) {
		failures++
		w := retry.Delay(failures, c.opts.Jitter())
		notBefore = now.Add(w)
		timer.Reset(w)
	}
	for {
		select {
		case <-c.closed:
			return
		case <-c.kick:
		case <-timer.C:
		}
		now := time.Now()
		// Clear out dead connections, noting whether they lived long.
		young, old := false, false
		for i := range c.slots {
			cn := c.slots[i].Load()
			if cn == nil || !cn.dead.Load() {
				continue
			}
			if c.slots[i].CompareAndSwap(cn, nil) {
				replacing[i] = true
				if cn.lifetime() < youngDeath {
					young = true
				} else {
					old = true
				}
			}
		}
		if young {
			wait(now) // as good as a failed dial
			continue
		}
		if old {
			failures, notBefore = 0, time.Time{}
		}
		if now.Before(notBefore) {
			timer.Reset(notBefore.Sub(now))
			continue
		}
		failed := false
		for i := range c.slots {
			if c.slots[i].Load() != nil {
				continue
			}
			cn, err := dial(c, c.opts)
			if err != nil {
				c.unreachable(err)
				failed = true
				break
			}
			c.slots[i].Store(cn)
			select {
			case <-c.closed:
				if c.slots[i].CompareAndSwap(cn, nil) {
					cn.fail(ErrClosed)
				}
				return
			default:
			}
			if replacing[i] {
				c.reconnects.Add(1) // replaces a connection that died
				replacing[i] = false
			}
			c.up.Store(true)
			c.reachable()
		}
		if failed {
			wait(time.Now())
		}
	}
}
