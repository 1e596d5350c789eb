package config

import (
	"errors"
	"strings"
	"testing"
)

// A routes file's problems are all reported at once, each with file, line,
// column and field, in the file's terms: no Go type or field names.
func TestParseProxyRoutesReportsEveryProblem(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // one *FieldError each, in order
	}{
		{"several problems in one file", `identity:
  header: [a]
  client_ip: maybe
  forwarded_header: X-Real-IP
headers: [legacy, fancy]
default:
  - {rule: a, cost: lots}
routes:
  - match: /x
    limits:
      - {rule: b, per_route: 2}
    shape: {max_wait: soon, max_queue: 3}
  - limits: [{cost: -1}]
    elastic: {extra: x, max_p99: 1s, colour: red}
bogus: 1
`, []string{
			"r.yaml:15:8: bogus: unknown field (known: identity, headers, default, routes)",
			"r.yaml:2:11: identity.header: expected a string, got a list",
			"r.yaml:3:14: identity.client_ip: expected true or false, got \"maybe\"",
			"r.yaml:4:21: identity.forwarded_header: \"X-Real-IP\" is not X-Forwarded-For or Forwarded",
			"r.yaml:5:19: headers[1]: \"fancy\" is not legacy or draft",
			"r.yaml:7:21: default[0].cost: expected a whole number, got \"lots\"",
			"r.yaml:11:30: routes[0].limits[0].per_route: expected true or false, got \"2\"",
			"r.yaml:12:23: routes[0].shape.max_wait: expected a duration such as 500ms or 2s, got \"soon\"",
			"r.yaml:12:12: routes[0].shape: shaping needs max_wait and max_queue above zero (got 0s and 3)",
			"r.yaml:13:5: routes[1].match: missing: every route needs a pattern to match",
			"r.yaml:13:14: routes[1].limits[0].rule: rule is missing",
			"r.yaml:13:21: routes[1].limits[0].cost: cost -1 is negative",
			"r.yaml:14:46: routes[1].elastic.colour: unknown field (known: extra, max_p99, max_error_rate, window)",
			"r.yaml:14:22: routes[1].elastic.extra: expected a number, got \"x\"",
			"r.yaml:14:14: routes[1].elastic: elastic needs extra and max_p99 above zero and max_error_rate not below zero",
		}},
		{"wrong shapes", "default: {rule: a}\nroutes: 3\n", []string{
			"r.yaml:1:10: default: expected a list, got a mapping",
			"r.yaml:2:9: routes: expected a list, got the value \"3\"",
		}},
		{"a list item that is not a limit", "default: [a]\n", []string{
			"r.yaml:1:11: default[0]: expected a mapping, got the value \"a\"",
		}},
		{"syntax", "routes:\n  - match: [\n", []string{"r.yaml:2:1: yaml syntax: did not find expected node content"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseProxyRoutes("r.yaml", []byte(tt.src))
			if !errors.Is(err, ErrInvalidRoutes) {
				t.Fatalf("err %v: want ErrInvalidRoutes", err)
			}
			var got []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap()[1].(interface{ Unwrap() []error }).Unwrap() {
				var fe *FieldError
				if !errors.As(e, &fe) {
					t.Fatalf("%v is not a *FieldError", e)
				}
				got = append(got, fe.Error())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("problem %d = %q, want %q", i, got[i], tt.want[i])
				}
			}
			for _, goName := range []string{"config.", "ProxyRoute", "ProxyLimit", "int64", "time.Duration", "unmarshal", ".go:"} {
				if strings.Contains(err.Error(), goName) {
					t.Errorf("message names Go's %q: %v", goName, err)
				}
			}
		})
	}
}
