package config

import (
	"strings"
	"testing"
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
`
	r, err := ParseProxyRoutes("routes.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if r.Identity.Header != "X-API-Key" || *r.Identity.ClientIP || len(r.Routes) != 1 || r.Routes[0].Limits[1] != (ProxyLimit{Rule: "uploads", Cost: 10, PerRoute: true}) {
		t.Fatalf("parsed %+v", r)
	}
	if r, err := ParseProxyRoutes("empty.yaml", nil); err != nil || len(r.Routes) != 0 {
		t.Fatalf("empty file: %+v %v", r, err)
	}
	for _, tt := range []struct{ src, want string }{
		{"routes:\n  - match: /\n    limitz: []\n", "routes.yaml"},
		{"routes:\n  - match: /\n    limitz: []\n", "line 3"},
		{"routes:\n  - limits: [{rule: a}]\n", "match is missing"},
		{"default:\n  - cost: 2\n", "rule is missing"},
		{"headers: [fancy]\n", "not legacy or draft"},
	} {
		if _, err := ParseProxyRoutes("routes.yaml", []byte(tt.src)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err %v, want it to mention %q", tt.src, err, tt.want)
		}
	}
}
