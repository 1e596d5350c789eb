package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestLint(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goodRules := write("good.yaml", "rules:\n  api: {rate: 10/s, burst: 5}\n  uploads: {rate: 1/s, burst: 20}\n")
	badRules := write("bad.yaml", "unknown_rule: maybe\nrules:\n  api: {rate: ten, burst: -1}\n")
	goodRoutes := write("routes.yaml", "default: [{rule: api}]\nroutes:\n  - match: POST /upload\n    limits: [{rule: uploads, cost: 10}]\n")
	badRoutes := write("badroutes.yaml", "default: [{rule: api, cost: 6}]\nroutes:\n  - match: /\n    limits: [{rule: nope, per_route: yes please}]\n  - limits: []\n")
	tests := []struct {
		name     string
		args     []string
		code     int
		out      string   // stdout (whole)
		problems []string // stderr lines, each a prefix
	}{
		{"valid rules", []string{goodRules}, exitOK, goodRules + ": 2 rules, valid (hash ", nil},
		{"valid rules and routes", []string{goodRules, goodRoutes}, exitOK, "; " + goodRoutes + ": 1 routes, valid against them\n", nil},
		{"every problem in the rules", []string{badRules}, exitRefused, "", []string{
			badRules + ":1:15: unknown_rule: must be allow or deny",
			badRules + ":3:15: rules.api.rate:",
		}},
		{"routes: every problem, parse and against the rules", []string{goodRules, badRoutes}, exitRefused, "", []string{
			badRoutes + ":4:38: routes[0].limits[0].per_route: expected true or false, got \"yes please\"",
			badRoutes + ":5:5: routes[1].match: missing",
		}},
		{"routes against the rules once they parse", []string{goodRules, write("r2.yaml", "default: [{rule: api, cost: 6}, {rule: nope}]\n")}, exitRefused, "", []string{
			filepath.Join(dir, "r2.yaml") + ":1:29: default[0].cost: cost 6 exceeds the burst 5 of rule \"api\"",
			filepath.Join(dir, "r2.yaml") + ":1:40: default[1].rule: rule \"nope\" is not defined",
		}},
		{"a file that cannot be read", []string{filepath.Join(dir, "missing.yaml")}, exitError, "", []string{"sluice lint: load rules: open "}},
		{"no arguments", nil, exitError, "", []string{"sluice lint: want RULES [ROUTES]"}},
		{"too many arguments", []string{goodRules, goodRoutes, goodRoutes}, exitError, "", []string{"sluice lint: want RULES [ROUTES]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"sluice", "lint"}, tt.args...), &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.out) || (tt.out == "" && stdout.Len() > 0) {
				t.Errorf("stdout %q, want it to hold %q", stdout.String(), tt.out)
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if len(tt.problems) == 0 && stderr.Len() > 0 {
				t.Errorf("stderr %q, want none", stderr.String())
			}
			if len(tt.problems) > 0 && len(lines) < len(tt.problems) {
				t.Fatalf("stderr has %d lines, want at least %d:\n%s", len(lines), len(tt.problems), stderr.String())
			}
			for _, want := range tt.problems {
				found := false
				for _, l := range lines {
					found = found || strings.HasPrefix(l, want)
				}
				if !found {
					t.Errorf("no problem line starting %q in:\n%s", want, stderr.String())
				}
			}
		})
	}
}

// The rules in the Kubernetes example's ConfigMap pass `sluice lint`.
func TestLintKubernetesExampleRules(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "configmap-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil || cm.Data["rules.yaml"] == "" {
		t.Fatalf("configmap-rules.yaml: %v, data %v", err, cm.Data)
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(cm.Data["rules.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"sluice", "lint", rules}, &stdout, &stderr); code != exitOK {
		t.Fatalf("lint: exit %d\n%s", code, stderr.String())
	}
}
