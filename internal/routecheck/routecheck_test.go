package routecheck

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"rule given", Rule("api"), ""},
		{"rule missing", Rule(""), "rule is missing"},
		{"cost zero", Cost(0), ""},
		{"cost negative", Cost(-1), "cost -1 is negative"},
		{"shape ok", Shape(time.Second, 10), ""},
		{"shape without queue", Shape(time.Second, 0), "max_queue"},
		{"shape without wait", Shape(0, 10), "max_wait"},
		{"elastic ok", Elastic(0.5, time.Second, 0.01), ""},
		{"elastic without p99", Elastic(0.5, 0, 0), "max_p99"},
		{"elastic without extra", Elastic(0, time.Second, 0), "extra"},
		{"elastic negative error rate", Elastic(0.5, time.Second, -0.1), "max_error_rate"},
		{"elastic NaN extra", Elastic(math.NaN(), time.Second, 0), "finite"},
		{"elastic infinite extra", Elastic(math.Inf(1), time.Second, 0), "finite"},
		{"elastic NaN error rate", Elastic(0.5, time.Second, math.NaN()), "finite"},
		{"known", Known("api", true), ""},
		{"unknown", Known("nope", false), `rule "nope" is not defined`},
		{"cost within burst", WithinBurst("api", 20, 20), ""},
		{"cost 0 counts as 1", WithinBurst("api", 0, 1), ""},
		{"cost 0 against burst 0", WithinBurst("api", 0, 0), "cost 1 exceeds the burst 0"},
		{"cost above burst", WithinBurst("api", 21, 20), `cost 21 exceeds the burst 20 of rule "api"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.want == "" && tc.err != nil:
				t.Fatalf("unexpected error %v", tc.err)
			case tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", tc.err, tc.want)
			}
		})
	}
}
