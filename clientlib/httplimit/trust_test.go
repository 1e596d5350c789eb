package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/ipc"
)

// Issue 14: the tests below attack the middleware as a client or a careless
// configuration would.

// lines records log lines.
type lines struct {
	mu  sync.Mutex
	got []string
}

func (l *lines) log(msg string, kv ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintln(append([]any{msg}, kv...)...))
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

// A client behind a trusted proxy sends both forwarding headers; only the
// one the operator named is read, so the other cannot pick the key.
func TestOnlyTheNamedForwardingHeaderIsRead(t *testing.T) {
	proxies, _ := ParsePrefixes([]string{"10.0.0.0/8"})
	both := map[string]string{
		"X-Forwarded-For": "198.51.100.9",     // what the trusted proxy appended
		"Forwarded":       "for=203.0.113.66", // what the client added, passed through untouched
	}
	for _, tt := range []struct {
		fwd, want string
		headers   map[string]string
	}{
		{"", "198.51.100.9", both},
		{"x-forwarded-for", "198.51.100.9", both},
		{"Forwarded", "203.0.113.66", both},
		{"Forwarded", "10.1.1.1", map[string]string{"X-Forwarded-For": "198.51.100.9"}}, // the wrong header alone: the peer
		{"", "10.1.1.1", map[string]string{"Forwarded": "for=203.0.113.66"}},
	} {
		t.Run(tt.fwd+"→"+tt.want, func(t *testing.T) {
			lim := &scripted{decide: func([]clientlib.Check) clientlib.Decision {
				return clientlib.Decision{Allowed: true, Limit: 1, Remaining: 1, Period: time.Second, Denied: -1, Deciding: 0}
			}}
			m, err := New(Config{Limiter: lim, Identity: Identity{ClientIP: true, TrustedProxies: proxies, ForwardedHeader: tt.fwd}, Default: []Limit{{Rule: "api"}}})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "10.1.1.1:443"
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			m.Wrap(http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), r)
			if got := lim.last(); len(got) != 1 || got[0].Key != "ip:"+tt.want {
				t.Fatalf("checks %+v, want key ip:%s", got, tt.want)
			}
		})
	}
	if _, err := New(Config{Limiter: &scripted{}, Identity: Identity{ForwardedHeader: "X-Real-IP"}}); err == nil {
		t.Fatal("a forwarding header other than X-Forwarded-For or Forwarded was accepted")
	}
}

// Requests the limiter refuses as invalid, or cannot decide, never pass
// silently: each kind has its answer, its count and its log line.
func TestRequestsNotDecidedNormallyAreAnsweredCountedAndLogged(t *testing.T) {
	for _, tt := range []struct {
		name        string
		d           clientlib.Decision
		code        int
		reached     bool
		invalid     uint64
		unknown     uint64
		undecided   uint64
		logContains string
	}{
		{"invalid: 500, not served", clientlib.InvalidDecision(fmt.Errorf("%w: cost 500 above burst 100", clientlib.ErrInvalid)),
			500, false, 1, 0, 0, "misconfigured"},
		{"unknown rule under deny: 500", clientlib.Decision{Allowed: false, Status: ipc.StatusUnknownRule, Denied: 0, Deciding: 0},
			500, false, 1, 0, 0, "misconfigured"},
		{"unknown rule under allow: served unlimited, no headers", clientlib.Decision{Allowed: true, Status: ipc.StatusUnknownRuleAllowed, Denied: -1, Deciding: 0},
			200, true, 0, 1, 0, "does not know"},
		{"fail open: served, no headers", clientlib.Decision{Allowed: true, FailedOpen: true, Denied: -1, Deciding: -1, Err: clientlib.ErrTimeout},
			200, true, 0, 0, 1, "failing open (request allowed) cause timeout"},
		{"fail closed: 503", clientlib.Decision{Allowed: false, FailedOpen: true, Denied: -1, Deciding: -1, Err: clientlib.ErrDaemonDown},
			503, false, 0, 0, 1, "failing closed (request denied) cause daemon_down"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log lines
			lim := &scripted{decide: func([]clientlib.Check) clientlib.Decision { return tt.d }}
			m, err := New(Config{Limiter: lim, Identity: Identity{Header: "X-API-Key"}, Default: []Limit{{Rule: "api"}}, Log: log.log})
			if err != nil {
				t.Fatal(err)
			}
			reached := false
			w := serve(m.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true })), "GET", "/", map[string]string{"X-API-Key": "k"})
			ev := m.Events()
			if w.Code != tt.code || reached != tt.reached || ev.Invalid() != tt.invalid || ev.UnknownRule() != tt.unknown || ev.Undecided() != tt.undecided {
				t.Fatalf("code %d reached %v invalid %d unknown %d undecided %d", w.Code, reached, ev.Invalid(), ev.UnknownRule(), ev.Undecided())
			}
			if w.Header().Get("X-Ratelimit-Limit") != "" || w.Header().Get("RateLimit") != "" {
				t.Fatalf("limit headers on a request nothing limited: %v", w.Header())
			}
			if got := log.all(); len(got) != 1 || !strings.Contains(got[0], tt.logContains) {
				t.Fatalf("log %q, want one line mentioning %q", got, tt.logContains)
			}
			switch tt.code {
			case 500:
				var body problem
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Status != 500 || body.Rule != "api" || body.Title != "Rate limit misconfigured" || w.Header().Get("Retry-After") != "" {
					t.Fatalf("500 body %s headers %v (%v)", w.Body.String(), w.Header(), err)
				}
			case 503:
				ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
				var body problem
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || ra < 1 || ra > 5 || body.Status != 503 || body.RetryAfter != int64(ra) {
					t.Fatalf("503 Retry-After %q body %s (%v)", w.Header().Get("Retry-After"), w.Body.String(), err)
				}
			}
		})
	}
}

// Under an outage, every undecided request is counted but the log says so
// once per interval, with the count since the previous line.
func TestFailOpenIsCountedEveryTimeAndLoggedOncePerInterval(t *testing.T) {
	var log lines
	clk := &stepClock{t: time.Unix(1_800_000_000, 0)}
	ev := NewEvents(log.log, 10*time.Second, clk.Now)
	lim := &scripted{decide: func([]clientlib.Check) clientlib.Decision {
		return clientlib.Decision{Allowed: true, FailedOpen: true, Denied: -1, Deciding: -1, Err: clientlib.ErrDaemonDown}
	}}
	m, err := New(Config{Limiter: lim, Identity: Identity{Header: "X-API-Key"}, Default: []Limit{{Rule: "api"}}, Events: ev, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Wrap(http.NotFoundHandler())
	for range 100 {
		serve(h, "GET", "/", map[string]string{"X-API-Key": "k"})
	}
	if got := log.all(); len(got) != 1 || ev.FailOpen.Total(clientlib.CauseDaemonDown) != 100 {
		t.Fatalf("after 100 in one interval: %d lines %q, counted %d", len(got), got, ev.FailOpen.Total(clientlib.CauseDaemonDown))
	}
	clk.Advance(10 * time.Second)
	serve(h, "GET", "/", map[string]string{"X-API-Key": "k"})
	if got := log.all(); len(got) != 2 || !strings.Contains(got[1], "count 100") {
		t.Fatalf("next interval: lines %q, want a second with count 100 (99 unlogged + this one)", got)
	}
}

// Limit, Remaining and the policy never contradict one another, for every
// algorithm, and the reset is sent as X-RateLimit-Reset too.
func TestHeadersAreConsistentForEveryAlgorithm(t *testing.T) {
	for _, tt := range []struct {
		algorithm string
		burst     string // "" for the windows
		admitted  int    // of back-to-back requests at one instant
	}{
		{"token_bucket", "4", 4},
		{"leaky_bucket", "4", 4},
		{"gcra", "4", 4},
		{"fixed_window", "", 2},
		{"sliding_window", "", 2},
		{"sliding_log", "", 2},
	} {
		t.Run(tt.algorithm, func(t *testing.T) {
			rule := "rules:\n  r:\n    rate: 2/10s\n    algorithm: " + tt.algorithm + "\n"
			if tt.burst != "" {
				rule += "    burst: " + tt.burst + "\n"
			}
			e := embedded(t, rule)
			m, err := New(Config{Limiter: e, Identity: Identity{Header: "X-API-Key"}, Default: []Limit{{Rule: "r"}}})
			if err != nil {
				t.Fatal(err)
			}
			h := m.Wrap(http.NotFoundHandler())
			for i := range tt.admitted + 1 {
				w := serve(h, "GET", "/", map[string]string{"X-API-Key": "k"})
				hd := w.Header()
				limit, _ := strconv.Atoi(hd.Get("X-Ratelimit-Limit"))
				remaining, err1 := strconv.Atoi(hd.Get("X-Ratelimit-Remaining"))
				reset, err2 := strconv.Atoi(hd.Get("X-Ratelimit-Reset"))
				if limit != 2 || err1 != nil || err2 != nil || remaining < 0 || remaining > limit {
					t.Fatalf("request %d: Limit %q Remaining %q Reset %q", i, hd.Get("X-Ratelimit-Limit"), hd.Get("X-Ratelimit-Remaining"), hd.Get("X-Ratelimit-Reset"))
				}
				if p, r := hd.Get("RateLimit-Policy"), hd.Get("RateLimit"); p != `"r";q=2;w=10` || r != fmt.Sprintf(`"r";r=%d;t=%d`, remaining, reset) {
					t.Fatalf("request %d: RateLimit-Policy %q RateLimit %q (Remaining %d Reset %d)", i, p, r, remaining, reset)
				}
				if want := min(tt.admitted-1-i, 2); i < tt.admitted && (w.Code != 404 || remaining != max(want, 0)) {
					t.Fatalf("request %d: code %d remaining %d, want admitted with %d", i, w.Code, remaining, max(want, 0))
				}
				if i == tt.admitted {
					ra, _ := strconv.Atoi(hd.Get("Retry-After"))
					if w.Code != 429 || remaining != 0 || reset < 1 || ra != reset {
						t.Fatalf("refused: code %d remaining %d reset %d Retry-After %d", w.Code, remaining, reset, ra)
					}
				}
			}
		})
	}
}

// Identities longer than the daemon's keys (300 bytes, 100 KiB) are limited
// like any other, elastic allowance included.
func TestLongIdentitiesAreLimited(t *testing.T) {
	for _, n := range []int{300, 100 << 10} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			e := embedded(t, "rules:\n  two:\n    rate: 2/1h\n")
			clk := &stepClock{t: time.Unix(1_800_000_000, 0)}
			m, err := New(Config{Limiter: e, Identity: Identity{Header: "X-API-Key"}, Now: clk.Now,
				Routes: []Route{{Pattern: "/", Limits: []Limit{{Rule: "two"}},
					Elastic: &Elastic{Extra: 1, MaxP99: time.Second, MaxErrorRate: 0.5, MinRequests: 1}}}})
			if err != nil {
				t.Fatal(err)
			}
			h := m.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			long := strings.Repeat("k", n)
			var codes []int
			elastic := 0
			for range 5 {
				w := serve(h, "GET", "/", map[string]string{"X-API-Key": long})
				codes = append(codes, w.Code)
				if w.Header().Get("X-Ratelimit-Elastic") == "1" {
					elastic++
				}
			}
			// 2 by the rule, 2 more on the elastic share (the upstream is healthy), then refused.
			if fmt.Sprint(codes) != "[200 200 200 200 429]" || elastic != 2 {
				t.Fatalf("codes %v, %d elastic", codes, elastic)
			}
			if serve(h, "GET", "/", map[string]string{"X-API-Key": long[:n-1] + "j"}).Code != 200 {
				t.Fatal("a different long key shares the first one's bucket")
			}
		})
	}
}

// An embedded limiter knows its rules: New refuses a route it could never
// serve, where it used to pass it unlimited or refuse every request.
func TestNewRefusesRoutesTheRulesCannotServe(t *testing.T) {
	e := embedded(t, "rules:\n  api:\n    rate: 10/1s\n    burst: 20\n")
	for _, tt := range []struct {
		limits []Limit
		want   string
	}{
		{[]Limit{{Rule: "api", Cost: 20}}, ""},
		{[]Limit{{Rule: "api", Cost: 21}}, "cost 21 exceeds the burst 20"},
		{[]Limit{{Rule: "nope"}}, `rule "nope" is not defined`},
	} {
		_, err := New(Config{Limiter: e, Routes: []Route{{Pattern: "/x", Limits: tt.limits}}})
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("limits %+v: err %v, want %q", tt.limits, err, tt.want)
		}
	}
}
