package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
)

// testRules has a rule with an override, a shadow rule and a soft rule.
const testRules = `unknown_rule: deny
rules:
  api:
    rate: 4/1h
    overrides:
      vip:
        rate: 100/1h
  search:
    rate: 50/1s
    burst: 100
    shadow: true
  partner:
    rate: 200/1s
    soft_percent: 10
`

// node is a running daemon whose admin handler is served by an httptest
// server, with its rules file in a test directory.
type node struct {
	d     *daemon.Daemon
	admin *httptest.Server
	rules string // the rules file's path
}

// startNode runs a daemon on rules, in a one-node cluster unless cluster says
// otherwise. Its clock stands still, so balances are exact, and it does not
// watch its rules file: only `sluice reload` re-reads it.
func startNode(t *testing.T, rules string, cluster *config.ClusterSettings) *node {
	t.Helper()
	n := &node{rules: filepath.Join(t.TempDir(), "rules.yaml")}
	n.write(t, rules)
	sockDir, err := os.MkdirTemp("", "sl") // short: socket paths are limited to ~108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	s := config.DefaultSettings()
	s.SocketPath, s.RulesPath, s.NoWatch = filepath.Join(sockDir, "d.sock"), n.rules, true
	s.Cluster = config.ClusterSettings{Bind: "127.0.0.1:0", GossipInterval: 10 * time.Millisecond}
	if cluster != nil {
		s.Cluster = *cluster
	}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	if n.d, err = daemon.New(daemon.Config{Settings: s, Now: func() time.Time { return now }}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- n.d.Run(ctx) }()
	select {
	case <-n.d.Ready():
	case err := <-ran:
		cancel()
		t.Fatalf("daemon did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("daemon stopped with %v", err)
		}
	})
	n.admin = httptest.NewServer(n.d.AdminHandler())
	t.Cleanup(n.admin.Close)
	return n
}

func (n *node) write(t *testing.T, rules string) {
	t.Helper()
	if err := os.WriteFile(n.rules, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
}

// take makes count admitted decisions for key under rule.
func (n *node) take(t *testing.T, rule, key string, count int) {
	t.Helper()
	for i := range count {
		if d := n.d.Local().Allow(context.Background(), rule, key); !d.Allowed || d.Err != nil {
			t.Fatalf("decision %d on %s/%s: %+v", i, rule, key, d)
		}
	}
}

// sluice runs the CLI; flags go between the command and its arguments.
func sluice(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(append([]string{"sluice"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// row returns the fields of the first output line whose first field is
// first, or nil.
func row(out, first string) []string {
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

func TestMembersAndRules(t *testing.T) {
	n := startNode(t, testRules, nil)
	hash := n.d.Rules().Hash
	self := n.d.Syncer().Addr()
	tests := []struct {
		name  string
		args  []string
		code  int
		check func(t *testing.T, out string)
	}{
		{"members", []string{"members"}, exitOK, func(t *testing.T, out string) {
			f := row(out, n.d.MembersView().Self)
			if want := []string{"(self)", self, "alive", daemon.Version, hash[:8], "-"}; !slices.Equal(f[1:], want) {
				t.Errorf("self row %q, want %q (no DRIFT)", f, want)
			}
			if !strings.Contains(out, "no rules drift: every alive member (1) runs rules "+hash[:8]) {
				t.Error("no verdict on drift")
			}
		}},
		{"members json", []string{"members", "--json"}, exitOK, func(t *testing.T, out string) {
			var v daemon.MembersView
			mustJSONLine(t, out, &v)
			if v.Drift || !v.Clustered || v.RulesHash != hash || len(v.Members) != 1 || !v.Members[0].Self || v.Members[0].Addr != self {
				t.Errorf("%+v", v)
			}
		}},
		{"rules", []string{"rules"}, exitOK, func(t *testing.T, out string) {
			if !strings.Contains(out, "rules from "+n.rules+", hash "+hash[:8]+"; checks naming an unknown rule: deny") {
				t.Error("no header with source, hash and unknown_rule")
			}
			for _, want := range [][]string{
				{"NAME", "RATE", "BURST", "OVERRIDES", "MODE"},
				{"api", "4/1h", "4", "1", "enforce"},
				{"search", "50/1s", "100", "0", "shadow"},
				{"partner", "200/1s", "200", "0", "soft", "10%"},
			} {
				if got := row(out, want[0]); !slices.Equal(got, want) {
					t.Errorf("row %q, want %q", got, want)
				}
			}
		}},
		{"rules json", []string{"rules", "--json"}, exitOK, func(t *testing.T, out string) {
			var v daemon.RulesView
			mustJSONLine(t, out, &v)
			if v.Hash != hash || v.UnknownRule != "deny" || len(v.Rules) != 3 || v.Rules[0].Name != "api" || v.Rules[0].Period != "1h0m0s" {
				t.Errorf("%+v", v)
			}
		}},
		{"members takes no arguments", []string{"members", "x"}, exitError, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{tt.args[0], "--admin", n.admin.URL}, tt.args[1:]...)
			code, out, errOut := sluice(t, args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tt.code, out, errOut)
			}
			if tt.check != nil {
				tt.check(t, out)
				if t.Failed() {
					t.Logf("output:\n%s", out)
				}
			}
		})
	}
}

// mustJSONLine decodes out, which must be exactly one line of JSON.
func mustJSONLine(t *testing.T, out string, v any) {
	t.Helper()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("want one line of JSON, got %q", out)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
}

func TestMembersFlagsRulesDrift(t *testing.T) {
	fast := func(join ...string) *config.ClusterSettings {
		return &config.ClusterSettings{Bind: "127.0.0.1:0", Join: join, GossipInterval: 10 * time.Millisecond}
	}
	a := startNode(t, testRules, fast())
	b := startNode(t, "rules:\n  api:\n    rate: 5/1h\n", fast(a.d.Syncer().Addr()))
	deadline := time.Now().Add(15 * time.Second)
	for !a.d.MembersView().Drift {
		if time.Now().After(deadline) {
			t.Fatalf("a never saw b's rules: %+v", a.d.MembersView())
		}
		<-time.After(5 * time.Millisecond)
	}
	code, out, errOut := sluice(t, "members", "--admin", a.admin.URL)
	if code != exitDrift {
		t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, exitDrift, out, errOut)
	}
	bName := b.d.MembersView().Self
	if f := row(out, bName); len(f) != 6 || f[5] != "DRIFT" || f[4] != b.d.Rules().Hash[:8] {
		t.Errorf("b's row %q, want its hash and DRIFT", f)
	}
	if !strings.Contains(out, "rules DRIFT: 1 of 2 alive members run rules other than this node's") {
		t.Errorf("no drift verdict in\n%s", out)
	}
	code, out, _ = sluice(t, "members", "--json", "--admin", a.admin.URL)
	var v daemon.MembersView
	mustJSONLine(t, out, &v)
	if code != exitDrift || !v.Drift || len(v.Members) != 2 {
		t.Errorf("--json: exit %d, %+v", code, v)
	}
}
