package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/config"
)

// recorder is a Limiter that admits everything and remembers the checks it
// was asked about.
type recorder struct{ checks [][]clientlib.Check }

func (r *recorder) AllowAll(_ context.Context, checks ...clientlib.Check) clientlib.Decision {
	r.checks = append(r.checks, append([]clientlib.Check(nil), checks...))
	return clientlib.Decision{Allowed: true, Limit: 10, Remaining: 9, Period: time.Second, Denied: -1, Deciding: 0}
}

// TestNewMiddlewareMapsTheRoutesFile: what the routes file says reaches the
// middleware (identity header, routes, costs, per-route keys, header
// families), and what httplimit refuses is refused.
func TestNewMiddlewareMapsTheRoutesFile(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		method     string
		path       string
		wantErr    string
		wantChecks string // rule:cost:key of each check, space-separated
		wantHeader string // a response header that must be present
		noHeader   string // a response header that must be absent
	}{
		{name: "default limits by the identity header",
			yaml:   "identity:\n  header: X-API-Key\n  client_ip: false\ndefault:\n  - rule: api\n",
			method: "GET", path: "/", wantChecks: "api:1:key:k1", wantHeader: "RateLimit"},
		{name: "a route's limits and costs",
			yaml:   "identity:\n  header: X-API-Key\n  client_ip: false\ndefault:\n  - rule: api\nroutes:\n  - match: \"POST /upload\"\n    limits:\n      - {rule: api}\n      - {rule: uploads, cost: 10, per_route: true}\n",
			method: "POST", path: "/upload", wantChecks: "api:1:key:k1 uploads:10:route:POST /upload"},
		{name: "legacy headers only",
			yaml:   "identity:\n  header: X-API-Key\n  client_ip: false\nheaders: [legacy]\ndefault:\n  - rule: api\n",
			method: "GET", path: "/", wantChecks: "api:1:key:k1", wantHeader: "X-Ratelimit-Limit", noHeader: "RateLimit"},
		{name: "a bad trusted proxy is refused",
			yaml:    "identity:\n  trusted_proxies: [not-a-prefix]\ndefault:\n  - rule: api\n",
			wantErr: "not-a-prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			routes, err := config.ParseProxyRoutes("routes.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			lim := &recorder{}
			m, err := NewMiddleware(routes, lim, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewMiddleware: %v", err)
			}
			h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
			req := httptest.NewRequest(tc.method, tc.path, nil)
			req.Header.Set("X-API-Key", "k1")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if len(lim.checks) != 1 {
				t.Fatalf("%d decisions asked, want 1", len(lim.checks))
			}
			var got []string
			for _, c := range lim.checks[0] {
				got = append(got, c.Rule+":"+strconv.FormatInt(c.Cost, 10)+":"+c.Key)
			}
			if g := strings.Join(got, " "); g != tc.wantChecks {
				t.Fatalf("checks %q, want %q", g, tc.wantChecks)
			}
			if tc.wantHeader != "" && rec.Header().Get(tc.wantHeader) == "" {
				t.Fatalf("no %s header in %v", tc.wantHeader, rec.Header())
			}
			if tc.noHeader != "" && rec.Header().Get(tc.noHeader) != "" {
				t.Fatalf("%s header present: %v", tc.noHeader, rec.Header())
			}
		})
	}
}
