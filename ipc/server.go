package ipc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice/internal/backoff"
)

// Decider makes the decisions the server is asked for. Decide is called from
// many connections at once and must be safe for concurrent use. It fills
// results[i] for checks[i] (len(results) == len(checks)) and reports whether
// the request as a whole is admitted; it must charge nothing unless every check
// admits. It must not retain checks' byte slices, and must not block: it runs
// on the connection's goroutine, between reading a request and replying.
// An error refuses the request; return an *Error to choose its code.
type Decider interface {
	Decide(checks []Check, results []Result) (allowed bool, err error)
}

// Inspector is optionally implemented by a Decider to answer INSPECT. The
// same rules apply: concurrent, non-blocking, no retaining the slices.
type Inspector interface {
	Inspect(rule, key []byte) Inspection
}

// Reporter is optionally implemented by a Decider to receive clients'
// REPORTs of the calls they decided without the server. It must not block.
type Reporter interface {
	ClientReport(client string, r Report)
}

// Logger is the logging the server needs; hclog.Logger satisfies it.
type Logger interface {
	Debug(msg string, args ...interface{})
	Warn(msg string, args ...interface{})
}

// ServerConfig bounds a Server. Zero fields take the defaults noted.
type ServerConfig struct {
	Name             string        // sent in WELCOME
	MaxFrame         int           // default 64 KiB
	MaxBatch         int           // default 16
	MaxKeyLen        int           // default 256
	MaxConns         int           // default 4096
	HandshakeTimeout time.Duration // time allowed to send HELLO; default 5s
	WriteTimeout     time.Duration // time a reply may wait on a client that does not read; default 5s
	// FrameTimeout is the time a frame, once begun, has to arrive whole; a
	// client that sends part of a frame and stalls (slow loris) is closed
	// after it. Default 5s.
	FrameTimeout time.Duration
	// IdleReap: when a client connects while MaxConns connections are
	// open, the connection that has waited longest for its next frame (or
	// its HELLO) is closed to make room, if it has waited at least
	// IdleReap; only when none has is the newcomer refused. So idle,
	// silent or stalled connections cannot lock clients out. Default 1s.
	IdleReap time.Duration
	// MaxLargeFrames bounds the frames larger than a connection's read
	// buffer (4 KiB) held at once, over all connections; each takes a
	// buffer of its size (at most MaxFrame) while it arrives and is
	// answered. A connection whose large frame finds none free waits, the
	// frame left in the kernel's socket buffer, up to FrameTimeout, and is
	// then closed with ERROR CodeFrameTooLarge. So a crowd sending large
	// frames slowly holds at most MaxLargeFrames × MaxFrame. Default 128.
	MaxLargeFrames int
	// MaxReportBurst and MaxReportRate bound what clients' REPORTs may add
	// to the counts of calls decided without the server, over all clients
	// together: at most MaxReportBurst calls at once and MaxReportRate per
	// second after that; claims beyond are clamped (and counted in
	// ServerStats.ReportClamped). Defaults DefaultMaxReportBurst and
	// DefaultMaxReportRate.
	MaxReportBurst uint64
	MaxReportRate  uint64
	// LogInterval: each kind of event a client can cause (a refused
	// connection, a protocol error, a reaped connection, a report...) is
	// logged at most once per LogInterval, with the count of events the
	// line stands for. Default 10s.
	LogInterval time.Duration
	Logger      Logger // default: discard

	// AllowUIDs and AllowGIDs restrict who may connect. When either is
	// non-empty, the peer's credentials are read once per connection with
	// SO_PEERCRED, before the handshake, and the connection is admitted only
	// if the peer's uid is in AllowUIDs or its primary gid is in AllowGIDs
	// (supplementary groups are not seen). Root is not implicitly allowed:
	// list uid 0 if root's processes are clients. A refused peer is sent an
	// ERROR CodePeerRefused and the connection is closed. Both empty (the
	// default): anyone the socket file's permissions let in is served.
	// Linux only: elsewhere Serve fails with ErrPeerCredUnsupported.
	AllowUIDs []uint32
	AllowGIDs []uint32
}

// Server serves the protocol on Unix-socket connections.
type Server struct {
	cfg     ServerConfig
	decider Decider

	mu        sync.Mutex
	listener  net.Listener
	path      string
	pathInfo  os.FileInfo
	conns     map[*serverConn]struct{}
	lingering map[net.Conn]struct{} // refused peers reading their ERROR; not counted against MaxConns
	closing   bool
	wg        sync.WaitGroup

	base    time.Time     // monotonic reference of the connections' idle stamps
	large   chan struct{} // one token per large frame held (see MaxLargeFrames)
	done    chan struct{} // closed by Shutdown
	logs    *logCap
	reports *reportBudget

	stats ServerStats
}

// ServerStats counts what the server has seen; read it with Stats.
type ServerStats struct {
	Accepted       atomic.Uint64
	Rejected       atomic.Uint64 // connections refused at the cap
	Requests       atomic.Uint64
	RequestErrors  atomic.Uint64 // requests refused with an ERROR
	ProtocolErrors atomic.Uint64 // connections closed for malformed input
	Active         atomic.Int64
	PeersRefused   atomic.Uint64 // connections closed because the peer is not on the allow-list (also counted in Accepted; never counted against MaxConns)
	Reaped         atomic.Uint64 // idle connections closed at the cap to admit a new client
	SlowFrames     atomic.Uint64 // connections closed because a frame did not arrive whole within FrameTimeout (or found no room among MaxLargeFrames in that time)
	ReportedOpen   atomic.Uint64 // failed-open calls clients reported, as admitted (after clamping)
	ReportedClosed atomic.Uint64 // failed-closed calls clients reported, as admitted
	ReportClamped  atomic.Uint64 // reported calls dropped because they exceeded the report budget
}

// NewServer returns a server that asks d for decisions.
func NewServer(cfg ServerConfig, d Decider) *Server {
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = 64 << 10
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 16
	}
	if cfg.MaxKeyLen <= 0 {
		cfg.MaxKeyLen = 256
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 4096
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 5 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.FrameTimeout <= 0 {
		cfg.FrameTimeout = 5 * time.Second
	}
	if cfg.IdleReap <= 0 {
		cfg.IdleReap = time.Second
	}
	if cfg.MaxLargeFrames <= 0 {
		cfg.MaxLargeFrames = 128
	}
	if cfg.MaxReportBurst == 0 {
		cfg.MaxReportBurst = DefaultMaxReportBurst
	}
	if cfg.MaxReportRate == 0 {
		cfg.MaxReportRate = DefaultMaxReportRate
	}
	if cfg.Logger == nil {
		cfg.Logger = nopLogger{}
	}
	cfg.AllowUIDs, cfg.AllowGIDs = slices.Clone(cfg.AllowUIDs), slices.Clone(cfg.AllowGIDs)
	now := time.Now()
	return &Server{
		cfg: cfg, decider: d,
		conns:     map[*serverConn]struct{}{},
		lingering: map[net.Conn]struct{}{},
		base:      now,
		large:     make(chan struct{}, cfg.MaxLargeFrames),
		done:      make(chan struct{}),
		logs:      newLogCap(cfg.LogInterval),
		reports:   newReportBudget(cfg.MaxReportBurst, cfg.MaxReportRate, now),
	}
}

// warn logs a line for an event of cause c unless that cause was logged
// within the log interval; a line that stands for more than one event says
// how many (events=N since the cause's previous line).
func (s *Server) warn(c logCause, msg string, args ...interface{}) {
	if ok, n := s.logs.allow(c); ok {
		s.cfg.Logger.Warn(msg, withEvents(args, n)...)
	}
}

// debug is warn at debug level.
func (s *Server) debug(c logCause, msg string, args ...interface{}) {
	if ok, n := s.logs.allow(c); ok {
		s.cfg.Logger.Debug(msg, withEvents(args, n)...)
	}
}

func withEvents(args []interface{}, n uint64) []interface{} {
	if n <= 1 {
		return args
	}
	return append(args, "events", n)
}

// stamp is now as a connection's idle stamp: nanoseconds since s.base, never
// 0 or negative (which mean busy and reaped).
func (s *Server) stamp() int64 { return int64(time.Since(s.base)) + 1 }

// Stats returns the server's counters.
func (s *Server) Stats() *ServerStats { return &s.stats }

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("ipc: server closed")

// Serve accepts connections on l until Shutdown. If l is a Unix listener
// whose socket file is at a path, Shutdown removes that file.
func (s *Server) Serve(l net.Listener, path string) error {
	if s.cfg.checksPeers() && !PeerCredSupported {
		return fmt.Errorf("serve: %w", ErrPeerCredUnsupported)
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listener, s.path = l, path
	if path != "" {
		s.pathInfo, _ = os.Stat(path)
	}
	s.mu.Unlock()
	failures := 0 // accepts failed in a row
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				failures++
				wait := backoff.Accept().Delay(failures, 0)
				s.warn(causeAccept, "accept failed; retrying", "error", err, "backoff", wait)
				time.Sleep(wait)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		failures = 0
		s.track(c)
	}
}

// isTemporary reports accept errors worth retrying (EMFILE and friends).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (s *Server) track(c net.Conn) {
	// A peer the allow-list refuses is answered and closed without taking
	// a slot: a refused user hammering the socket cannot lock anyone out.
	if s.cfg.checksPeers() && !s.admitPeer(c) {
		return
	}
	peer, peerKnown := peerOf(c) // for logs; a system call, so outside the lock
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		c.Close()
		return
	}
	var victim *serverConn
	var idle time.Duration
	if len(s.conns) >= s.cfg.MaxConns {
		victim, idle = s.reapIdlest()
		if victim == nil {
			s.mu.Unlock()
			s.stats.Rejected.Add(1)
			s.warn(causeAtCap, "connection refused: at connection cap, and no connection idle for long enough to close", "max_conns", s.cfg.MaxConns, "idle_reap", s.cfg.IdleReap)
			c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			c.Write(AppendError(nil, &Error{Code: CodeTooManyConns, Message: fmt.Sprintf("server at its cap of %d connections", s.cfg.MaxConns)}))
			c.Close()
			return
		}
		delete(s.conns, victim)
		s.stats.Reaped.Add(1)
	}
	sc := newServerConn(s, c, peer, peerKnown)
	s.conns[sc] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	if victim != nil {
		s.warn(causeReaped, "closed the longest-idle connection to admit a new client at the connection cap",
			"max_conns", s.cfg.MaxConns, "idle", idle.Round(time.Millisecond), "client", victim.client, "uid", victim.uid())
	}
	s.stats.Accepted.Add(1)
	s.stats.Active.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.stats.Active.Add(-1)
		sc.serve()
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
	}()
}

// reapIdlest marks for closing the connection that has waited longest for
// its next frame, if it has waited at least IdleReap, and returns it and how
// long it waited. Its goroutine sends it ERROR CodeTooManyConns and closes
// it. s.mu must be held.
func (s *Server) reapIdlest() (*serverConn, time.Duration) {
	now := s.stamp()
	for range 4 { // a candidate may turn busy under us; try the next
		var victim *serverConn
		var oldest int64
		for sc := range s.conns {
			if v := sc.idleSince.Load(); v > 0 && now-v >= int64(s.cfg.IdleReap) && (victim == nil || v < oldest) {
				victim, oldest = sc, v
			}
		}
		if victim == nil {
			return nil, 0
		}
		if victim.idleSince.CompareAndSwap(oldest, reaped) {
			victim.conn.SetReadDeadline(time.Now()) // wake its pending read
			return victim, time.Duration(now - oldest)
		}
	}
	return nil, 0
}

// Shutdown stops accepting, answers every request already received on every
// connection, closes the connections and removes the socket file. It returns
// when all connections are closed or ctx ends, whichever is first; in the
// latter case remaining connections are closed abruptly.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closing = true
	close(s.done)
	if s.listener != nil {
		s.listener.Close()
	}
	if s.path != "" && s.pathInfo != nil {
		if st, err := os.Stat(s.path); err == nil && os.SameFile(st, s.pathInfo) {
			os.Remove(s.path)
		}
	}
	for sc := range s.conns {
		sc.stop()
	}
	for c := range s.lingering {
		c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for sc := range s.conns {
			sc.conn.Close()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

// serverConn is one client connection, served by one goroutine that reads a
// frame, decides, appends the reply, and flushes when no further request is
// already buffered — so pipelined requests are answered in batched writes.
//
// Memory: an idle connection holds its read buffer (readBufSize), its
// reply buffer shrunk back to outKeep, its results and its goroutine. A
// frame that fits the read buffer is decoded in place; a larger one gets a
// buffer of its own, dropped once it is answered, and a reply buffer grown
// by a burst of pipelined replies is dropped when the connection goes idle.
type serverConn struct {
	s         *Server
	conn      net.Conn
	br        *bufio.Reader
	out       []byte
	req       Request
	results   []Result
	stopping  atomic.Bool
	idleSince atomic.Int64 // Server.stamp when the connection began to wait for a frame; 0 while busy; reaped
	deadline  bool         // a read deadline is set
	version   uint64       // agreed at the handshake
	client    string       // the name the client gave, sanitized
	large     bool         // holds a large-frame token (see MaxLargeFrames)
	peer      peerCred
	peerKnown bool
}

// reaped is idleSince of a connection closed to admit another at the cap.
const reaped = -1

// Buffer sizes of a connection (see serverConn).
const (
	readBufSize = 4 << 10
	outKeep     = 2 << 10
)

func newServerConn(s *Server, c net.Conn, peer peerCred, peerKnown bool) *serverConn {
	sc := &serverConn{
		s:         s,
		conn:      c,
		br:        bufio.NewReaderSize(c, readBufSize),
		out:       make([]byte, 0, outKeep),
		results:   make([]Result, 0, s.cfg.MaxBatch),
		peer:      peer,
		peerKnown: peerKnown,
	}
	sc.idleSince.Store(s.stamp()) // waiting for HELLO
	return sc
}

// uid is the peer's uid for logs, or -1 when unknown.
func (sc *serverConn) uid() int64 {
	if !sc.peerKnown {
		return -1
	}
	return int64(sc.peer.UID)
}

// stop makes the connection finish: a pending read returns at once, and the
// loop ends after answering whatever it had already read.
func (sc *serverConn) stop() {
	sc.stopping.Store(true)
	sc.conn.SetReadDeadline(time.Now())
}

// setReadDeadline sets the read deadline, unless Shutdown or a reap wants
// the pending read to end now.
func (sc *serverConn) setReadDeadline(t time.Time) {
	sc.conn.SetReadDeadline(t)
	sc.deadline = !t.IsZero()
	if sc.stopping.Load() || sc.idleSince.Load() == reaped {
		sc.conn.SetReadDeadline(time.Now())
		sc.deadline = true
	}
}

func (sc *serverConn) serve() {
	defer sc.conn.Close()
	defer sc.releaseLarge()
	if !sc.handshake() {
		return
	}
	for {
		body, inPlace, err := sc.next(time.Time{})
		if err != nil {
			sc.readFailed(err)
			return
		}
		ok := sc.handle(body)
		if inPlace > 0 {
			sc.br.Discard(inPlace)
		} else {
			// The frame had a buffer of its own: drop every reference to
			// it (the decoded checks alias it) so that it is freed now,
			// not held while the connection idles.
			clear(sc.req.Checks)
			sc.releaseLarge()
		}
		if !ok {
			return
		}
		// Flush when the client has nothing more queued, or when a client
		// that pipelines without pause has accumulated a buffer's worth.
		if idle := sc.br.Buffered() == 0; idle || len(sc.out) >= flushThreshold {
			if err := sc.flush(); err != nil {
				sc.s.cfg.Logger.Debug("closing connection: write failed", "error", err)
				return
			}
			if idle && cap(sc.out) > outKeep {
				sc.out = make([]byte, 0, outKeep) // a burst's buffer is not kept while idle
			}
		}
	}
}

// errLargeFramesBusy ends a connection whose large frame found no room
// within FrameTimeout (see MaxLargeFrames).
var errLargeFramesBusy = errors.New("too many large frames in flight on this server; send smaller requests or retry")

// takeLarge takes one of the MaxLargeFrames tokens, waiting up to d;
// false if none came free in time or the server is shutting down.
func (s *Server) takeLarge(d time.Duration) bool {
	select {
	case s.large <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case s.large <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-s.done:
		return false
	}
}

// releaseLarge gives back the connection's large-frame token, if it holds one.
func (sc *serverConn) releaseLarge() {
	if sc.large {
		sc.large = false
		<-sc.s.large
	}
}

// errReaped ends a connection closed to admit another at the cap.
var errReaped = errors.New("closed while idle to admit another client at the connection cap")

// next returns the next frame's body. When the frame lies whole in the read
// buffer, body aliases it and inPlace is the number of bytes to discard once
// body has been used; otherwise body is a buffer of its own. While it waits
// for a frame to begin the connection is idle (see IdleReap); once a frame
// has begun, the rest must arrive within FrameTimeout.
//
// A non-zero deadline (the handshake's) replaces both: the frame must have
// arrived whole by then.
func (sc *serverConn) next(deadline time.Time) (body []byte, inPlace int, err error) {
	if n, whole := sc.buffered(); whole {
		return sc.frame(n)
	}
	stamp := sc.s.stamp()
	sc.idleSince.Store(stamp)
	if !deadline.IsZero() {
		sc.setReadDeadline(deadline)
	}
	if sc.br.Buffered() == 0 {
		if sc.deadline && deadline.IsZero() {
			sc.setReadDeadline(time.Time{})
		}
		if _, err := sc.br.Peek(1); err != nil {
			return nil, 0, sc.wake(stamp, err)
		}
	}
	if _, whole := sc.buffered(); !whole {
		wait := sc.s.cfg.FrameTimeout
		if deadline.IsZero() {
			sc.setReadDeadline(time.Now().Add(wait))
		} else {
			wait = min(wait, time.Until(deadline))
		}
		hdr, err := sc.br.Peek(4)
		if err != nil {
			return nil, 0, sc.wake(stamp, err)
		}
		if n := binary.BigEndian.Uint32(hdr); n > 0 && uint64(n) <= uint64(sc.s.cfg.MaxFrame) {
			if int(n) > readBufSize-4 {
				// Larger than the read buffer: a buffer of its own, dropped
				// once the frame is answered, and one of MaxLargeFrames.
				if !sc.s.takeLarge(wait) {
					return nil, 0, sc.wake(stamp, errLargeFramesBusy)
				}
				sc.large = true
				body, err := ReadFrame(sc.br, nil, sc.s.cfg.MaxFrame)
				if err != nil {
					sc.releaseLarge()
				}
				return body, 0, sc.wake(stamp, err)
			}
			if _, err := sc.br.Peek(4 + int(n)); err != nil {
				return nil, 0, sc.wake(stamp, err)
			}
		}
	}
	if err := sc.wake(stamp, nil); err != nil {
		return nil, 0, err
	}
	n, _ := sc.buffered()
	return sc.frame(n)
}

// wake ends the idle wait that began at stamp: a connection reaped meanwhile
// returns errReaped whatever it read.
func (sc *serverConn) wake(stamp int64, err error) error {
	if !sc.idleSince.CompareAndSwap(stamp, 0) {
		return errReaped
	}
	return err
}

// buffered reports the length of the frame at the head of the read buffer
// (0 if its header has not arrived), and whether it lies there whole — or
// is bad enough (empty, or above MaxFrame) for frame to refuse at once.
func (sc *serverConn) buffered() (int, bool) {
	b, _ := sc.br.Peek(sc.br.Buffered())
	if len(b) < 4 {
		return 0, false
	}
	n := binary.BigEndian.Uint32(b)
	if n == 0 || uint64(n) > uint64(sc.s.cfg.MaxFrame) {
		return 0, true
	}
	return int(n), len(b)-4 >= int(n)
}

// frame returns the frame of n bytes lying whole in the read buffer (n 0:
// a bad header, which ReadFrame refuses).
func (sc *serverConn) frame(n int) ([]byte, int, error) {
	if n == 0 {
		_, err := ReadFrame(sc.br, nil, sc.s.cfg.MaxFrame)
		return nil, 0, err
	}
	b, err := sc.br.Peek(4 + n)
	if err != nil {
		return nil, 0, err
	}
	return b[4:], 4 + n, nil
}

func (sc *serverConn) handshake() bool {
	cfg := &sc.s.cfg
	body, inPlace, err := sc.next(time.Now().Add(cfg.HandshakeTimeout))
	if err != nil {
		sc.readFailed(err)
		return false
	}
	h, err := DecodeHello(body) // copies the name out of body
	if inPlace > 0 {
		sc.br.Discard(inPlace)
	}
	sc.releaseLarge()
	if err != nil {
		sc.fatal(CodeUnexpected, fmt.Sprintf("expected HELLO: %v", err))
		return false
	}
	if h.Version < 1 {
		sc.fatal(CodeBadVersion, fmt.Sprintf("protocol version %d not supported; this server speaks 1 to %d", h.Version, ProtocolVersion))
		return false
	}
	if sc.stopping.Load() {
		return false
	}
	sc.setReadDeadline(time.Time{})
	sc.version, sc.client = min(h.Version, ProtocolVersion), sanitize(h.Client)
	sc.out = AppendWelcome(sc.out, Welcome{
		Version:   sc.version,
		Server:    cfg.Name,
		MaxFrame:  uint64(cfg.MaxFrame),
		MaxBatch:  uint64(cfg.MaxBatch),
		MaxKeyLen: uint64(cfg.MaxKeyLen),
	})
	return sc.flush() == nil
}

// handle answers one frame; false means the connection must close.
func (sc *serverConn) handle(body []byte) bool {
	typ, _, err := PeekType(body)
	if err != nil {
		sc.fatal(CodeMalformed, err.Error())
		return false
	}
	if typ == MsgInspect {
		return sc.inspect(body)
	}
	if typ == MsgReport && sc.version >= 2 {
		r, err := DecodeReport(body)
		if err != nil {
			sc.fatal(CodeMalformed, err.Error())
			return false
		}
		sc.report(r)
		return true
	}
	if typ != MsgCheck {
		sc.fatal(CodeUnexpected, fmt.Sprintf("unexpected message type %d", typ))
		return false
	}
	sc.s.stats.Requests.Add(1)
	if err := DecodeRequest(body, &sc.req, sc.s.cfg.MaxBatch); err != nil {
		var e *Error
		if errors.As(err, &e) {
			sc.refuse(e)
			return true
		}
		sc.fatal(CodeMalformed, err.Error())
		return false
	}
	for i := range sc.req.Checks {
		c := &sc.req.Checks[i]
		switch {
		case len(c.Key) > sc.s.cfg.MaxKeyLen:
			sc.refuse(&Error{ID: sc.req.ID, Code: CodeKeyTooLong, Message: fmt.Sprintf("check %d: key of %d bytes, limit %d", i, len(c.Key), sc.s.cfg.MaxKeyLen)})
			return true
		case len(c.Key) == 0:
			sc.refuse(&Error{ID: sc.req.ID, Code: CodeBadRequest, Message: fmt.Sprintf("check %d: empty key", i)})
			return true
		case c.Cost == 0:
			sc.refuse(&Error{ID: sc.req.ID, Code: CodeBadCost, Message: fmt.Sprintf("check %d: cost must be at least 1", i)})
			return true
		}
	}
	results := sc.results[:len(sc.req.Checks)]
	allowed, err := sc.s.decider.Decide(sc.req.Checks, results)
	if err != nil {
		e, ok := err.(*Error)
		if !ok {
			e = &Error{Code: CodeInternal, Message: err.Error()}
		}
		e.ID = sc.req.ID
		sc.refuse(e)
		return true
	}
	sc.out = AppendReply(sc.out, sc.req.ID, allowed, results)
	return true
}

// report takes a client's REPORT: what the report budget admits of it goes
// to the Reporter, the rest is counted as clamped; both are logged at most
// once per log interval, attributed to the client's name and uid.
func (sc *serverConn) report(r Report) {
	st := &sc.s.stats
	got := sc.s.reports.take(r, time.Now())
	st.ReportedOpen.Add(got.FailedOpen)
	st.ReportedClosed.Add(got.FailedClosed)
	if got != r {
		dropped := (r.FailedOpen - got.FailedOpen) + (r.FailedClosed - got.FailedClosed)
		saturatingAdd(&st.ReportClamped, dropped)
		sc.s.warn(causeReportClamped, "client report exceeds the report budget; the excess is not counted",
			"client", sc.client, "uid", sc.uid(), "pid", sc.pid(), "claimed_open", r.FailedOpen, "claimed_closed", r.FailedClosed,
			"dropped", dropped, "clamped_total", st.ReportClamped.Load())
	}
	if got.FailedOpen+got.FailedClosed > 0 {
		sc.s.warn(causeReport, "clients decided calls without the daemon",
			"client", sc.client, "uid", sc.uid(), "failed_open", got.FailedOpen, "failed_closed", got.FailedClosed,
			"failed_open_total", st.ReportedOpen.Load(), "failed_closed_total", st.ReportedClosed.Load())
	}
	if rep, ok := sc.s.decider.(Reporter); ok && got != (Report{}) {
		rep.ClientReport(sc.client, got)
	}
}

// saturatingAdd adds n to c, stopping at the largest uint64 rather than
// wrapping: a client's claims may be as large as it likes.
func saturatingAdd(c *atomic.Uint64, n uint64) {
	for {
		old := c.Load()
		sum := old + n
		if sum < old {
			sum = math.MaxUint64
		}
		if c.CompareAndSwap(old, sum) {
			return
		}
	}
}

// pid is the peer's pid for logs, or -1 when unknown.
func (sc *serverConn) pid() int64 {
	if !sc.peerKnown {
		return -1
	}
	return int64(sc.peer.PID)
}

func (sc *serverConn) inspect(body []byte) bool {
	id, rule, key, err := DecodeInspect(body)
	if err != nil {
		sc.fatal(CodeMalformed, err.Error())
		return false
	}
	in, ok := sc.s.decider.(Inspector)
	if !ok {
		sc.refuse(&Error{ID: id, Code: CodeUnexpected, Message: "this server does not offer inspection"})
		return true
	}
	if len(key) > sc.s.cfg.MaxKeyLen {
		sc.refuse(&Error{ID: id, Code: CodeKeyTooLong, Message: fmt.Sprintf("key of %d bytes, limit %d", len(key), sc.s.cfg.MaxKeyLen)})
		return true
	}
	r := in.Inspect(rule, key)
	r.ID = id
	sc.out = AppendBalance(sc.out, r)
	return true
}

// refuse answers one request with an ERROR and keeps the connection.
func (sc *serverConn) refuse(e *Error) {
	sc.s.stats.RequestErrors.Add(1)
	sc.s.debug(causeRequestRefused, "request refused", "id", e.ID, "code", uint64(e.Code), "reason", sanitize(e.Message), "client", sc.client, "uid", sc.uid())
	sc.out = AppendError(sc.out, e)
}

// fatal sends an ERROR with id 0, flushes, and lets the caller close.
func (sc *serverConn) fatal(code ErrorCode, msg string) {
	sc.s.stats.ProtocolErrors.Add(1)
	sc.s.warn(causeProtocol, "closing connection: protocol error", "code", uint64(code), "reason", sanitize(msg), "client", sc.client, "uid", sc.uid(), "pid", sc.pid())
	sc.out = AppendError(sc.out, &Error{Code: code, Message: msg})
	sc.flush()
}

func (sc *serverConn) readFailed(err error) {
	switch {
	case errors.Is(err, errReaped):
		sc.out = AppendError(sc.out[:0], &Error{Code: CodeTooManyConns, Message: errReaped.Error()})
		sc.flush()
	case errors.Is(err, errLargeFramesBusy) && sc.stopping.Load():
		sc.out = AppendError(sc.out, &Error{Code: CodeShuttingDown, Message: "daemon shutting down"})
		sc.flush()
	case errors.Is(err, errLargeFramesBusy):
		sc.s.stats.SlowFrames.Add(1)
		sc.s.warn(causeSlowFrame, "closing connection: no room for its large frame in time", "max_large_frames", sc.s.cfg.MaxLargeFrames, "client", sc.client, "uid", sc.uid())
		sc.out = AppendError(sc.out, &Error{Code: CodeFrameTooLarge, Message: errLargeFramesBusy.Error()})
		sc.flush()
	case errors.Is(err, ErrFrameTooLarge):
		sc.fatal(CodeFrameTooLarge, err.Error())
	case errors.Is(err, ErrMalformed):
		sc.fatal(CodeMalformed, err.Error())
	case sc.stopping.Load():
		// Shutdown: everything fully received has been answered.
		sc.out = AppendError(sc.out, &Error{Code: CodeShuttingDown, Message: "daemon shutting down"})
		sc.flush()
	case errors.Is(err, os.ErrDeadlineExceeded) && sc.version == 0:
		sc.s.debug(causeSlowFrame, "closing connection: no HELLO in time", "uid", sc.uid())
	case errors.Is(err, os.ErrDeadlineExceeded):
		sc.s.stats.SlowFrames.Add(1)
		sc.s.warn(causeSlowFrame, "closing connection: a frame did not arrive whole in time", "frame_timeout", sc.s.cfg.FrameTimeout, "client", sc.client, "uid", sc.uid(), "pid", sc.pid())
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
	default:
		sc.s.cfg.Logger.Debug("closing connection: read failed", "error", err)
	}
}

func (sc *serverConn) flush() error {
	if len(sc.out) == 0 {
		return nil
	}
	sc.conn.SetWriteDeadline(time.Now().Add(sc.s.cfg.WriteTimeout))
	_, err := sc.conn.Write(sc.out)
	sc.out = sc.out[:0]
	return err
}

// flushThreshold bounds the replies held back while more requests are buffered.
const flushThreshold = 16 << 10

type nopLogger struct{}

func (nopLogger) Debug(string, ...interface{}) {}
func (nopLogger) Warn(string, ...interface{})  {}
