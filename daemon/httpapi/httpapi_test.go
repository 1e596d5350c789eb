package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
	"github.com/sluicelabs/sluice/ipc"
)

const testRules = `
unknown_rule: deny
rules:
  api:
    rate: 3/1h
  other:
    rate: 100/1h
  default:
    rate: 2/1h
  shaped:
    rate: 1/1s
`

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// newDaemon builds (does not run) a daemon on testRules and a fake clock.
func newDaemon(t *testing.T) *daemon.Daemon { return newDaemonRules(t, testRules) }

// newDaemonRules builds (does not run) a daemon on rules and a fake clock.
func newDaemonRules(t testing.TB, rules string) *daemon.Daemon {
	t.Helper()
	dir := t.TempDir()
	s := config.DefaultSettings()
	s.SocketPath, s.RulesPath = filepath.Join(dir, "d.sock"), filepath.Join(dir, "rules.yaml")
	s.MaxKeyLen, s.MaxBatch, s.MaxFrameBytes = 64, 4, 1024
	if err := os.WriteFile(s.RulesPath, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	d, err := daemon.New(daemon.Config{Settings: s, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newServer builds the API over d with the given forward-auth routes file
// contents ("" for the defaults).
func newServer(t *testing.T, d *daemon.Daemon, routes string) *Server {
	t.Helper()
	return newServerRoutes(t, d, routes)
}

// newServerTB is newServer with the default routes, for benchmarks too.
func newServerTB(t testing.TB, d *daemon.Daemon) *Server { return newServerRoutes(t, d, "") }

func newServerRoutes(t testing.TB, d *daemon.Daemon, routes string) *Server {
	t.Helper()
	cfg := Config{Decider: d, Limiter: d.Local(), Rules: d.Rules, MaxBody: 1024, MaxBatch: 4, MaxKeyLen: 64, MaxConns: 8}
	if routes != "" {
		cfg.RoutesPath = filepath.Join(t.TempDir(), "routes.yaml")
		if err := os.WriteFile(cfg.RoutesPath, []byte(routes), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func post(h http.Handler, contentType, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:9466/v1/check", strings.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestCheckRefusesInvalidRequests(t *testing.T) {
	s := newServer(t, newDaemon(t), "")
	tests := []struct {
		name, method, contentType, body string
		want                            int
		wantErr                         string
	}{
		{"GET", http.MethodGet, "application/json", "", 405, "takes POST"},
		{"no content type", "", "", `{"checks":[{"rule":"api","key":"k"}]}`, 415, "application/json"},
		{"form content type", "", "application/x-www-form-urlencoded", `{"checks":[{"rule":"api","key":"k"}]}`, 415, "application/json"},
		{"text/plain", "", "text/plain", `{"checks":[{"rule":"api","key":"k"}]}`, 415, "application/json"},
		{"not JSON", "", "application/json", `checks=1`, 400, "invalid JSON"},
		{"empty body", "", "application/json", ``, 400, "invalid JSON"},
		{"unknown field", "", "application/json", `{"checks":[{"rule":"api","key":"k","costs":1}]}`, 400, "unknown field"},
		{"trailing object", "", "application/json", `{"checks":[{"rule":"api","key":"k"}]}{"checks":[]}`, 400, "more follows"},
		{"no checks", "", "application/json", `{"checks":[]}`, 400, "no checks"},
		{"too many checks", "", "application/json", `{"checks":[` + strings.Repeat(`{"rule":"api","key":"k"},`, 4) + `{"rule":"api","key":"k"}]}`, 400, "at most 4"},
		{"no rule", "", "application/json", `{"checks":[{"key":"k"}]}`, 400, "rule is missing"},
		{"no key", "", "application/json", `{"checks":[{"rule":"api"}]}`, 400, "key is missing"},
		{"cost 0", "", "application/json", `{"checks":[{"rule":"api","key":"k","cost":0}]}`, 400, "cost 0"},
		{"negative cost", "", "application/json", `{"checks":[{"rule":"api","key":"k","cost":-5}]}`, 400, "cost -5"},
		{"fractional cost", "", "application/json", `{"checks":[{"rule":"api","key":"k","cost":1.5}]}`, 400, "invalid JSON"},
		{"cost above the burst", "", "application/json", `{"checks":[{"rule":"api","key":"k","cost":4}]}`, 400, "invalid check"},
		{"huge cost", "", "application/json", `{"checks":[{"rule":"api","key":"k","cost":99999999999999}]}`, 400, "not in [1,"},
		{"negative max_delay", "", "application/json", `{"checks":[{"rule":"api","key":"k","max_delay":-1}]}`, 400, "max_delay"},
		{"max_delay over an hour", "", "application/json", `{"checks":[{"rule":"api","key":"k","max_delay":1e300}]}`, 400, "max_delay"},
		{"body over the cap", "", "application/json", `{"checks":[{"rule":"api","key":"` + strings.Repeat("k", 2000) + `"}]}`, 413, "cap"},
		{"deep JSON", "", "application/json", `{"checks":` + strings.Repeat("[", 480) + strings.Repeat("]", 480) + `}`, 400, "invalid JSON"},
		{"checks not a list", "", "application/json", `{"checks":{"rule":"api"}}`, 400, "invalid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			r := httptest.NewRequest(method, "http://127.0.0.1:9466/v1/check", strings.NewReader(tt.body))
			if tt.contentType != "" {
				r.Header.Set("Content-Type", tt.contentType)
			}
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, r)
			var e ErrorJSON
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
				t.Fatalf("body %q is not a JSON error: %v", w.Body, err)
			}
			if w.Code != tt.want || !strings.Contains(e.Error, tt.wantErr) {
				t.Fatalf("got %d %q, want %d mentioning %q", w.Code, e.Error, tt.want, tt.wantErr)
			}
		})
	}
	// Nothing was charged by any of them.
	w := post(s.Handler(), "application/json", `{"checks":[{"rule":"api","key":"k"}]}`)
	var resp CheckResponse
	json.Unmarshal(w.Body.Bytes(), &resp)
	if !resp.Allowed || resp.Results[0].Remaining != 2 {
		t.Fatalf("after the refusals: %+v, want admitted with 2 left", resp)
	}
	if st := s.Stats(); st.Invalid != uint64(len(tests)) {
		t.Fatalf("invalid counted %d, want %d", st.Invalid, len(tests))
	}
}

func decode(t *testing.T, w *httptest.ResponseRecorder) CheckResponse {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var resp CheckResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestCheckDecidesAsTheSocket(t *testing.T) {
	s := newServer(t, newDaemon(t), "")
	h := s.Handler()
	for i := range 3 {
		resp := decode(t, post(h, "application/json; charset=utf-8", `{"checks":[{"rule":"api","key":"user:1"}]}`))
		r := resp.Results[0]
		if !resp.Allowed || r.Status != "ok" || r.Limit != 3 || r.Remaining != uint64(2-i) || r.Period != 3600 {
			t.Fatalf("request %d: %+v", i, resp)
		}
	}
	resp := decode(t, post(h, "application/json", `{"checks":[{"rule":"api","key":"user:1"}]}`))
	if r := resp.Results[0]; resp.Allowed || r.Status != "over_limit" || r.Allowed || r.RetryAfter < 1000 {
		t.Fatalf("fourth: %+v, want over_limit with retry_after ~1200 s", resp)
	}

	// All or nothing: "other" admits, "api" refuses, so "other" is not charged.
	resp = decode(t, post(h, "application/json", `{"checks":[{"rule":"other","key":"user:1","cost":5},{"rule":"api","key":"user:1"}]}`))
	if resp.Allowed || !resp.Results[0].Allowed || resp.Results[1].Status != "over_limit" || len(resp.Results) != 2 {
		t.Fatalf("multi-check: %+v", resp)
	}
	resp = decode(t, post(h, "application/json", `{"checks":[{"rule":"other","key":"user:1"}]}`))
	if resp.Results[0].Remaining != 99 {
		t.Fatalf("other after a refused multi-check: %+v, want 99 left (not charged)", resp)
	}

	// An unknown rule is a decision (unknown_rule: deny), not an error.
	resp = decode(t, post(h, "application/json", `{"checks":[{"rule":"nope","key":"k"}]}`))
	if resp.Allowed || resp.Results[0].Status != "unknown_rule" {
		t.Fatalf("unknown rule: %+v", resp)
	}

	// A key longer than the store takes is bounded, so it is limited, not refused.
	long := strings.Repeat("x", 500)
	for i := range 3 {
		if resp := decode(t, post(h, "application/json", `{"checks":[{"rule":"api","key":"`+long+`"}]}`)); !resp.Allowed {
			t.Fatalf("long key, request %d: %+v", i, resp)
		}
	}
	if resp := decode(t, post(h, "application/json", `{"checks":[{"rule":"api","key":"`+long+`"}]}`)); resp.Allowed {
		t.Fatalf("long key, fourth request admitted: %+v", resp)
	}

	// Shaping: a refused check whose turn comes within max_delay is delayed.
	decode(t, post(h, "application/json", `{"checks":[{"rule":"shaped","key":"s"}]}`))
	resp = decode(t, post(h, "application/json", `{"checks":[{"rule":"shaped","key":"s","max_delay":5}]}`))
	if !resp.Allowed || resp.Results[0].Status != "delayed" || resp.Delay <= 0 || resp.Delay > 1 {
		t.Fatalf("shaped: %+v, want delayed by up to 1 s", resp)
	}
}

// failingDecider cannot decide.
type failingDecider struct{}

func (failingDecider) Decide([]ipc.Check, []ipc.Result) (bool, error) {
	return false, &ipc.Error{Code: ipc.CodeInternal, Message: "store broken"}
}

func TestCheckFailsOpenOnlyWhenTheDaemonCannotDecide(t *testing.T) {
	d := newDaemon(t)
	s, err := New(Config{Decider: failingDecider{}, Limiter: d.Local(), MaxBody: 1024, MaxBatch: 4, MaxKeyLen: 64, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	resp := decode(t, post(s.Handler(), "application/json", `{"checks":[{"rule":"api","key":"k"}]}`))
	if !resp.Allowed || !resp.FailedOpen || !strings.Contains(resp.Error, "store broken") {
		t.Fatalf("undecided: %+v, want failed open", resp)
	}
	if w := post(s.Handler(), "application/json", `{"checks":[{"rule":"api","key":""}]}`); w.Code != 400 {
		t.Fatalf("invalid request to a failing daemon: %d, want 400 (never a pass)", w.Code)
	}
	if st := s.Stats(); st.FailedOpen != 1 || st.Invalid != 1 || s.cfg.FailOpen.Total(0)+s.cfg.FailOpen.Total(5) != 1 {
		t.Fatalf("stats %+v, fail-open log %v", st, s.cfg.FailOpen.Totals())
	}
}

const testRoutes = `
identity:
  header: X-API-Key
  trusted_proxies: [127.0.0.1]
default:
  - rule: default
routes:
  - match: "GET /api/"
    limits:
      - rule: api
  - match: "/free/"
    limits: []
`

func auth(h http.Handler, host string, headers map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9466/v1/auth", nil)
	r.RemoteAddr = "127.0.0.1:40000"
	if host != "" {
		r.Host = host
	}
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestForwardAuth(t *testing.T) {
	s := newServer(t, newDaemon(t), testRoutes)
	h := s.Handler()
	nginx := func(method, uri, key, xff string) map[string]string {
		m := map[string]string{"X-Original-Method": method, "X-Original-URI": uri, "X-Forwarded-For": xff}
		if key != "" {
			m["X-API-Key"] = key
		}
		return m
	}
	traefik := func(method, uri, xff string) map[string]string {
		return map[string]string{"X-Forwarded-Method": method, "X-Forwarded-Uri": uri, "X-Forwarded-For": xff, "X-Forwarded-Host": "shop.example"}
	}
	steps := []struct {
		name    string
		host    string
		headers map[string]string
		want    int
		wantHdr map[string]string // header → substring
	}{
		{"api key 1", "", nginx("GET", "/api/items?x=1", "k1", "10.0.0.1"), 200, map[string]string{"RateLimit": `"api";r=2`, "RateLimit-Policy": `"api";q=3;w=3600`}},
		{"api key 2", "", nginx("GET", "/api/items", "k1", "10.0.0.2"), 200, map[string]string{"RateLimit": `"api";r=1`}},
		{"api key 3", "", nginx("GET", "/api/x", "k1", "10.0.0.3"), 200, map[string]string{"RateLimit": `"api";r=0`}},
		{"api key 4: limited", "", nginx("GET", "/api/x", "k1", "10.0.0.4"), 429, map[string]string{"Retry-After": "1200", "RateLimit": `"api";r=0;t=1200`, "RateLimit-Policy": `"api";q=3`, "X-Ratelimit-Limit": "3"}},
		{"another key passes", "", nginx("GET", "/api/x", "k2", "10.0.0.4"), 200, nil},
		{"POST /api/ is not the GET route: default by ip", "", nginx("POST", "/api/x", "", "10.0.0.9"), 200, map[string]string{"RateLimit-Policy": `"default";q=2`}},
		{"default by ip 2", "", traefik("POST", "/other", "10.0.0.9"), 200, map[string]string{"RateLimit": `"default";r=0`}},
		{"default by ip 3: limited", "", traefik("PUT", "/x", "10.0.0.9"), 429, map[string]string{"Retry-After": "1800"}},
		{"another ip passes", "", traefik("PUT", "/x", "10.0.0.10"), 200, nil},
		{"a spoofed X-Forwarded-For chain reads right to left", "", nginx("GET", "/y", "", "10.0.0.10, 10.0.0.9"), 429, nil},
		{"a route with no limits passes", "", nginx("GET", "/free/a", "", "10.0.0.9"), 200, nil},
		{"no forwarded URI: /, by ip", "", map[string]string{"X-Forwarded-For": "10.0.0.9"}, 429, nil},
		{"bad URI", "", nginx("GET", "http//x y", "", "10.0.0.1"), 400, nil},
		{"relative URI", "", nginx("GET", "api/x", "", "10.0.0.1"), 400, nil},
		{"bad method", "", nginx("GE T", "/", "", "10.0.0.1"), 400, nil},
		{"DNS-rebound Host", "evil.example:9466", nginx("GET", "/", "", "10.0.0.77"), 421, nil},
		{"localhost Host", "localhost:9466", nginx("GET", "/", "", "10.0.0.77"), 200, nil},
		{"IPv6 literal Host", "[::1]:9466", nginx("GET", "/", "", "10.0.0.77"), 200, nil},
	}
	for _, st := range steps {
		w := auth(h, st.host, st.headers)
		if w.Code != st.want {
			t.Fatalf("%s: %d %s, want %d", st.name, w.Code, w.Body, st.want)
		}
		for k, v := range st.wantHdr {
			if got := w.Header().Get(k); !strings.Contains(got, v) {
				t.Fatalf("%s: header %s %q, want it to contain %q (all: %v)", st.name, k, got, v, w.Header())
			}
		}
	}
	st := s.Stats()
	if st.AuthAllowed != 10 || st.AuthDenied != 4 || st.BadHost != 1 || st.Invalid != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestForwardAuthDefaultRoutesTrustLoopbackProxies(t *testing.T) {
	s := newServer(t, newDaemon(t), "")
	h := s.Handler()
	for i, want := range []int{200, 200, 429} {
		if w := auth(h, "", map[string]string{"X-Original-URI": "/", "X-Forwarded-For": "192.0.2.7"}); w.Code != want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want)
		}
	}
	if w := auth(h, "", map[string]string{"X-Original-URI": "/", "X-Forwarded-For": "192.0.2.8"}); w.Code != 200 {
		t.Fatalf("another client: %d, want 200 (keyed by the forwarded address, not the proxy's)", w.Code)
	}
}

func TestRoutesAreChecked(t *testing.T) {
	d := newDaemon(t)
	tests := []struct{ name, routes, want string }{
		{"unknown rule", "default: [{rule: nope}]", "nope"},
		{"cost above the burst", "default: [{rule: api, cost: 9}]", "burst"},
		{"elastic", "routes: [{match: /x, limits: [{rule: api}], elastic: {extra: 0.5, max_p99: 1s, max_error_rate: 0.1}}]", "elastic"},
		{"not YAML", "routes: [", "routes"},
		{"shaping longer than the endpoint holds", "routes: [{match: /x, limits: [{rule: api}], shape: {max_wait: 1m, max_queue: 10}}]", "max_wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "routes.yaml")
			os.WriteFile(p, []byte(tt.routes), 0o600)
			_, err := New(Config{Decider: d, Limiter: d.Local(), Rules: d.Rules, RoutesPath: p, MaxBody: 1024, MaxBatch: 4, MaxKeyLen: 64, MaxConns: 8})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func TestReloadKeepsGoodRoutes(t *testing.T) {
	d := newDaemon(t)
	s := newServer(t, d, testRoutes)
	if err := os.WriteFile(s.cfg.RoutesPath, []byte("default: [{rule: nope}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("reload of bad routes succeeded")
	}
	if w := auth(s.Handler(), "", map[string]string{"X-Original-URI": "/api/x", "X-API-Key": "k"}); w.Header().Get("RateLimit-Policy") == "" || !strings.Contains(w.Header().Get("RateLimit-Policy"), "api") {
		t.Fatalf("after a bad reload: %d %v, want the old routes' api limit", w.Code, w.Header())
	}
	if err := os.WriteFile(s.cfg.RoutesPath, []byte("default: [{rule: other}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if w := auth(s.Handler(), "", map[string]string{"X-Original-URI": "/api/x"}); !strings.Contains(w.Header().Get("RateLimit-Policy"), "other") {
		t.Fatalf("after a good reload: %v", w.Header())
	}
}

func TestNewRefusesMissingBounds(t *testing.T) {
	d := newDaemon(t)
	for _, cfg := range []Config{
		{Limiter: d.Local(), MaxBody: 1, MaxBatch: 1, MaxKeyLen: 1, MaxConns: 1},
		{Decider: d, Limiter: d.Local(), MaxBatch: 1, MaxKeyLen: 1, MaxConns: 1},
		{Decider: d, Limiter: d.Local(), MaxBody: 1, MaxBatch: 1, MaxKeyLen: 1},
	} {
		if _, err := New(cfg); err == nil {
			t.Fatalf("%+v accepted", cfg)
		}
	}
	var e *requestError
	if errors.As(error(badRequest("x")), &e) && e.status != 400 {
		t.Fatal("badRequest is not 400")
	}
}

// A shaped route holds the forward-auth answer until the request's turn
// and then admits it, instead of answering 429 at once.
func TestForwardAuthShapes(t *testing.T) {
	s := newServer(t, newDaemon(t), "default: [{rule: api}]\nroutes:\n  - match: /slow/\n    limits: [{rule: shaped}]\n    shape: {max_wait: 5s, max_queue: 4}\n")
	h := s.Handler()
	hdr := map[string]string{"X-Original-URI": "/slow/x", "X-Forwarded-For": "10.0.0.1"}
	if w := auth(h, "", hdr); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	// The daemon's clock is fake (its turn is 1 s away on it), the hold is
	// real: the second answer comes after up to 1 s, admitted.
	start := time.Now()
	w := auth(h, "", hdr)
	took := time.Since(start)
	if w.Code != 200 || took < 500*time.Millisecond || took > 4*time.Second {
		t.Fatalf("shaped: %d after %s, want 200 after a hold of about 1 s", w.Code, took)
	}
}

func TestHostGuard(t *testing.T) {
	d := newDaemon(t)
	s, err := New(Config{Decider: d, Limiter: d.Local(), MaxBody: 1024, MaxBatch: 4, MaxKeyLen: 64, MaxConns: 8,
		AllowedHosts: []string{"Sluice.Internal", "api.internal:9466"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:9466", 200}, {"127.0.0.1", 200}, {"[::1]:9466", 200}, {"10.1.2.3:80", 200},
		{"localhost:9466", 200}, {"LOCALHOST", 200}, {"sluice.internal:9466", 200}, {"api.internal", 200},
		{"evil.example", 421}, {"evil.example:9466", 421}, {"localhost.evil.example", 421}, {"", 421},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/check", strings.NewReader(`{"checks":[{"rule":"other","key":"k"}]}`))
		r.Host = tt.host
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("Host %q: %d, want %d", tt.host, w.Code, tt.want)
		}
	}
}

// Routes may name a host (ServeMux patterns): the host is the forwarded one.
func TestForwardAuthMatchesTheForwardedHost(t *testing.T) {
	s := newServer(t, newDaemon(t), "identity: {trusted_proxies: [127.0.0.1]}\ndefault: [{rule: other}]\nroutes:\n  - match: \"admin.example/\"\n    limits: [{rule: api}]\n")
	for _, tt := range []struct{ host, want string }{
		{"admin.example", `"api"`}, {"shop.example", `"other"`}, {"", `"other"`},
	} {
		hdr := map[string]string{"X-Original-URI": "/x", "X-Forwarded-For": "10.0.0.1"}
		if tt.host != "" {
			hdr["X-Forwarded-Host"] = tt.host
		}
		if w := auth(s.Handler(), "", hdr); !strings.Contains(w.Header().Get("RateLimit-Policy"), tt.want) {
			t.Errorf("X-Forwarded-Host %q: %d, policy %q, want %s", tt.host, w.Code, w.Header().Get("RateLimit-Policy"), tt.want)
		}
	}
}
