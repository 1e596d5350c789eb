package httplimit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/internal/routecheck"
	"github.com/sluicelabs/sluice/ipc"
)

// Limiter decides. *clientlib.Client satisfies it, and so does an embedded
// limiter running in the same process.
type Limiter interface {
	AllowAll(ctx context.Context, checks ...clientlib.Check) clientlib.Decision
}

// Limit is one limit a request is checked against.
type Limit struct {
	Rule string
	// Cost is the tokens a matching request takes. Default 1.
	Cost int64
	// PerRoute keys the limit by the route pattern, shared by all clients,
	// instead of by the client.
	PerRoute bool
}

// Route applies limits to the requests a pattern matches. Patterns use
// net/http.ServeMux syntax: "GET /items/{id}", "POST /upload", "/api/".
type Route struct {
	Pattern string
	Limits  []Limit
	// Shape, if set, holds requests over the limit until their turn instead
	// of rejecting them (leaky-bucket behaviour), within bounds.
	Shape *Shape
	// Elastic, if set, admits up to a share over the limit while the
	// upstream is healthy.
	Elastic *Elastic
}

// Elastic lets a route admit up to Extra × its limit more than the limit
// while the upstream (the wrapped handler) is healthy: over the last Window,
// its p99 latency stayed under MaxP99 and its share of 5xx responses under
// MaxErrorRate. As soon as either target is missed it falls back to the
// hard limit. The extra allowance is a token bucket per client and rule in
// this process, refilling at Extra × the rule's rate.
type Elastic struct {
	Extra        float64
	MaxP99       time.Duration
	MaxErrorRate float64
	// Window is the sliding window health is measured over. Default 10s.
	Window time.Duration
	// MinRequests: with fewer observations in the window the upstream is not
	// yet proven healthy, and no extra is given. Default 20.
	MinRequests int64
}

// Shape bounds how requests over a limit are held rather than refused.
type Shape struct {
	// MaxWait is the longest a request is held; one whose turn comes later
	// gets 429 at once.
	MaxWait time.Duration
	// MaxQueue is how many requests may be held at once on the route; past
	// it, requests over the limit get 429 at once.
	MaxQueue int
}

// Headers selects which families of rate-limit headers are written.
type Headers uint8

const (
	// HeadersLegacy: X-Ratelimit-Limit, X-Ratelimit-Remaining, X-Ratelimit-Reset,
	// X-Ratelimit-Retry-After.
	HeadersLegacy Headers = 1 << iota
	// HeadersDraft: RateLimit-Policy and RateLimit, in the structured-field
	// syntax of draft-ietf-httpapi-ratelimit-headers.
	HeadersDraft
	// HeadersNone writes no limit headers (Retry-After on 429 is always written).
	HeadersNone Headers = 0
	// HeadersAll is the default.
	HeadersAll = HeadersLegacy | HeadersDraft
)

// Config configures a Middleware.
type Config struct {
	Limiter  Limiter
	Identity Identity
	// Routes are matched most-specific first, as net/http.ServeMux does.
	Routes []Route
	// Default applies to requests no route matches; empty: such requests
	// pass unlimited.
	Default []Limit
	// Headers to write; nil means HeadersAll.
	Headers *Headers
	// Wait holds a shaped request; it must return early with the context's
	// error. Default: a timer. Tests inject their own.
	Wait func(ctx context.Context, d time.Duration) error
	// Now is the clock of the upstream health window, the elastic
	// allowance and the rate-limited logs. Default time.Now.
	Now func() time.Time
	// Events counts and logs (rate-limited) the requests that could not be
	// limited in the ordinary way: undecided calls, invalid requests,
	// unknown rules. Default: NewEvents(Log, 10s, Now). Pass one
	// Events to every Middleware that replaces another, to keep the counts.
	Events *Events
	// Log writes the Events' lines when Events is nil. Default
	// slog.Default().Warn: failing open is never silent.
	Log clientlib.LogFunc
}

// Middleware limits requests before they reach a handler.
type Middleware struct {
	cfg     Config
	headers Headers
	mux     *http.ServeMux
	routes  map[string]*routeState
	health  *health       // nil unless a route is elastic
	extra   *bucket.Store // elastic allowances
	events  *Events
}

type routeState struct {
	*Route
	held atomic.Int64 // shaped requests being held
}

// New validates cfg and returns a Middleware.
func New(cfg Config) (m *Middleware, err error) {
	if cfg.Limiter == nil {
		return nil, fmt.Errorf("httplimit: a Limiter is required")
	}
	m = &Middleware{cfg: cfg, headers: HeadersAll, mux: http.NewServeMux(), routes: map[string]*routeState{}}
	if m.cfg.Wait == nil {
		m.cfg.Wait = waitCtx
	}
	if m.cfg.Now == nil {
		m.cfg.Now = time.Now
	}
	if cfg.Headers != nil {
		m.headers = *cfg.Headers
	}
	if m.events = cfg.Events; m.events == nil {
		log := cfg.Log
		if log == nil {
			log = slog.Default().Warn
		}
		m.events = NewEvents(log, 0, m.cfg.Now)
	}
	if m.cfg.Identity.ForwardedHeader, err = CanonicalForwardedHeader(cfg.Identity.ForwardedHeader); err != nil {
		return nil, fmt.Errorf("httplimit: identity: %w", err)
	}
	rules, _ := cfg.Limiter.(RuleChecker)
	check := func(where string, limits []Limit) error {
		for i, l := range limits {
			err := routecheck.Rule(l.Rule)
			if err == nil {
				err = routecheck.Cost(l.Cost)
			}
			if err == nil && rules != nil {
				burst, known := rules.RuleBurst(l.Rule)
				if err = routecheck.Known(l.Rule, known); err == nil {
					err = routecheck.WithinBurst(l.Rule, l.Cost, burst)
				}
			}
			if err != nil {
				return fmt.Errorf("httplimit: %s limit %d: %w", where, i, err)
			}
		}
		return nil
	}
	if err := check("default", cfg.Default); err != nil {
		return nil, err
	}
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		if err := check("route "+r.Pattern, r.Limits); err != nil {
			return nil, err
		}
		if s := r.Shape; s != nil {
			if err := routecheck.Shape(s.MaxWait, s.MaxQueue); err != nil {
				return nil, fmt.Errorf("httplimit: route %s: %w", r.Pattern, err)
			}
		}
		if e := r.Elastic; e != nil {
			if err := routecheck.Elastic(e.Extra, e.MaxP99, e.MaxErrorRate); err != nil {
				return nil, fmt.Errorf("httplimit: route %s: %w", r.Pattern, err)
			}
			if e.Window <= 0 {
				e.Window = 10 * time.Second
			}
			if e.MinRequests <= 0 {
				e.MinRequests = 20
			}
			if m.health == nil {
				m.health = newHealth(e.Window, m.cfg.Now)
				m.extra = bucket.NewStore(bucket.StoreConfig{MaxKeys: 1 << 16})
			}
		}
		if err := register(m.mux, r.Pattern); err != nil {
			return nil, err
		}
		m.routes[r.Pattern] = &routeState{Route: r}
	}
	return m, nil
}

// RuleChecker is implemented by limiters that hold their rules (an embedded
// limiter, daemon.Local): New then refuses a limit naming a rule they do not
// define, or costing more than the rule's burst (such a request could never
// be admitted). RuleBurst must be safe for concurrent use.
type RuleChecker interface {
	// RuleBurst returns the most tokens one request may take under rule
	// (the smallest burst of its limits), and whether the rule exists.
	RuleBurst(rule string) (burst int64, known bool)
}

// register adds a pattern to the matcher, turning ServeMux's panics on bad
// or conflicting patterns into errors.
func register(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("httplimit: route %q: %v", pattern, p)
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

// Checks returns the checks a request must pass and the matched route
// pattern ("" when the defaults apply).
func (m *Middleware) Checks(r *http.Request) ([]clientlib.Check, string) {
	checks, route := m.checks(r)
	if route == nil {
		return checks, ""
	}
	return checks, route.Pattern
}

func (m *Middleware) checks(r *http.Request) ([]clientlib.Check, *routeState) {
	limits := m.cfg.Default
	_, pattern := m.mux.Handler(r)
	route, ok := m.routes[pattern]
	if ok {
		limits = route.Limits
	} else {
		route = nil
	}
	if len(limits) == 0 {
		return nil, route
	}
	client := m.cfg.Identity.Key(r)
	checks := make([]clientlib.Check, len(limits))
	for i, l := range limits {
		key := client
		if l.PerRoute {
			key = "route:" + pattern
		}
		checks[i] = clientlib.Check{Rule: l.Rule, Key: key, Cost: max(l.Cost, 1)}
	}
	return checks, route
}

// Decide asks the limiter about r, holding it first if its route shapes
// traffic and its turn comes within the route's bounds. ok is false when no
// limit applies; an error means the client went away while held.
func (m *Middleware) Decide(r *http.Request) (d clientlib.Decision, checks []clientlib.Check, ok bool, err error) {
	d, checks, _, err = m.decide(r)
	return d, checks, len(checks) > 0, err
}

// decide is Decide, also returning the matched route (nil for the defaults).
func (m *Middleware) decide(r *http.Request) (clientlib.Decision, []clientlib.Check, *routeState, error) {
	checks, route := m.checks(r)
	if len(checks) == 0 {
		return clientlib.Decision{Allowed: true, Denied: -1, Deciding: -1}, nil, route, nil
	}
	if route == nil || route.Shape == nil {
		return m.cfg.Limiter.AllowAll(r.Context(), checks...), checks, route, nil
	}
	if route.held.Add(1) > int64(route.Shape.MaxQueue) {
		route.held.Add(-1) // queue full: decide without waiting
		return m.cfg.Limiter.AllowAll(r.Context(), checks...), checks, route, nil
	}
	defer route.held.Add(-1)
	for i := range checks {
		checks[i].MaxDelay = route.Shape.MaxWait
	}
	d := m.cfg.Limiter.AllowAll(r.Context(), checks...)
	if d.Allowed && d.Delay > 0 {
		if err := m.cfg.Wait(r.Context(), d.Delay); err != nil {
			return d, checks, route, err
		}
	}
	return d, checks, route, nil
}

// waitCtx waits d, or less if ctx ends first (then returning its error).
func waitCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Wrap returns h behind the limiter: admitted requests reach h with limit
// headers set; throttled ones get 429 and never reach it. When the limiter
// does not decide, requests pass without limit headers (fail open), or get
// 503 if the limiter fails closed; either way they are counted and logged
// (see Events). A request the limiter refuses as invalid (a misconfigured
// route) gets 500 and never reaches h.
func (m *Middleware) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.ServeHTTP(w, r, h) })
}

// Events returns the counters of requests not limited in the ordinary way.
func (m *Middleware) Events() *Events { return m.events }

// ServeHTTP limits one request and passes it to h if admitted (what Wrap's
// handler does, without building a handler per request).
func (m *Middleware) ServeHTTP(w http.ResponseWriter, r *http.Request, h http.Handler) {
	d, checks, route, err := m.decide(r)
	if err != nil {
		return // the client left while its request was held
	}
	if len(checks) == 0 {
		h.ServeHTTP(w, r) // no limit applies
		return
	}
	switch {
	case d.Invalid, !d.FailedOpen && !d.Allowed && d.Status == ipc.StatusUnknownRule:
		m.events.recordInvalid(ruleList(checks), d.Err)
		WriteMisconfigured(w, checks)
		return
	case d.FailedOpen && d.Allowed:
		m.events.FailOpen.Record(d.Err)
		h.ServeHTTP(w, r) // no decision: no limit headers to give
		return
	case d.FailedOpen:
		m.events.FailClosed.Record(d.Err)
		WriteUnavailable(w, unavailableRetry())
		return
	case d.Status == ipc.StatusUnknownRuleAllowed:
		m.events.recordUnknownRule(policyName(d, checks))
		m.serve(h, w, r) // nothing limits it: no limit headers to give
		return
	}
	m.WriteHeaders(w.Header(), d, checks)
	if d.Allowed {
		m.serve(h, w, r)
		return
	}
	if m.elastic(route, d, checks) {
		w.Header().Set("X-Ratelimit-Elastic", "1") // over the limit, admitted while the upstream is healthy
		m.serve(h, w, r)
		return
	}
	WriteTooManyRequests(w, d, checks)
}

// serve runs h, measuring it for the health window when a route is elastic.
func (m *Middleware) serve(h http.Handler, w http.ResponseWriter, r *http.Request) {
	if m.health == nil {
		h.ServeHTTP(w, r)
		return
	}
	start := m.cfg.Now()
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	h.ServeHTTP(sw, r)
	m.health.observe(m.cfg.Now().Sub(start), sw.code)
}

// elastic reports whether a throttled request may pass on its route's
// elastic allowance (taking from it if so).
func (m *Middleware) elastic(route *routeState, d clientlib.Decision, checks []clientlib.Check) bool {
	if route == nil || route.Elastic == nil || d.FailedOpen || d.Deciding < 0 || d.Period <= 0 {
		return false
	}
	e := route.Elastic
	p99, errRate, n := m.health.stats()
	if n < e.MinRequests || p99 > e.MaxP99 || errRate > e.MaxErrorRate {
		return false
	}
	extra := int64(math.Ceil(e.Extra * float64(d.Limit)))
	lim, err := bucket.NewLimit(extra, d.Period, max(extra, 1))
	if err != nil {
		return false
	}
	c := checks[d.Deciding]
	// The allowance is keyed by rule and client; a long identity is bounded
	// as the daemon bounds it, so it is limited here too, never refused.
	key := clientlib.BoundedKey(c.Rule+"\x00"+c.Key, m.extra.MaxKeyLen())
	res, err := m.extra.Take(0, []byte(key), lim, c.Cost, m.cfg.Now())
	if err != nil || !res.Allowed {
		return false
	}
	return true
}

// statusWriter records the status a handler writes; Unwrap keeps flushing
// and hijacking (streaming, WebSockets) working through it.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// policyName is the deciding check's rule, for the draft headers.
func policyName(d clientlib.Decision, checks []clientlib.Check) string {
	if d.Deciding < 0 || d.Deciding >= len(checks) {
		return "sluice"
	}
	return checks[d.Deciding].Rule
}

// WriteHeaders sets the rate-limit headers for a decision. Limit is the
// deciding rule's count per period; Remaining is the tokens left, capped at
// Limit, so it never contradicts Limit (a token bucket whose burst exceeds
// its count holds more, and says so only once fewer than Limit are left);
// Reset is the seconds until the bucket is full again (or, when refused,
// until the request could pass). A decision without a limit (Limit 0) gets
// no headers.
func (m *Middleware) WriteHeaders(h http.Header, d clientlib.Decision, checks []clientlib.Check) {
	if d.Limit <= 0 {
		return
	}
	remaining := min(max(d.Remaining, 0), d.Limit)
	reset := d.ResetAfter
	if !d.Allowed {
		reset = d.RetryAfter
	}
	if m.headers&HeadersLegacy != 0 {
		h.Set("X-Ratelimit-Limit", strconv.FormatInt(d.Limit, 10))
		h.Set("X-Ratelimit-Remaining", strconv.FormatInt(remaining, 10))
		h.Set("X-Ratelimit-Reset", strconv.FormatInt(ceilSeconds(reset), 10))
		h.Set("X-Ratelimit-Retry-After", strconv.FormatInt(ceilSeconds(d.RetryAfter), 10))
	}
	if m.headers&HeadersDraft != 0 && d.Period > 0 {
		name := sfString(policyName(d, checks))
		h.Set("RateLimit-Policy", fmt.Sprintf("%s;q=%d;w=%d", name, d.Limit, ceilSeconds(d.Period)))
		h.Set("RateLimit", fmt.Sprintf("%s;r=%d;t=%d", name, remaining, ceilSeconds(reset)))
	}
}

// problem is an RFC 9457 problem-details body.
type problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	RetryAfter int64  `json:"retry_after,omitempty"`
	Rule       string `json:"rule,omitempty"`
}

// WriteTooManyRequests answers 429 with Retry-After and a problem-details body.
func WriteTooManyRequests(w http.ResponseWriter, d clientlib.Decision, checks []clientlib.Check) {
	retry := ceilSeconds(d.RetryAfter)
	if retry < 1 && !d.FailedOpen {
		retry = 1
	}
	rule := ""
	if d.Denied >= 0 && d.Denied < len(checks) {
		rule = checks[d.Denied].Rule
	}
	w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusTooManyRequests)
	detail := fmt.Sprintf("rate limit exceeded; retry in %d s", retry)
	if rule != "" {
		detail = fmt.Sprintf("rate limit %q exceeded; retry in %d s", rule, retry)
	}
	json.NewEncoder(w).Encode(problem{
		Type: "about:blank", Title: "Too Many Requests", Status: http.StatusTooManyRequests,
		Detail: detail, RetryAfter: retry, Rule: rule,
	})
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// sfString renders s as a structured-field string (RFC 8941): quoted, with
// backslash and quote escaped, other characters outside printable ASCII dropped.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
