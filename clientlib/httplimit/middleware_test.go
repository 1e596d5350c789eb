package httplimit

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// scripted is a Limiter that records the checks it is asked and answers
// with the decision its function gives.
type scripted struct {
	mu     sync.Mutex
	asked  [][]clientlib.Check
	decide func(checks []clientlib.Check) clientlib.Decision
}

func (s *scripted) AllowAll(_ context.Context, checks ...clientlib.Check) clientlib.Decision {
	s.mu.Lock()
	s.asked = append(s.asked, append([]clientlib.Check(nil), checks...))
	s.mu.Unlock()
	return s.decide(checks)
}

func (s *scripted) last() []clientlib.Check {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.asked) == 0 {
		return nil
	}
	return s.asked[len(s.asked)-1]
}

func TestClientAddrTrustsOnlyConfiguredProxies(t *testing.T) {
	proxies, err := ParsePrefixes([]string{"10.0.0.0/8", "192.168.1.1"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		remote  string
		headers map[string]string
		want    string
		fwd     string // Identity.ForwardedHeader
	}{
		{"direct client", "203.0.113.7:5555", nil, "203.0.113.7", ""},
		{"spoofed XFF from an untrusted peer is ignored", "203.0.113.7:5555", map[string]string{"X-Forwarded-For": "1.2.3.4"}, "203.0.113.7", ""},
		{"trusted proxy: rightmost untrusted hop", "10.1.1.1:80", map[string]string{"X-Forwarded-For": "6.6.6.6, 198.51.100.9"}, "198.51.100.9", ""},
		{"chain of trusted proxies", "10.1.1.1:80", map[string]string{"X-Forwarded-For": "198.51.100.9, 192.168.1.1, 10.2.2.2"}, "198.51.100.9", ""},
		{"client-forged prefix cannot win", "10.1.1.1:80", map[string]string{"X-Forwarded-For": "10.9.9.9, 198.51.100.9"}, "198.51.100.9", ""},
		{"Forwarded header", "10.1.1.1:80", map[string]string{"Forwarded": `for=198.51.100.9;proto=https, for="10.3.3.3"`}, "198.51.100.9", HeaderForwarded},
		{"IPv6 in Forwarded", "10.1.1.1:80", map[string]string{"Forwarded": `for="[2001:db8::1]:4711"`}, "2001:db8::1", HeaderForwarded},
		{"garbage in the chain stops trust", "10.1.1.1:80", map[string]string{"X-Forwarded-For": "198.51.100.9, nonsense"}, "10.1.1.1", ""},
		{"IPv4-mapped peer", "[::ffff:203.0.113.7]:1", nil, "203.0.113.7", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := Identity{ClientIP: true, TrustedProxies: proxies, ForwardedHeader: tt.fwd}
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			got, ok := id.ClientAddr(r)
			if !ok || got != netip.MustParseAddr(tt.want) {
				t.Fatalf("ClientAddr = %v %v, want %s", got, ok, tt.want)
			}
		})
	}
	if _, err := ParsePrefixes([]string{"not-an-ip"}); err == nil {
		t.Fatal("bad trusted proxy accepted")
	}
}

func TestIdentityKeySources(t *testing.T) {
	id := Identity{Header: "X-API-Key", User: func(r *http.Request) string { return r.Header.Get("X-Test-User") }, ClientIP: true}
	tests := []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"api key first", map[string]string{"X-API-Key": "k1", "X-Test-User": "alice"}, "key:k1"},
		{"then the user", map[string]string{"X-Test-User": "alice"}, "user:alice"},
		{"then the address", nil, "ip:192.0.2.1"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		for k, v := range tt.headers {
			r.Header.Set(k, v)
		}
		if got := id.Key(r); got != tt.want {
			t.Errorf("%s: key %q, want %q", tt.name, got, tt.want)
		}
	}
	anon := Identity{Anonymous: "nobody"}
	if got := anon.Key(httptest.NewRequest("GET", "/", nil)); got != "nobody" {
		t.Errorf("no identity: %q", got)
	}
}

func newMiddleware(t *testing.T, lim Limiter, headers *Headers) http.Handler {
	t.Helper()
	m, err := New(Config{
		Limiter:  lim,
		Identity: Identity{Header: "X-API-Key", ClientIP: true},
		Routes: []Route{
			{Pattern: "POST /upload", Limits: []Limit{{Rule: "api", Cost: 1}, {Rule: "uploads", Cost: 10, PerRoute: true}}},
			{Pattern: "GET /free/", Limits: nil},
		},
		Default: []Limit{{Rule: "api"}},
		Headers: headers,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Reached", "yes")
		w.Write([]byte("ok"))
	}))
}

func serve(h http.Handler, method, path string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestAdmittedRequestsCarryEveryHeader(t *testing.T) {
	lim := &scripted{decide: func(c []clientlib.Check) clientlib.Decision {
		return clientlib.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 580 * time.Millisecond, Period: time.Second, Denied: -1, Deciding: 0}
	}}
	w := serve(newMiddleware(t, lim, nil), "GET", "/items/7", map[string]string{"X-API-Key": "k"})
	want := map[string]string{
		"X-Reached":               "yes",
		"X-Ratelimit-Limit":       "100",
		"X-Ratelimit-Remaining":   "42",
		"X-Ratelimit-Retry-After": "0",
		"Ratelimit-Policy":        `"api";q=100;w=1`,
		"Ratelimit":               `"api";r=42;t=1`,
	}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if w.Code != 200 || w.Header().Get("Retry-After") != "" {
		t.Fatalf("code %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	if got := lim.last(); len(got) != 1 || got[0] != (clientlib.Check{Rule: "api", Key: "key:k", Cost: 1}) {
		t.Fatalf("checks %+v", got)
	}
}

func TestThrottledRequestsGet429AndNeverReachTheHandler(t *testing.T) {
	lim := &scripted{decide: func(c []clientlib.Check) clientlib.Decision {
		return clientlib.Decision{Allowed: false, Limit: 5, RetryAfter: 2100 * time.Millisecond, ResetAfter: 9 * time.Second, Period: time.Minute, Denied: 1, Deciding: 1}
	}}
	w := serve(newMiddleware(t, lim, nil), "POST", "/upload", nil)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("X-Reached") != "" {
		t.Fatalf("code %d, reached %q", w.Code, w.Header().Get("X-Reached"))
	}
	for k, v := range map[string]string{
		"Retry-After": "3", "X-Ratelimit-Retry-After": "3", "X-Ratelimit-Remaining": "0",
		"Ratelimit-Policy": `"uploads";q=5;w=60`, "Ratelimit": `"uploads";r=0;t=3`,
		"Content-Type": "application/problem+json",
	} {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	var body problem
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Status != 429 || body.Rule != "uploads" || body.RetryAfter != 3 {
		t.Fatalf("body %s (%v)", w.Body.String(), err)
	}
	// Multi-limit with cost: per client and per route, checked together.
	got := lim.last()
	if len(got) != 2 || got[0] != (clientlib.Check{Rule: "api", Key: "ip:192.0.2.1", Cost: 1}) || got[1] != (clientlib.Check{Rule: "uploads", Key: "route:POST /upload", Cost: 10}) {
		t.Fatalf("checks %+v", got)
	}
}

func TestHeaderFamiliesCanBeTurnedOff(t *testing.T) {
	lim := &scripted{decide: func(c []clientlib.Check) clientlib.Decision {
		return clientlib.Decision{Allowed: true, Limit: 1, Remaining: 1, Period: time.Second, Denied: -1, Deciding: 0}
	}}
	for _, tt := range []struct {
		h           Headers
		legacy, dft bool
	}{{HeadersLegacy, true, false}, {HeadersDraft, false, true}, {HeadersNone, false, false}} {
		h := tt.h
		w := serve(newMiddleware(t, lim, &h), "GET", "/", nil)
		if (w.Header().Get("X-Ratelimit-Limit") != "") != tt.legacy || (w.Header().Get("RateLimit") != "") != tt.dft {
			t.Errorf("headers %d: got %v", tt.h, w.Header())
		}
	}
}

func TestUnlimitedRoutesAndFailOpenPassWithoutHeaders(t *testing.T) {
	lim := &scripted{decide: func(c []clientlib.Check) clientlib.Decision {
		return clientlib.Decision{Allowed: true, FailedOpen: true, Denied: -1, Deciding: -1, Err: clientlib.ErrDaemonDown}
	}}
	h := newMiddleware(t, lim, nil)
	w := serve(h, "GET", "/free/stuff", nil)
	if w.Code != 200 || len(lim.asked) != 0 {
		t.Fatalf("unlimited route: code %d, asked %d", w.Code, len(lim.asked))
	}
	w = serve(h, "GET", "/items", nil)
	if w.Code != 200 || w.Header().Get("X-Ratelimit-Limit") != "" || w.Header().Get("X-Reached") != "yes" {
		t.Fatalf("failed open: code %d headers %v", w.Code, w.Header())
	}
	closed := &scripted{decide: func(c []clientlib.Check) clientlib.Decision {
		return clientlib.Decision{Allowed: false, FailedOpen: true, Denied: -1, Deciding: -1, Err: clientlib.ErrDaemonDown}
	}}
	// Issue 14: a daemon outage under fail-closed is not a rate limit: 503
	// with a Retry-After of at least a second (it was 429 with Retry-After 0).
	w = serve(newMiddleware(t, closed, nil), "GET", "/items", nil)
	if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); w.Code != 503 || w.Header().Get("X-Ratelimit-Limit") != "" || ra < 1 || ra > 5 {
		t.Fatalf("failed closed: code %d headers %v", w.Code, w.Header())
	}
}

func TestBadConfigIsRejected(t *testing.T) {
	lim := &scripted{}
	for _, cfg := range []Config{
		{},
		{Limiter: lim, Routes: []Route{{Pattern: "GET /a/{", Limits: []Limit{{Rule: "r"}}}}},
		{Limiter: lim, Routes: []Route{{Pattern: "/a", Limits: []Limit{{Rule: ""}}}}},
		{Limiter: lim, Routes: []Route{{Pattern: "/a"}, {Pattern: "/a"}}},
		{Limiter: lim, Default: []Limit{{Rule: "r", Cost: -1}}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
