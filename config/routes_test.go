package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseProxyRoutes(t *testing.T) {
	good := `
identity:
  header: X-API-Key
  client_ip: false
  trusted_proxies: [10.0.0.0/8]
headers: [draft]
default:
  - rule: api
routes:
  - match: "POST /upload"
    limits:
      - {rule: api}
      - {rule: uploads, cost: 10, per_route: true}
    shape: {max_wait: 500ms, max_queue: 100}
    elastic: {extra: 0.5, max_p99: 200ms, max_error_rate: 0.01, window: 10s}
`
	r, err := ParseProxyRoutes("routes.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if r.Identity.Header != "X-API-Key" || *r.Identity.ClientIP || len(r.Routes) != 1 || r.Routes[0].Limits[1] != (ProxyLimit{Rule: "uploads", Cost: 10, PerRoute: true}) {
		t.Fatalf("parsed %+v", r)
	}
	if s, e := r.Routes[0].Shape, r.Routes[0].Elastic; s.MaxWait != 500*time.Millisecond || s.MaxQueue != 100 || e.Extra != 0.5 || e.MaxP99 != 200*time.Millisecond {
		t.Fatalf("shape %+v elastic %+v", s, e)
	}
	if r, err := ParseProxyRoutes("empty.yaml", nil); err != nil || len(r.Routes) != 0 {
		t.Fatalf("empty file: %+v %v", r, err)
	}
	for _, tt := range []struct{ src, want string }{
		{"routes:\n  - match: /\n    limitz: []\n", "routes.yaml"},
		{"routes:\n  - match: /\n    limitz: []\n", "routes.yaml:3:13: routes[0].limitz: unknown field (known: match, limits, shape, elastic)"},
		{"routes:\n  - limits: [{rule: a}]\n", "match: missing"},
		{"routes:\n  - limits: [{rule: a}]\n", "routes.yaml:2:5: routes[0].match"},
		{"default:\n  - cost: 2\n", "rule is missing"},
		{"default:\n  - cost: 2\n", "routes.yaml:2:5: default[0].rule"},
		{"default:\n  - {rule: a, cost: -1}\n", "routes.yaml:2:21: default[0].cost: cost -1 is negative"},
		{"headers: [fancy]\n", "not legacy or draft"},
		{"routes:\n  - match: /\n    shape: {max_wait: 1s}\n", "max_queue"},
		{"routes:\n  - match: /\n    shape: {max_wait: 1s}\n", "routes.yaml:3:12: routes[0].shape"},
		{"routes:\n  - match: /\n    elastic: {extra: 0.5}\n", "max_p99"},
		{"routes:\n  - match: /\n    elastic: {extra: .nan, max_p99: 1s}\n", "finite"},
		{"routes:\n  - match: /\n    elastic: {extra: .inf, max_p99: 1s}\n", "finite"},
		{"routes:\n  - match: /\n    elastic: {extra: 0.5, max_p99: 1s, max_error_rate: .nan}\n", "finite"},
	} {
		if _, err := ParseProxyRoutes("routes.yaml", []byte(tt.src)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err %v, want it to mention %q", tt.src, err, tt.want)
		}
	}
}
