package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/clientlib/httplimit"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/ipc"
)

// Timeouts and sizes of the API's HTTP server. WriteTimeout leaves room for
// a shaped forward-auth request held up to its route's max_wait.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	WriteTimeout      = 30 * time.Second
	IdleTimeout       = 60 * time.Second
	MaxHeaderBytes    = 16 << 10
	// MaxShapeWait is the longest a forward-auth route may hold a request
	// for its turn (shape max_wait), within WriteTimeout.
	MaxShapeWait = WriteTimeout - 5*time.Second
)

// Config is what a Server is built from.
type Config struct {
	// Decider decides /v1/check's checks on the daemon's own buckets (the
	// daemon: *daemon.Daemon). It must be safe for concurrent use.
	Decider ipc.Decider
	// Limiter decides forward-auth requests in process (daemon.Local).
	Limiter httplimit.Limiter
	// Rules returns the daemon's rules in force, to check the routes
	// against; nil: routes are not checked.
	Rules func() *config.Rules
	// RoutesPath is the forward-auth routes file (the proxy's format);
	// empty: every request limited by client address under "default",
	// trusting loopback proxies.
	RoutesPath string
	// MaxBody caps a /v1/check body in bytes (the socket's frame cap).
	MaxBody int
	// MaxBatch caps the checks of one /v1/check (the socket's batch cap).
	MaxBatch int
	// MaxKeyLen is the store's longest key: longer keys are bounded.
	MaxKeyLen int
	// MaxConns caps open connections; beyond it new ones are closed at once.
	MaxConns int
	// AllowedHosts are names, besides IP literals and localhost, the API
	// answers to in the Host header (see hostAllowed).
	AllowedHosts []string
	// FailOpen counts and logs /v1/check calls the daemon could not decide.
	FailOpen *clientlib.FailOpenLog
	// Events counts forward-auth requests not limited in the ordinary way.
	Events *httplimit.Events
	// Log receives the server's lines. Default: discard.
	Log hclog.Logger
}

// Server is the HTTP decision API. Its methods may be called from any
// goroutine.
type Server struct {
	cfg      Config
	auth     atomic.Pointer[httplimit.Middleware]
	handler  http.Handler
	srv      *http.Server
	ln       *capListener
	counters counters
}

// counters are the API's outcomes, read by Stats.
type counters struct {
	checkAllowed, checkDenied, failedOpen, invalid atomic.Uint64
	authAllowed, authDenied, authOther, badHost    atomic.Uint64
}

// Stats are the API's counters since it started.
type Stats struct {
	// CheckAllowed and CheckDenied count /v1/check requests decided.
	CheckAllowed, CheckDenied uint64
	// FailedOpen counts /v1/check requests the daemon could not decide, admitted.
	FailedOpen uint64
	// Invalid counts requests refused as invalid (4xx), on either endpoint.
	Invalid uint64
	// AuthAllowed, AuthDenied and AuthOther count forward-auth answers: 2xx,
	// 429, anything else (500 misconfigured route).
	AuthAllowed, AuthDenied, AuthOther uint64
	// BadHost counts requests refused for their Host header (421).
	BadHost uint64
	// Shed counts connections closed at the connection cap.
	Shed uint64
}

// New validates cfg, loads the forward-auth routes and returns a Server
// that is not yet serving (see Serve, or Handler for tests).
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Decider == nil || cfg.Limiter == nil:
		return nil, errors.New("http api: a Decider and a Limiter are required")
	case cfg.MaxBody < 1, cfg.MaxBatch < 1, cfg.MaxKeyLen < 1, cfg.MaxConns < 1:
		return nil, fmt.Errorf("http api: max body %d, batch %d, key length %d and connections %d must be positive",
			cfg.MaxBody, cfg.MaxBatch, cfg.MaxKeyLen, cfg.MaxConns)
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	if cfg.FailOpen == nil {
		cfg.FailOpen = clientlib.NewFailOpenLog(cfg.Log.Warn, 0, false, nil)
	}
	if cfg.Events == nil {
		cfg.Events = httplimit.NewEvents(cfg.Log.Warn, 0, nil)
	}
	s := &Server{cfg: cfg}
	switch m, err := s.loadRoutes(); {
	case err == nil:
		s.auth.Store(m)
	case cfg.RoutesPath != "":
		return nil, err
	default:
		// No routes file, and the default routes do not fit the rules (no
		// rule "default"): /v1/check serves; /v1/auth refuses until routes
		// are given.
		cfg.Log.Warn("forward-auth endpoint off: give it a routes file (--http-routes)", "error", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", s.serveCheck)
	mux.HandleFunc("/v1/auth", s.serveAuth)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.refuse(w, &requestError{http.StatusNotFound, "no such endpoint: the decision API serves POST /v1/check and /v1/auth"})
	})
	s.handler = s.hostGuard(mux)
	return s, nil
}

// Handler returns the API's handler (host check included), for tests and
// for serving it on a listener of the caller's.
func (s *Server) Handler() http.Handler { return s.handler }

// Listen opens addr and serves the API on it in the background; serving
// errors are logged. Close it with Shutdown.
func (s *Server) Listen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http api listen: %w", err)
	}
	s.ln = &capListener{Listener: l, max: int64(s.cfg.MaxConns)}
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          s.cfg.Log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	go func() {
		if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Log.Error("http api stopped serving", "error", err)
		}
	}()
	s.cfg.Log.Info("http decision api serving", "listen", l.Addr().String(), "routes", s.cfg.RoutesPath)
	return nil
}

// Addr is the address Listen bound (nil before).
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Shutdown stops serving, waiting for requests in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Shutdown(ctx)
}

// Stats returns the API's counters.
func (s *Server) Stats() Stats {
	c := &s.counters
	st := Stats{
		CheckAllowed: c.checkAllowed.Load(), CheckDenied: c.checkDenied.Load(), FailedOpen: c.failedOpen.Load(),
		Invalid: c.invalid.Load(), AuthAllowed: c.authAllowed.Load(), AuthDenied: c.authDenied.Load(),
		AuthOther: c.authOther.Load(), BadHost: c.badHost.Load(),
	}
	if s.ln != nil {
		st.Shed = s.ln.shed.Load()
	}
	return st
}

// hostGuard answers 421 to a request whose Host header is a name other than
// localhost or one of cfg.AllowedHosts: a web page served from a name the
// attacker controls and re-pointed at this host (DNS rebinding) sends that
// name, so it cannot spend clients' tokens here. IP literals cannot be
// rebound and are always accepted; proxies calling by address (nginx's
// proxy_pass http://127.0.0.1:PORT, Traefik's address) send one.
func (s *Server) hostGuard(next http.Handler) http.Handler {
	names := map[string]bool{"localhost": true}
	for _, n := range s.cfg.AllowedHosts {
		n = strings.ToLower(strings.TrimSpace(n))
		if h, _, err := net.SplitHostPort(n); err == nil {
			n = h // any port: the listener has one
		}
		names[n] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.ToLower(r.Host)
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		if names[host] || net.ParseIP(host) != nil {
			next.ServeHTTP(w, r)
			return
		}
		s.counters.badHost.Add(1)
		writeJSON(w, http.StatusMisdirectedRequest, ErrorJSON{Error: fmt.Sprintf("Host %q is not this decision API's: call it by IP address or localhost, or start sluiced with --http-allowed-hosts NAME", truncate(r.Host))})
	})
}

// capListener holds at most max connections open; a connection beyond the
// cap is closed as soon as it is accepted (and counted), so a caller at the
// cap fails at once (and fails open on its side) rather than waiting in the
// kernel's backlog behind the connections holding it.
type capListener struct {
	net.Listener
	max  int64
	open atomic.Int64
	shed atomic.Uint64
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &capConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.shed.Add(1)
		c.Close()
	}
}

// capConn gives its slot back once, when closed.
type capConn struct {
	net.Conn
	l      *capListener
	closed atomic.Bool
}

func (c *capConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
	}
	return c.Conn.Close()
}
