package ruledoc

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "pay", "pay-api", "a1", strings.Repeat("a", rulesapi.MaxNameLen)} {
		if err := CheckName("team", ok); err != nil {
			t.Errorf("CheckName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a.b", "a_b", "a b", strings.Repeat("a", rulesapi.MaxNameLen+1), "é"} {
		if err := CheckName("team", bad); err == nil {
			t.Errorf("CheckName(%q) accepted", bad)
		}
	}
}

func TestParseSpecNamesRuleFieldAndLine(t *testing.T) {
	tests := []struct {
		spec           string
		field, msgPart string
		line           int
	}{
		{"rate: 100/1s\nburst: -1\n", "burst", "positive whole number", 2},
		{"rate: 100/1s\nburst: x\n", "burst", "positive whole number", 2},
		{"rate: 100/1x\n", "rate", "period", 1},
		{"rate: 1/1s\ncolour: red\n", "colour", "unknown field", 2},
		{"burst: 10\n", "rate", "missing", 1},
		{"limits:\n  - rate: 1/1s\n  - rate: nope\n", "limits[1].rate", "COUNT/PERIOD", 3},
		{"rate: 1/1s\noverrides:\n  alice: {rate: 0/1s}\n", "overrides.alice.rate", "positive", 3},
	}
	for _, tt := range tests {
		_, err := ParseSpec("pay", "api", tt.spec)
		var inv *InvalidError
		if !errors.As(err, &inv) || len(inv.Problems) == 0 {
			t.Errorf("ParseSpec(%q) = %v, want an InvalidError", tt.spec, err)
			continue
		}
		p := inv.Problems[0]
		if p.Rule != "api" || p.Field != tt.field || !strings.Contains(p.Message, tt.msgPart) || p.Line != tt.line {
			t.Errorf("ParseSpec(%q) problem = %+v, want rule api field %q line %d message with %q", tt.spec, p, tt.field, tt.line, tt.msgPart)
		}
	}
	// Columns are the spec's own too.
	_, err := ParseSpec("pay", "api", "rate: 100/1s\nburst: -1\n")
	var inv *InvalidError
	if !errors.As(err, &inv) || inv.Problems[0].Column != 8 {
		t.Errorf("column of burst's value: %+v", err)
	}
	r, err := ParseSpec("pay", "api", "rate: 100/1s\nburst: 200\n")
	if err != nil || r.Limits[0].Burst() != 200 {
		t.Fatalf("valid spec: %v %v", r, err)
	}
	if _, err := ParseSpec("pay", "Bad_Name", "rate: 1/1s"); err == nil {
		t.Error("bad rule name accepted")
	}
}

func TestParseTeamDocument(t *testing.T) {
	doc := "rules:\n  web:\n    rate: 10/1s\n  api: {rate: 100/1s, burst: 200}\n"
	entries, parsed, err := ParseTeamDocument("pay", doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].Name != "api" || entries[1].Name != "web" || len(parsed) != 2 {
		t.Fatalf("entries = %+v", entries)
	}
	// The split specs, composed again, mean the same.
	for _, e := range entries {
		r, err := ParseSpec("pay", e.Name, e.Spec)
		if err != nil || !SameMeaning(r, parsed[e.Name]) {
			t.Errorf("entry %s spec %q: %v", e.Name, e.Spec, err)
		}
	}
	bad := []struct{ doc, rule, field string }{
		{"rules:\n  api:\n    rate: 1/1s\n    burst: x\n", "api", "burst"},
		{"rules:\n  Bad_Name:\n    rate: 1/1s\n", "Bad_Name", ""},
		{"unknown_rule: deny\nrules: {}\n", "", "unknown_rule"},
		{"rules: [1]\n", "", "rules"},
	}
	for _, b := range bad {
		_, _, err := ParseTeamDocument("pay", b.doc)
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Problems[0].Rule != b.rule || inv.Problems[0].Field != b.field {
			t.Errorf("ParseTeamDocument(%q) = %#v", b.doc, err)
		}
	}
}

func TestServedDocumentIsValidAndPrefixed(t *testing.T) {
	doc, parsed, err := ServedDocument([]rulesapi.Rule{
		{Team: "pay", Name: "api", Spec: "rate: 100/1s\n"},
		{Team: "web", Name: "api", Spec: "limits:\n  - rate: 1/1s\n  - rate: 100/1d\n    algorithm: fixed_window\n"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if parsed.ByName["pay.api"] == nil || len(parsed.ByName["web.api"].Limits) != 2 {
		t.Fatalf("served rules = %v\n%s", parsed.Names(), doc)
	}
	if _, err := config.ParseRules("x", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	if doc, _, err := ServedDocument(nil); err != nil || doc != "rules: {}\n" {
		t.Fatalf("empty served = %q, %v", doc, err)
	}
	if _, _, err := ServedDocument([]rulesapi.Rule{{Team: "pay", Name: "api", Spec: "rate: bad\n"}}); err == nil {
		t.Fatal("an invalid served document was returned")
	}
}

func mustRules(t *testing.T, doc string) map[string]*config.Rule {
	t.Helper()
	r, err := config.ParseRules("t", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return r.ByName
}

func TestLoosenings(t *testing.T) {
	base := "rules:\n  api: {rate: 100/1s, burst: 100, overrides: {vip: {rate: 200/1s}}}\n"
	tests := []struct {
		name, after string
		want        []string // "rule/key" of each loosening
	}{
		{"same", base, nil},
		{"tighter", "rules:\n  api: {rate: 10/1s, overrides: {vip: {rate: 20/1s}}}\n", nil},
		{"2x is allowed", "rules:\n  api: {rate: 200/1s, burst: 200, overrides: {vip: {rate: 400/1s}}}\n", nil},
		{"rate 10x", "rules:\n  api: {rate: 1000/1s, burst: 100, overrides: {vip: {rate: 200/1s}}}\n", []string{"api/"}},
		{"burst 5x", "rules:\n  api: {rate: 100/1s, burst: 500, overrides: {vip: {rate: 200/1s}}}\n", []string{"api/"}},
		{"deleted", "rules: {}\n", []string{"api/"}},
		{"shadow", "rules:\n  api: {rate: 100/1s, burst: 100, shadow: true, overrides: {vip: {rate: 200/1s}}}\n", []string{"api/"}},
		{"override dropped to rule", "rules:\n  api: {rate: 100/1s, burst: 100}\n", nil},
		{"override 10x", "rules:\n  api: {rate: 100/1s, burst: 100, overrides: {vip: {rate: 2000/1s}}}\n", []string{"api/vip"}},
		{"new key override 10x", "rules:\n  api: {rate: 100/1s, burst: 100, overrides: {vip: {rate: 200/1s}, bob: {rate: 5000/1s}}}\n", []string{"api/bob"}},
		{"new rule", base + "  web: {rate: 1/1s}\n", nil},
		{"soft percent", "rules:\n  api: {rate: 100/1s, burst: 100, soft_percent: 500, overrides: {vip: {rate: 200/1s}}}\n", []string{"api/", "api/vip"}},
	}
	for _, tt := range tests {
		got := Loosenings(mustRules(t, base), mustRules(t, tt.after), 2)
		var keys []string
		for _, l := range got {
			keys = append(keys, l.Rule+"/"+l.Key)
			if l.Reason == "" {
				t.Errorf("%s: loosening without a reason", tt.name)
			}
		}
		if strings.Join(keys, ",") != strings.Join(tt.want, ",") {
			t.Errorf("%s: loosenings %v, want %v (%+v)", tt.name, keys, tt.want, got)
		}
	}
}

func TestDiff(t *testing.T) {
	if Diff("x", "a\n", "a\n") != "" {
		t.Error("equal texts diffed")
	}
	got := Diff("api", "rate: 1/1s\nburst: 5\n", "rate: 2/1s\nburst: 5\n")
	want := "--- a/api\n+++ b/api\n-rate: 1/1s\n+rate: 2/1s\n burst: 5\n"
	if got != want {
		t.Errorf("Diff = %q, want %q", got, want)
	}
	if got := Diff("api", "", "rate: 1/1s\n"); got != "--- a/api\n+++ b/api\n+rate: 1/1s\n" {
		t.Errorf("Diff from empty = %q", got)
	}
}

// TestSpecCannotReachOutsideItsRule: whatever line breaks a spec holds,
// it defines its own rule's fields only, and the served document holds
// exactly the stored rules (no rule of another team smuggled in).
func TestSpecCannotReachOutsideItsRule(t *testing.T) {
	for _, brk := range []string{"\n", "\r", "\r\n", "\u0085", "\u2028", "\u2029"} {
		for _, spec := range []string{
			"rate: 1/1s" + brk + "  web.api: {rate: 1000000/1s}",
			"rate: 1/1s" + brk + "web.login: {rate: 1000000/1s}",
		} {
			if r, err := ParseSpec("pay", "api", spec); err == nil && r.Limits[0].Count() != 1 {
				t.Errorf("break %q: spec %q parsed as %+v", brk, spec, r)
			}
			doc, parsed, err := ServedDocument([]rulesapi.Rule{{Team: "pay", Name: "api", Spec: spec}})
			if err == nil && (len(parsed.ByName) != 1 || parsed.ByName["web.api"] != nil) {
				t.Errorf("break %q: served document with smuggled rules:\n%s", brk, doc)
			}
		}
	}
}
