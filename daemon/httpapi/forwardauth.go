package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluicelabs/sluice/clientlib/httplimit"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/proxy"
)

// The headers a forward-auth request names the original request by. The
// first present of each list wins: nginx's conventional names (set by the
// recipe in the README) before Traefik's and Caddy's.
var (
	methodHeaders = []string{"X-Original-Method", "X-Forwarded-Method"}
	uriHeaders    = []string{"X-Original-URI", "X-Forwarded-Uri"}
	hostHeaders   = []string{"X-Forwarded-Host"}
)

// serveAuth answers a forward-auth request: 200 when the original request
// is admitted, 429 with Retry-After and the rate-limit headers when it is
// not, 500 when its route is misconfigured, 400 when the forwarded headers
// do not describe a request. What the routes do not limit is admitted.
func (s *Server) serveAuth(w http.ResponseWriter, r *http.Request) {
	orig, rerr := forwardedRequest(r)
	if rerr != nil {
		s.refuse(w, rerr)
		return
	}
	m := s.auth.Load()
	if m == nil {
		s.counters.authOther.Add(1)
		writeJSON(w, http.StatusInternalServerError, ErrorJSON{Error: "forward-auth has no routes: start sluiced with --http-routes FILE (the proxy's routes format), or define a rule named \"default\""})
		return
	}
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	m.ServeHTTP(sw, orig, admit)
	switch {
	case sw.code == http.StatusTooManyRequests:
		s.counters.authDenied.Add(1)
	case sw.code < 300:
		s.counters.authAllowed.Add(1)
	default:
		s.counters.authOther.Add(1)
	}
}

// admit is what the middleware calls for an admitted request: 200, no body.
var admit = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

// forwardedRequest rebuilds the request a proxy asks about from its
// forwarded headers. Every other header (the identity header,
// X-Forwarded-For, Forwarded) is kept as the proxy sent it, and the peer is
// the proxy itself, so the routes file's identity (trusted_proxies) reads
// the client's address exactly as the HTTP proxy would.
func forwardedRequest(r *http.Request) (*http.Request, *requestError) {
	method := firstHeader(r, methodHeaders)
	if method == "" {
		method = r.Method
	}
	if !validMethod(method) {
		return nil, badRequest("forwarded method %q is not an HTTP method", truncate(method))
	}
	uri := firstHeader(r, uriHeaders)
	if uri == "" {
		uri = "/"
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil || !strings.HasPrefix(uri, "/") {
		return nil, badRequest("forwarded URI %q is not a request path (want e.g. /items?id=1 in X-Original-URI or X-Forwarded-Uri)", truncate(uri))
	}
	orig := r.Clone(r.Context())
	orig.Method, orig.URL, orig.RequestURI = method, u, uri
	if h := firstHeader(r, hostHeaders); h != "" {
		orig.Host = h
	}
	orig.Body, orig.ContentLength = http.NoBody, 0
	return orig, nil
}

func firstHeader(r *http.Request, names []string) string {
	for _, n := range names {
		if v := r.Header.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// validMethod accepts an HTTP method token of at most 32 characters.
func validMethod(m string) bool {
	if m == "" || len(m) > 32 {
		return false
	}
	for _, c := range m {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// truncate keeps an echoed value short.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// statusWriter records the status the middleware answers.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// loadRoutes reads the forward-auth routes: the file at path (the proxy's
// routes format), or, without one, the proxy's default routes (every
// request limited by client address under the rule "default") with the
// loopback addresses as trusted proxies, since the endpoint's callers are
// proxies. Routes are checked against the daemon's rules (an unknown rule,
// a cost above a burst) and built by proxy.NewMiddleware, the one mapping.
// Elastic routes are refused: their allowance follows the upstream's
// responses, which a forward-auth endpoint never sees.
func (s *Server) loadRoutes() (*httplimit.Middleware, error) {
	var routes *config.ProxyRoutes
	if p := s.cfg.RoutesPath; p != "" {
		var err error
		if routes, err = config.LoadProxyRoutes(p); err != nil {
			return nil, fmt.Errorf("forward-auth routes: %w", err)
		}
	} else {
		routes = config.DefaultProxyRoutes()
		routes.Identity.TrustedProxies = []string{"127.0.0.0/8", "::1"}
	}
	for _, rt := range routes.Routes {
		if rt.Elastic != nil {
			return nil, fmt.Errorf("forward-auth routes %s: route %s: elastic allowances follow the upstream's responses, which a forward-auth endpoint never sees; remove elastic", routes.Source(), rt.Match)
		}
		if rt.Shape != nil && rt.Shape.MaxWait > MaxShapeWait {
			return nil, fmt.Errorf("forward-auth routes %s: route %s: shape max_wait %s is longer than the forward-auth endpoint holds a request (%s)", routes.Source(), rt.Match, rt.Shape.MaxWait, MaxShapeWait)
		}
	}
	if s.cfg.Rules != nil {
		if err := routes.CheckRules(config.RulesLookup(s.cfg.Rules())); err != nil {
			return nil, fmt.Errorf("forward-auth routes: %w", err)
		}
	}
	m, err := proxy.NewMiddleware(routes, s.cfg.Limiter, s.cfg.Events)
	if err != nil {
		return nil, fmt.Errorf("forward-auth routes: %w", err)
	}
	return m, nil
}

// Reload re-reads the forward-auth routes file; routes that do not load or
// do not fit the daemon's rules keep the routes in force, and the error
// says why.
func (s *Server) Reload() error {
	m, err := s.loadRoutes()
	if err != nil {
		s.cfg.Log.Error("forward-auth routes reload failed; keeping the last good routes", "error", err)
		return err
	}
	s.auth.Store(m)
	s.cfg.Log.Info("forward-auth routes reloaded", "routes", s.cfg.RoutesPath)
	return nil
}
