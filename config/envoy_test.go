package config

import (
	"errors"
	"strings"
	"testing"
)

const envoyExample = `domain: web
descriptors:
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: path
    rate_limit: {unit: Second, requests_per_unit: 5}
  - key: user
    descriptors:
      - key: plan
        value: free
        shadow_mode: true
        rate_limit: {unit: day, requests_per_unit: 1, name: free}
      - key: plan
        value: vip
        rate_limit: {unlimited: true, replaces: [{name: free}]}
      - key: plan
        descriptors:
          - key: region
            rate_limit: {unit: week, requests_per_unit: 0}
`

func TestEnvoyLookupFollowsRatelimitMatching(t *testing.T) {
	e, err := ParseEnvoy("web.yaml", EnvoyFile{Name: "web.yaml", Data: []byte(envoyExample)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		domain  string
		entries []EnvoyEntry
		want    string // "rpu/unit", "unlimited", "" for none
		shadow  bool
	}{
		{"value before key-only", "web", []EnvoyEntry{{"path", "/login"}}, "2/hour", false},
		{"prefix before key-only", "web", []EnvoyEntry{{"path", "/api/v1"}}, "4/minute", false},
		{"key-only wildcard", "web", []EnvoyEntry{{"path", "/other"}}, "5/second", false},
		{"unknown domain", "mobile", []EnvoyEntry{{"path", "/login"}}, "", false},
		{"unknown key", "web", []EnvoyEntry{{"method", "GET"}}, "", false},
		{"nested value", "web", []EnvoyEntry{{"user", "a"}, {"plan", "free"}}, "1/day", true},
		{"nested unlimited", "web", []EnvoyEntry{{"user", "a"}, {"plan", "vip"}}, "unlimited", false},
		{"intermediate level has no limit", "web", []EnvoyEntry{{"user", "a"}}, "", false},
		{"deeper than the config", "web", []EnvoyEntry{{"path", "/login"}, {"x", "y"}}, "", false},
		{"three levels, zero per unit", "web", []EnvoyEntry{{"user", "a"}, {"plan", "gold"}, {"region", "eu"}}, "0/week", false},
		{"stops at a level without children", "web", []EnvoyEntry{{"user", "a"}, {"plan", "gold"}}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := e.Lookup(tt.domain, tt.entries)
			got := ""
			switch {
			case lim == nil:
			case lim.Unlimited:
				got = "unlimited"
			default:
				got = strings.Join([]string{itoa(lim.RequestsPerUnit), lim.Unit}, "/")
			}
			if got != tt.want {
				t.Fatalf("Lookup = %q, want %q", got, tt.want)
			}
			if lim != nil && lim.Shadow != tt.shadow {
				t.Fatalf("shadow = %v, want %v", lim.Shadow, tt.shadow)
			}
			if lim != nil && !lim.Unlimited && lim.RequestsPerUnit > 0 {
				r := e.Rules[lim.Rule]
				if r == nil || !strings.HasPrefix(lim.Rule, EnvoyRulePrefix) || r.Shadow != tt.shadow {
					t.Fatalf("rule %q: %+v", lim.Rule, r)
				}
			}
		})
	}
	if n := len(e.Rules); n != 4 {
		t.Fatalf("%d rules translated, want 4 (unlimited and zero limits need none)", n)
	}
	if allocs := testing.AllocsPerRun(100, func() { e.Lookup("web", tests[5].entries) }); allocs != 0 {
		t.Fatalf("Lookup allocates %v times", allocs)
	}
}

func itoa(v uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		if v /= 10; v == 0 {
			return string(b[i:])
		}
	}
}

func TestEnvoyBadConfigsNameFileLineAndField(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // every one must appear
	}{
		{"no domain", "descriptors: []\n", []string{"x.yaml:1:1: domain: missing"}},
		{"unknown top field", "domain: a\nlimits: 1\n", []string{"x.yaml:2:9: limits: unknown field"}},
		{"missing key", "domain: a\ndescriptors:\n  - value: b\n", []string{"x.yaml:3:5: descriptors[0].key: must be a non-empty string"}},
		{"bad unit and rpu, both reported", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - key: j\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			[]string{"x.yaml:4:24: descriptors[0].rate_limit.unit: unknown or unsupported unit \"fortnight\"", "x.yaml:6:51: descriptors[1].rate_limit.requests_per_unit: must be a whole number"}},
		{"month refused", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 1}\n", []string{"unsupported unit \"month\""}},
		{"duplicate descriptor", "domain: a\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", []string{"x.yaml:6:12: descriptors[1]: descriptor k=v is defined twice"}},
		{"inner star", "domain: a\ndescriptors:\n  - key: k\n    value: a*b\n", []string{"only a trailing *"}},
		{"unlimited with unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", []string{"must not be set when unlimited is true"}},
		{"quota mode refused", "domain: a\ndescriptors:\n  - key: k\n    quota_mode: true\n", []string{"x.yaml:4:17: descriptors[0].quota_mode: not supported by sluice"}},
		{"unknown rate_limit field", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n", []string{"rate_limit.burst: unknown field"}},
		{"syntax", "domain: [a\n", []string{"x.yaml:", "yaml syntax"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseEnvoy("x.yaml", EnvoyFile{Name: "x.yaml", Data: []byte(tt.yaml)})
			if err == nil {
				t.Fatal("accepted")
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("not a FieldError: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestEnvoyDuplicateDomainAcrossFilesAndMerge(t *testing.T) {
	a := EnvoyFile{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	b := EnvoyFile{Name: "b.yaml", Data: []byte("domain: d\n")}
	if _, err := ParseEnvoy("dir", a, b); err == nil || !strings.Contains(err.Error(), "b.yaml:1:9: domain: domain \"d\" is defined by another file too") {
		t.Fatalf("duplicate domain: %v", err)
	}
	e, err := ParseEnvoy("dir", a)
	if err != nil {
		t.Fatal(err)
	}
	base := DefaultRules()
	merged := base.WithEnvoy(e)
	if merged.Envoy != e || len(merged.ByName) != len(base.ByName)+1 || merged.Hash == base.Hash || base.Envoy != nil {
		t.Fatalf("merge: %d rules, hash %s (base %s)", len(merged.ByName), merged.Hash, base.Hash)
	}
	if base.WithEnvoy(nil) != base {
		t.Fatal("WithEnvoy(nil) is not a no-op")
	}
}
