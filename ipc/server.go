package ipc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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
	Logger           Logger        // default: discard

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

	mu       sync.Mutex
	listener net.Listener
	path     string
	pathInfo os.FileInfo
	conns    map[*serverConn]struct{}
	closing  bool
	wg       sync.WaitGroup

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
	PeersRefused   atomic.Uint64 // connections closed because the peer is not on the allow-list (also counted in Accepted)
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
	if cfg.Logger == nil {
		cfg.Logger = nopLogger{}
	}
	cfg.AllowUIDs, cfg.AllowGIDs = slices.Clone(cfg.AllowUIDs), slices.Clone(cfg.AllowGIDs)
	return &Server{cfg: cfg, decider: d, conns: map[*serverConn]struct{}{}}
}

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
	var backoff time.Duration
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
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.Logger.Warn("accept failed; retrying", "error", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		backoff = 0
		s.track(c)
	}
}

// isTemporary reports accept errors worth retrying (EMFILE and friends).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (s *Server) track(c net.Conn) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		c.Close()
		return
	}
	if len(s.conns) >= s.cfg.MaxConns {
		s.mu.Unlock()
		s.stats.Rejected.Add(1)
		s.cfg.Logger.Warn("connection refused: at connection cap", "max_conns", s.cfg.MaxConns)
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		c.Write(AppendError(nil, &Error{Code: CodeTooManyConns, Message: fmt.Sprintf("server at its cap of %d connections", s.cfg.MaxConns)}))
		c.Close()
		return
	}
	sc := newServerConn(s, c)
	s.conns[sc] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
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
type serverConn struct {
	s        *Server
	conn     net.Conn
	br       *bufio.Reader
	out      []byte
	frame    []byte
	req      Request
	results  []Result
	stopping atomic.Bool
	version  uint64 // agreed at the handshake
	client   string // the name the client gave
}

func newServerConn(s *Server, c net.Conn) *serverConn {
	return &serverConn{
		s:       s,
		conn:    c,
		br:      bufio.NewReaderSize(c, 16<<10),
		out:     make([]byte, 0, 16<<10),
		frame:   make([]byte, 0, 1024),
		results: make([]Result, 0, s.cfg.MaxBatch),
	}
}

// stop makes the connection finish: a pending read returns at once, and the
// loop ends after answering whatever it had already read.
func (sc *serverConn) stop() {
	sc.stopping.Store(true)
	sc.conn.SetReadDeadline(time.Now())
}

func (sc *serverConn) serve() {
	defer sc.conn.Close()
	if sc.s.cfg.checksPeers() && !sc.admitPeer() {
		return
	}
	if !sc.handshake() {
		return
	}
	for {
		body, err := ReadFrame(sc.br, sc.frame, sc.s.cfg.MaxFrame)
		sc.frame = body[:0]
		if err != nil {
			sc.readFailed(err)
			return
		}
		if !sc.handle(body) {
			return
		}
		// Flush when the client has nothing more queued, or when a client
		// that pipelines without pause has accumulated a buffer's worth.
		if sc.br.Buffered() == 0 || len(sc.out) >= flushThreshold {
			if err := sc.flush(); err != nil {
				sc.s.cfg.Logger.Debug("closing connection: write failed", "error", err)
				return
			}
		}
	}
}

func (sc *serverConn) handshake() bool {
	cfg := &sc.s.cfg
	sc.conn.SetReadDeadline(time.Now().Add(cfg.HandshakeTimeout))
	body, err := ReadFrame(sc.br, sc.frame, cfg.MaxFrame)
	if err != nil {
		sc.readFailed(err)
		return false
	}
	h, err := DecodeHello(body)
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
	sc.conn.SetReadDeadline(time.Time{})
	sc.version, sc.client = min(h.Version, ProtocolVersion), h.Client
	sc.out = AppendWelcome(sc.out, Welcome{
		Version:   sc.version,
		Server:    cfg.Name,
		MaxFrame:  uint64(cfg.MaxFrame),
		MaxBatch:  uint64(cfg.MaxBatch),
		MaxKeyLen: uint64(cfg.MaxKeyLen),
	})
	if sc.stopping.Load() { // stop() may have run before the deadline was cleared
		sc.conn.SetReadDeadline(time.Now())
	}
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
		if rep, ok := sc.s.decider.(Reporter); ok {
			rep.ClientReport(sc.client, r)
		}
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
	sc.s.cfg.Logger.Debug("request refused", "id", e.ID, "code", uint64(e.Code), "reason", e.Message)
	sc.out = AppendError(sc.out, e)
}

// fatal sends an ERROR with id 0, flushes, and lets the caller close.
func (sc *serverConn) fatal(code ErrorCode, msg string) {
	sc.s.stats.ProtocolErrors.Add(1)
	sc.s.cfg.Logger.Warn("closing connection: protocol error", "code", uint64(code), "reason", msg)
	sc.out = AppendError(sc.out, &Error{Code: code, Message: msg})
	sc.flush()
}

func (sc *serverConn) readFailed(err error) {
	switch {
	case errors.Is(err, ErrFrameTooLarge):
		sc.fatal(CodeFrameTooLarge, err.Error())
	case errors.Is(err, ErrMalformed):
		sc.fatal(CodeMalformed, err.Error())
	case sc.stopping.Load():
		// Shutdown: everything fully received has been answered.
		sc.out = AppendError(sc.out, &Error{Code: CodeShuttingDown, Message: "daemon shutting down"})
		sc.flush()
	case errors.Is(err, os.ErrDeadlineExceeded):
		sc.s.cfg.Logger.Debug("closing connection: no HELLO in time")
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
