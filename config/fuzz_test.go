package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice/bucket"
)

// Fuzz targets for the files Sluice reads: the rules file (from disk or the
// rules service) and the proxy's routes file. Run one longer with
//
//	go test -run '^$' -fuzz '^FuzzParseRules$' -fuzztime 5m ./config
//
// Inputs the fuzzer has found interesting live in testdata/fuzz and run as
// ordinary tests.

var sampleRules = []string{
	"unknown_rule: deny\nrules:\n  api-per-user:\n    rate: 100/1s\n    burst: 150\n    overrides:\n      premium:\n        rate: 1000/1s\n        burst: 2000\n      bursty:\n        burst: 500\n  daily:\n    rate: 5000/1d\n",
	"rules:\n  x: {rate: 1/s, burst: 2}\n  y: {rate: 3/1m}\n",
	"rules:\n  a:\n    rate: 1/s\n    shadow: true\n    soft_percent: 25\n",
	"rules: {}\n",
	"rules:\n  q:\n    rate: 1000/1d\n    algorithm: fixed_window\n  l:\n    rate: 5/1m\n    algorithm: sliding_log\n    overrides:\n      k: {rate: 9/1m}\n",
	"rules:\n  m:\n    limits:\n      - {rate: 10/1s, burst: 20, algorithm: gcra}\n      - {rate: 100/1h, algorithm: sliding_window}\n    overrides:\n      k:\n        limits: [{burst: 30}, {rate: 200/1h}]\n",
	// Malformed: each is refused.
	"rules:\n  a:\n    rate: 10/s\n    burst: 5\n    algorithm: fixed_window\n",
	"rules:\n  a:\n    limits: [{rate: 1/s}]\n    overrides:\n      k: {limits: [{rate: 1/s}, {rate: 2/s}]}\n",
	"rules:\n  a:\n    rate: 0/s\n  b:\n    rate: 1/s\n    burst: 0\n",
	"rules:\n  a: [\n",
	"rules:\n  a: &x {rate: 1/s}\n  b: *x\n",
	"rules:\n  a:\n    rate: 1/s\n    soft_percent: .nan\n",
	"rules:\n  a:\n    rate: 1/s\n    soft_percent: NaN\n",
	"rules:\n  a:\n    rate: 9223372036854775807/1ns\n    burst: 9223372036854775807\n",
	"rules:\n  a:\n    rate: 1/106752d\n",
	"- 1\n- 2\n",
	"",
}

// FuzzParseRules feeds rules files to ParseRules. A refusal is a *FieldError
// naming the source and a line; an accepted file has valid names and
// positive, finite limits everywhere, and its Hash is stable: the same bytes
// hash the same under another source name, and so does the rule set written
// back out as YAML in another layout.
func FuzzParseRules(f *testing.F) {
	f.Add(DefaultRulesYAML())
	for _, s := range sampleRules {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRules("fuzz.yaml", data)
		if err != nil {
			var fe *FieldError
			if r != nil || !errors.As(err, &fe) || fe.File != "fuzz.yaml" || fe.Line < 1 {
				t.Fatalf("refusal without a *FieldError naming the file and line: %v", err)
			}
			return
		}
		if r.Source != "fuzz.yaml" || len(r.Hash) != 16 || len(r.ByName) > maxRules {
			t.Fatalf("source %q, hash %q, %d rules", r.Source, r.Hash, len(r.ByName))
		}
		for name, rule := range r.ByName {
			if rule.Name != name || len(name) > maxRuleNameLen || !ruleNamePattern.MatchString(name) {
				t.Fatalf("rule %q named %q", name, rule.Name)
			}
			if len(rule.Limits) == 0 || len(rule.Limits) > maxLimits {
				t.Fatalf("rule %q: %d limits", name, len(rule.Limits))
			}
			for _, l := range rule.Limits {
				checkLimit(t, name, l)
			}
			if !(rule.SoftPercent >= 0 && rule.SoftPercent <= 1000) {
				t.Fatalf("rule %q: soft_percent %v outside 0..1000", name, rule.SoftPercent)
			}
			for key, ls := range rule.Overrides {
				if key == "" || len(ls) != len(rule.Limits) {
					t.Fatalf("rule %q: override %q with %d limits", name, key, len(ls))
				}
				for i, l := range ls {
					checkLimit(t, name+"["+key+"]", l)
					if l.Algorithm() != rule.Limits[i].Algorithm() {
						t.Fatalf("rule %q: override %q changes limit %d's algorithm", name, key, i)
					}
				}
			}
		}
		again, err := ParseRules("other.yaml", data)
		if err != nil || again.Hash != r.Hash {
			t.Fatalf("same bytes parsed twice: hash %s then %v, %v", r.Hash, again, err)
		}
		out := rewriteRules(t, r)
		back, err := ParseRules("rewritten.yaml", out)
		if err != nil || back.Hash != r.Hash {
			t.Fatalf("rules written back out do not hash the same (%v):\n%s", err, out)
		}
	})
}

func checkLimit(t *testing.T, what string, l bucket.Limit) {
	t.Helper()
	if l.Count() <= 0 || l.Period() <= 0 || l.Burst() <= 0 || l.Burst() > bucket.MaxCost {
		t.Fatalf("%s: limit %s is not positive", what, l)
	}
}

// rewriteRules writes r back out as a rules file, every field explicit.
func rewriteRules(t *testing.T, r *Rules) []byte {
	t.Helper()
	rate := func(l bucket.Limit, withAlgo bool) map[string]any {
		m := map[string]any{"rate": fmt.Sprintf("%d/%s", l.Count(), l.Period())}
		if l.Algorithm().HasBurst() {
			m["burst"] = l.Burst()
		}
		if withAlgo {
			m["algorithm"] = l.Algorithm().String()
		}
		return m
	}
	list := func(ls []bucket.Limit, withAlgo bool) []any {
		out := make([]any, len(ls))
		for i, l := range ls {
			out[i] = rate(l, withAlgo)
		}
		return out
	}
	rules := map[string]any{}
	for name, rule := range r.ByName {
		var m map[string]any
		if len(rule.Limits) == 1 {
			m = rate(rule.Limits[0], true)
		} else {
			m = map[string]any{"limits": list(rule.Limits, true)}
		}
		m["shadow"] = rule.Shadow
		m["soft_percent"] = rule.SoftPercent
		if len(rule.Overrides) > 0 {
			o := map[string]any{}
			for k, ls := range rule.Overrides {
				if len(ls) == 1 {
					o[k] = rate(ls[0], false)
				} else {
					o[k] = map[string]any{"limits": list(ls, false)}
				}
			}
			m["overrides"] = o
		}
		rules[name] = m
	}
	out, err := yaml.Marshal(map[string]any{"unknown_rule": r.UnknownRule.String(), "rules": rules})
	if err != nil {
		t.Fatalf("marshal rules: %v", err)
	}
	return out
}

// FuzzParseRate checks ParseRate's results against an independent reading of
// the same string: a positive count, and a period that is exactly what the
// string says (no overflowed multiplication).
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"100/1s", "5000/1h", "10/m", "3/500ms", "1/day", "7/2d", " 4 / 1s ", "100", "-1/s", "1/0s", "1/106751d", "1/106752d", "1/213504d", "1/9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		count, period, err := ParseRate(s)
		if err != nil {
			if count != 0 || period != 0 {
				t.Fatalf("%q: error %v with %d/%s", s, err, count, period)
			}
			return
		}
		if count <= 0 || period <= 0 {
			t.Fatalf("%q: accepted %d/%s", s, count, period)
		}
		cs, ps, _ := strings.Cut(strings.TrimSpace(s), "/")
		if c, err := strconv.ParseInt(strings.TrimSpace(cs), 10, 64); err != nil || c != count {
			t.Fatalf("%q: count %d", s, count)
		}
		if d, ok := strings.CutSuffix(strings.TrimSpace(ps), "d"); ok {
			if days, err := strconv.ParseInt(d, 10, 64); err == nil && (days > math.MaxInt64/int64(24*time.Hour) || period != time.Duration(days)*24*time.Hour) {
				t.Fatalf("%q: %d days read as %s", s, days, period)
			}
		}
		// What was accepted reads back the same from its canonical form.
		if c2, p2, err := ParseRate(fmt.Sprintf("%d/%s", count, period)); err != nil || c2 != count || p2 != period {
			t.Fatalf("%q: %d/%s re-read as %d/%s, %v", s, count, period, c2, p2, err)
		}
	})
}

var sampleRoutes = []string{
	"identity:\n  header: X-API-Key\n  client_ip: false\n  trusted_proxies: [10.0.0.0/8]\nheaders: [draft]\ndefault:\n  - rule: api\nroutes:\n  - match: \"POST /upload\"\n    limits:\n      - {rule: api}\n      - {rule: uploads, cost: 10, per_route: true}\n    shape: {max_wait: 500ms, max_queue: 100}\n    elastic: {extra: 0.5, max_p99: 200ms, max_error_rate: 0.01, window: 10s}\n",
	"routes:\n  - match: /\n    limitz: []\n",
	"routes:\n  - limits: [{rule: a}]\n",
	"default:\n  - cost: 2\n",
	"headers: [fancy]\n",
	"routes:\n  - match: /\n    elastic: {extra: .nan, max_p99: 1s, max_error_rate: .nan}\n",
	"a: &a [*a, *a]\n",
	"",
}

// FuzzParseProxyRoutes feeds routes files to ParseProxyRoutes: an accepted
// file satisfies every rule the parser promises (rules named, costs and
// shaping bounds non-negative, elastic figures finite) and, written back out
// as YAML, parses to the same routes.
func FuzzParseProxyRoutes(f *testing.F) {
	for _, s := range sampleRoutes {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseProxyRoutes("routes.yaml", data)
		if err != nil {
			if r != nil || !strings.Contains(err.Error(), "routes.yaml") {
				t.Fatalf("refusal %v does not name the file", err)
			}
			return
		}
		checkLimits := func(limits []ProxyLimit) {
			for _, l := range limits {
				if l.Rule == "" || l.Cost < 0 {
					t.Fatalf("accepted limit %+v", l)
				}
			}
		}
		checkLimits(r.Default)
		for _, rt := range r.Routes {
			if rt.Match == "" {
				t.Fatal("accepted a route without match")
			}
			checkLimits(rt.Limits)
			if s := rt.Shape; s != nil && (s.MaxWait <= 0 || s.MaxQueue <= 0) {
				t.Fatalf("accepted shape %+v", s)
			}
			if e := rt.Elastic; e != nil && (!(e.Extra > 0) || e.MaxP99 <= 0 || !(e.MaxErrorRate >= 0) ||
				math.IsInf(e.Extra, 0) || math.IsInf(e.MaxErrorRate, 0)) {
				t.Fatalf("accepted elastic %+v", e)
			}
		}
		for _, h := range r.Headers {
			if h != "legacy" && h != "draft" {
				t.Fatalf("accepted header family %q", h)
			}
		}
		out, err := yaml.Marshal(r)
		if err != nil {
			t.Fatalf("marshal routes: %v", err)
		}
		back, err := ParseProxyRoutes("rewritten.yaml", out)
		if err != nil {
			t.Fatalf("routes written back out refused: %v\n%s", err, out)
		}
		if out2, _ := yaml.Marshal(back); !bytes.Equal(out, out2) {
			t.Fatalf("routes changed on a round trip:\n%s\n%s", out, out2)
		}
	})
}
