package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/config"
)

// The Envoy configuration reloads beside the rules: a change is put in
// force, an unchanged one is not re-applied, a bad one keeps the last good,
// and a bad rules file's error is not hidden by a good Envoy change.
func TestEnvoyConfigReloadsBesideTheRules(t *testing.T) {
	dir := t.TempDir()
	s := config.DefaultSettings()
	s.SocketPath = filepath.Join(dir, "d.sock")
	s.RulesPath, s.EnvoyConfig = filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "rl.yaml")
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	envoy := func(rpu string) string {
		return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + rpu + "}\n"
	}
	write(s.RulesPath, "rules:\n  r:\n    rate: 5/1s\n")
	write(s.EnvoyConfig, envoy("3"))
	d, err := New(Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	limitOf := func() uint32 {
		lim := d.Rules().Envoy.Lookup("d", []config.EnvoyEntry{{Key: "k", Value: "v"}})
		if lim == nil {
			return 0
		}
		if _, ok := d.Rules().ByName[lim.Rule]; !ok || d.Rules().ByName["r"] == nil {
			t.Fatalf("rules in force lack %s or r: %v", lim.Rule, d.Rules().Names())
		}
		return lim.RequestsPerUnit
	}
	if got := limitOf(); got != 3 {
		t.Fatalf("at start: %d", got)
	}
	hash := d.Rules().Hash

	write(s.EnvoyConfig, envoy("4"))
	if err := d.Reload(); err != nil || limitOf() != 4 || d.Rules().Hash == hash {
		t.Fatalf("changed config: err %v, limit %d, hash %s (was %s)", err, limitOf(), d.Rules().Hash, hash)
	}
	okBefore, _ := d.ReloadCounts()
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := d.ReloadCounts(); ok != okBefore+1 { // the rules file's reload only
		t.Fatalf("an unchanged envoy config was re-applied: %d reloads, want %d", ok, okBefore+1)
	}

	write(s.EnvoyConfig, envoy("four"))
	if err := d.Reload(); err == nil || !strings.Contains(err.Error(), "rl.yaml:4:51") || limitOf() != 4 {
		t.Fatalf("bad config: err %v, limit %d", err, limitOf())
	}

	write(s.RulesPath, "rules:\n  r:\n    rate: nope\n")
	write(s.EnvoyConfig, envoy("6"))
	if err := d.Reload(); err == nil || limitOf() != 6 {
		t.Fatalf("bad rules, good envoy: err %v, limit %d", err, limitOf())
	}
	if e := d.lastReloadError.Load(); e == nil || !strings.Contains(*e, "rules.yaml") {
		t.Fatalf("the rules file's error is hidden: %v", e)
	}
}
