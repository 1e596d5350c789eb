package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseRulesAcceptsFullFile(t *testing.T) {
	src := `
unknown_rule: deny
rules:
  api-per-user:
    rate: 100/1s
    burst: 150
    overrides:
      premium:
        rate: 1000/1s
        burst: 2000
      bursty:
        burst: 500
  daily:
    rate: 5000/1d
`
	r, err := ParseRules("rules.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if r.UnknownRule != UnknownRuleDeny {
		t.Errorf("unknown_rule = %v, want deny", r.UnknownRule)
	}
	api := r.ByName["api-per-user"]
	if api == nil || api.Limits[0].Count() != 100 || api.Limits[0].Period() != time.Second || api.Limits[0].Burst() != 150 {
		t.Fatalf("api-per-user = %+v", api)
	}
	if l := api.LimitFor([]byte("premium")); l.Count() != 1000 || l.Burst() != 2000 {
		t.Errorf("premium override = %s", l)
	}
	if l := api.LimitFor([]byte("bursty")); l.Count() != 100 || l.Burst() != 500 {
		t.Errorf("burst-only override = %s, want the rule's rate with burst 500", l)
	}
	if l := api.LimitFor([]byte("someone")); l != api.Limits[0] {
		t.Errorf("key without override got %s", l)
	}
	if d := r.ByName["daily"].Limits[0]; d.Period() != 24*time.Hour || d.Burst() != 5000 {
		t.Errorf("daily = %s, want 5000/24h burst 5000 (burst defaults to count)", d)
	}
	if got := r.Names(); strings.Join(got, ",") != "api-per-user,daily" {
		t.Errorf("Names() = %v", got)
	}
}

func TestParseRulesErrorsNameFileLineAndField(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // each must appear in the error
	}{
		{"unknown top-level field", "rulez: {}\n", []string{"bad.yaml:1:8: rulez: unknown field"}},
		{"unknown rule field", "rules:\n  a:\n    rate: 1/s\n    brust: 3\n", []string{"bad.yaml:4:12: rules.a.brust: unknown field"}},
		{"missing rate", "rules:\n  a:\n    burst: 3\n", []string{"bad.yaml:3:5: rules.a.rate: missing"}},
		{"rate without period", "rules:\n  a:\n    rate: 100\n", []string{"bad.yaml:3:11: rules.a.rate:", "COUNT/PERIOD"}},
		{"zero count", "rules:\n  a:\n    rate: 0/1s\n", []string{"rules.a.rate:", "positive whole number"}},
		{"bad period", "rules:\n  a:\n    rate: 5/fortnight\n", []string{"rules.a.rate:", "period"}},
		{"negative burst", "rules:\n  a:\n    rate: 5/1s\n    burst: -3\n", []string{"bad.yaml:4:12: rules.a.burst: must be a positive whole number"}},
		{"fractional burst", "rules:\n  a:\n    rate: 5/1s\n    burst: 2.5\n", []string{"rules.a.burst"}},
		{"bad unknown_rule", "unknown_rule: maybe\nrules: {}\n", []string{"bad.yaml:1:15: unknown_rule: must be allow or deny"}},
		{"bad rule name", "rules:\n  'has space':\n    rate: 1/s\n", []string{"bad.yaml:2:3: rules.has space: rule name"}},
		{"duplicate rule", "rules:\n  a:\n    rate: 1/s\n  a:\n    rate: 2/s\n", []string{"bad.yaml:4:3: rules.a: defined more than once"}},
		{"rules not a mapping", "rules:\n  - a\n", []string{"bad.yaml:2:3: rules: expected a mapping, got a list"}},
		{"override unknown field", "rules:\n  a:\n    rate: 1/s\n    overrides:\n      k:\n        rat: 2/s\n", []string{"bad.yaml:6:14: rules.a.overrides.k.rat: unknown field"}},
		{"override bad rate", "rules:\n  a:\n    rate: 1/s\n    overrides:\n      k:\n        rate: x/s\n", []string{"bad.yaml:6:15: rules.a.overrides.k.rate"}},
		{"syntax error", "rules:\n  a: [\n", []string{"bad.yaml:2:1: yaml syntax:"}},
		{"empty file", "", []string{"bad.yaml:1:1: file is empty"}},
		{"two problems, both reported", "rules:\n  a:\n    rate: 0/s\n  b:\n    rate: 1/s\n    burst: 0\n", []string{"rules.a.rate", "rules.b.burst"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRules("bad.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("ParseRules accepted %q: %+v", tt.src, r)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.File != "bad.yaml" || fe.Line < 1 {
				t.Errorf("error does not wrap a *FieldError with file and line: %#v", err)
			}
		})
	}
}

func TestParseRate(t *testing.T) {
	tests := []struct {
		in     string
		count  int64
		period time.Duration
		ok     bool
	}{
		{"100/1s", 100, time.Second, true},
		{"5000/1h", 5000, time.Hour, true},
		{"10/m", 10, time.Minute, true},
		{"3/500ms", 3, 500 * time.Millisecond, true},
		{"1/day", 1, 24 * time.Hour, true},
		{"7/2d", 7, 48 * time.Hour, true},
		{" 4 / 1s ", 4, time.Second, true},
		{"100", 0, 0, false},
		{"-1/s", 0, 0, false},
		{"1/-1s", 0, 0, false},
		{"1/0s", 0, 0, false},
		{"a/s", 0, 0, false},
		{"1/", 0, 0, false},
		{"1/106751d", 1, 106751 * 24 * time.Hour, true},
		// Found by FuzzParseRate: days beyond a Duration's range wrapped
		// around, to a negative period or to a short one (213504 days
		// became 25 minutes).
		{"1/106752d", 0, 0, false},
		{"1/213504d", 0, 0, false},
	}
	for _, tt := range tests {
		c, p, err := ParseRate(tt.in)
		if (err == nil) != tt.ok || c != tt.count || p != tt.period {
			t.Errorf("ParseRate(%q) = %d, %s, %v; want %d, %s, ok=%v", tt.in, c, p, err, tt.count, tt.period, tt.ok)
		}
	}
}

func TestDefaultRulesParseAndHashIgnoresFormatting(t *testing.T) {
	d := DefaultRules()
	if len(d.ByName) == 0 || d.Source != DefaultRulesSource {
		t.Fatalf("default rules = %+v", d)
	}
	a, err := ParseRules("a", []byte("rules:\n  x: {rate: 1/s, burst: 2}\n  y: {rate: 3/1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseRules("b", []byte("# same rules, other layout\nrules:\n  y:\n    rate: 3/60s\n  x:\n    burst: 2\n    rate: 1/1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseRules("c", []byte("rules:\n  x: {rate: 1/s, burst: 3}\n  y: {rate: 3/1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash != b.Hash {
		t.Errorf("same rules hash differently: %s vs %s", a.Hash, b.Hash)
	}
	if a.Hash == c.Hash {
		t.Errorf("different bursts hash the same")
	}
}

func TestLoadRulesWrapsPath(t *testing.T) {
	_, err := LoadRules(filepath.Join(t.TempDir(), "missing.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("LoadRules(missing) = %v", err)
	}
}

func TestSettingsDefaultsValidate(t *testing.T) {
	if err := DefaultSettings().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := DefaultSettings()
	bad.MaxBatch = 0
	if bad.Validate() == nil {
		t.Fatal("max batch 0 accepted")
	}
}

func TestShadowAndSoftFields(t *testing.T) {
	r, err := ParseRules("r.yaml", []byte("rules:\n  a:\n    rate: 1/s\n    shadow: true\n    soft_percent: 25\n"))
	if err != nil || !r.ByName["a"].Shadow || r.ByName["a"].SoftPercent != 25 {
		t.Fatalf("%+v %v", r, err)
	}
	for _, src := range []string{"rules:\n  a:\n    rate: 1/s\n    shadow: maybe\n", "rules:\n  a:\n    rate: 1/s\n    soft_percent: -5\n", "rules:\n  a:\n    rate: 1/s\n    soft_percent: NaN\n"} {
		if _, err := ParseRules("r.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "r.yaml:4:") {
			t.Errorf("%q: %v", src, err)
		}
	}
}
