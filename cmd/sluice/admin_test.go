package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
	"github.com/sluicelabs/sluice/daemon/adminapi"
	"github.com/sluicelabs/sluice/daemon/daemontest"
	"github.com/sluicelabs/sluice/internal/buildinfo"
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
	n.d = daemontest.Run(t, daemon.Config{Settings: s, Now: func() time.Time { return now }})
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
			if want := []string{"(self)", self, "alive", buildinfo.Get().Version, hash[:8], "-", "PLAINTEXT"}; !slices.Equal(f[1:], want) {
				t.Errorf("self row %q, want %q (no DRIFT)", f, want)
			}
			if !strings.Contains(out, "no rules drift: every alive member (1) runs rules "+hash[:8]) {
				t.Error("no verdict on drift")
			}
			if !strings.Contains(out, "gossip PLAINTEXT: 1 of 1 alive members gossip without a key") {
				t.Error("no warning that gossip runs in the clear")
			}
		}},
		{"members json", []string{"members", "--json"}, exitOK, func(t *testing.T, out string) {
			var v adminapi.MembersView
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
				{"NAME", "RATE", "BURST", "ALGORITHM", "OVERRIDES", "MODE"},
				{"api", "4/1h", "4", "token_bucket", "1", "enforce"},
				{"search", "50/1s", "100", "token_bucket", "0", "shadow"},
				{"partner", "200/1s", "200", "token_bucket", "0", "soft", "10%"},
			} {
				if got := row(out, want[0]); !slices.Equal(got, want) {
					t.Errorf("row %q, want %q", got, want)
				}
			}
		}},
		{"rules json", []string{"rules", "--json"}, exitOK, func(t *testing.T, out string) {
			var v adminapi.RulesView
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
		return &config.ClusterSettings{Bind: "127.0.0.1:0", Join: join, GossipInterval: 10 * time.Millisecond, Insecure: true}
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
	if f := row(out, bName); len(f) != 7 || f[5] != "DRIFT" || f[4] != b.d.Rules().Hash[:8] || f[6] != "PLAINTEXT" {
		t.Errorf("b's row %q, want its hash and DRIFT", f)
	}
	if !strings.Contains(out, "rules DRIFT: 1 of 2 alive members run rules other than this node's") {
		t.Errorf("no drift verdict in\n%s", out)
	}
	code, out, _ = sluice(t, "members", "--json", "--admin", a.admin.URL)
	var v adminapi.MembersView
	mustJSONLine(t, out, &v)
	if code != exitDrift || !v.Drift || len(v.Members) != 2 {
		t.Errorf("--json: exit %d, %+v", code, v)
	}
}

func TestInspect(t *testing.T) {
	n := startNode(t, testRules, nil)
	n.take(t, "api", "alice", 3)
	n.take(t, "api", "a/b c%", 1) // escaped in the path
	n.take(t, "api", "vip", 10)
	node := n.d.MembersView().Self
	tests := []struct {
		name     string
		args     []string
		code     int
		rows     [][]string // output rows that must appear, by first field
		contains string     // in stdout or stderr
	}{
		{"balance after three of four", []string{"api", "alice"}, exitOK, [][]string{
			{"rule", "api"}, {"key", "alice"}, {"balance", "1"}, {"debt", "0"}, {"limit", "4/1h", "token_bucket"}, {"burst", "4"}, {"held", "yes"},
			{"origins", "ORIGIN", "EPOCH", "USED"},
		}, "3\n"},
		{"key needing escapes", []string{"api", "a/b c%"}, exitOK, [][]string{{"balance", "3"}}, "key      a/b c%\n"},
		{"override", []string{"api", "vip"}, exitOK, [][]string{{"balance", "90"}, {"limit", "100/1h", "token_bucket"}, {"burst", "100"}}, ""},
		{"untouched key is full", []string{"api", "nobody"}, exitOK, [][]string{{"balance", "4"}},
			"held     no (the daemon holds no bucket for it: it is full)\norigins  none counted"},
		{"unknown rule", []string{"nope", "k"}, exitError, nil, `sluice inspect: the daemon has no rule "nope" (sluice rules lists those in force)`},
		{"missing key", []string{"api"}, exitError, nil, "want RULE KEY, got 1 argument(s)"},
		{"flag after arguments", []string{"api", "k", "--json"}, exitError, nil, `flags go before the arguments ("--json" came after)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := sluice(t, append([]string{"inspect", "--admin", n.admin.URL}, tt.args...)...)
			if code != tt.code || !strings.Contains(out+errOut, tt.contains) {
				t.Fatalf("exit %d, stdout %q stderr %q; want exit %d containing %q", code, out, errOut, tt.code, tt.contains)
			}
			for _, want := range tt.rows {
				if got := row(out, want[0]); !slices.Equal(got, want) {
					t.Errorf("row %q, want %q in\n%s", got, want, out)
				}
			}
		})
	}
	t.Run("origin counters", func(t *testing.T) {
		_, out, _ := sluice(t, "inspect", "--admin", n.admin.URL, "api", "alice")
		if !strings.Contains(out, node+" ") || !strings.HasSuffix(out, " 3\n") {
			t.Errorf("want this node's row with 3 used:\n%s", out)
		}
	})
	t.Run("json", func(t *testing.T) {
		code, out, _ := sluice(t, "inspect", "--json", "--admin", n.admin.URL, "api", "alice")
		var v adminapi.KeyView
		mustJSONLine(t, out, &v)
		if code != exitOK || v.Rule != "api" || v.Key != "alice" || v.Balance != 1 || v.Burst != 4 || v.Limit != 4 || !v.Held ||
			len(v.Origins) != 1 || v.Origins[0].Origin != node || v.Origins[0].Used != 3 {
			t.Errorf("exit %d, %+v", code, v)
		}
	})
}

func TestReload(t *testing.T) {
	n := startNode(t, testRules, nil)
	first := n.d.Rules().Hash
	steps := []struct {
		name     string
		rules    string // written before the command
		args     []string
		code     int
		contains string // in stdout or stderr
		apiRate  string // what sluice rules then shows for api
	}{
		{"unchanged file", testRules, []string{"reload"}, exitOK, "rules reloaded from " + n.rules + ": hash " + first, "4/1h"},
		{"new limit", strings.Replace(testRules, "4/1h", "10/1h", 1), []string{"reload"}, exitOK, "rules reloaded from " + n.rules + ": hash ", "10/1h"},
		{"broken file keeps the rules", testRules + "    brust: 3\n", []string{"reload"}, exitRefused,
			n.rules + ":15:12: rules.partner.brust: unknown field", "10/1h"},
		{"broken file, json", "rules:\n  api:\n    rate: often\n", []string{"reload", "--json"}, exitRefused,
			n.rules + ":3:11: rules.api.rate", "10/1h"},
		{"fixed again", strings.Replace(testRules, "4/1h", "6/1h", 1), []string{"reload", "--json"}, exitOK, `"ok":true`, "6/1h"},
	}
	prev := first
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			n.write(t, st.rules)
			code, out, errOut := sluice(t, append([]string{st.args[0], "--admin", n.admin.URL}, st.args[1:]...)...)
			if code != st.code || !strings.Contains(out+errOut, st.contains) {
				t.Fatalf("exit %d, stdout %q stderr %q; want exit %d containing %q", code, out, errOut, st.code, st.contains)
			}
			hash := n.d.Rules().Hash
			switch {
			case st.code == exitRefused && hash != prev:
				t.Errorf("refused reload changed the rules hash %s → %s", prev, hash)
			case st.code == exitOK && !strings.Contains(out, hash):
				t.Errorf("output does not name the new hash %s", hash)
			}
			if st.code == exitRefused && !strings.Contains(out, `"ok":false`) && !strings.Contains(errOut, "the daemon refused the new rules and keeps those in force (hash "+prev+")") {
				t.Errorf("refusal does not say the rules in force stay: %s%s", out, errOut)
			}
			prev = hash
			_, rulesOut, _ := sluice(t, "rules", "--admin", n.admin.URL)
			if got := row(rulesOut, "api"); len(got) < 2 || got[1] != st.apiRate {
				t.Errorf("api row %q after reload, want rate %s", got, st.apiRate)
			}
		})
	}
	if prev == first {
		t.Error("no reload changed the rules hash")
	}
}

func TestWatch(t *testing.T) {
	n := startNode(t, testRules, nil)
	n.take(t, "api", "alice", 3)
	admin := []string{"--admin", n.admin.URL}
	t.Run("three polls", func(t *testing.T) {
		code, out, errOut := sluice(t, append(append([]string{"watch"}, admin...), "--count", "3", "--interval", "10ms", "api", "alice")...)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if code != exitOK || len(lines) != 3 || errOut != "" {
			t.Fatalf("exit %d, %d lines: %q, stderr %q", code, len(lines), out, errOut)
		}
		for _, l := range lines {
			f := strings.Fields(l)
			if _, err := time.Parse(watchTime, f[0]); err != nil || !slices.Equal(f[1:], []string{"balance", "1", "debt", "0", "[#####...............]", "of", "4"}) {
				t.Errorf("line %q", l)
			}
		}
	})
	t.Run("json lines", func(t *testing.T) {
		code, out, _ := sluice(t, append(append([]string{"watch"}, admin...), "--json", "--count", "2", "--interval", "10ms", "api", "alice")...)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if code != exitOK || len(lines) != 2 {
			t.Fatalf("exit %d, %q", code, out)
		}
		for _, l := range lines {
			var v watchLine
			if err := json.Unmarshal([]byte(l), &v); err != nil || v.Time.IsZero() || v.Rule != "api" || v.Key != "alice" || v.Balance != 1 || v.Burst != 4 {
				t.Errorf("line %q: %+v, %v", l, v, err)
			}
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		// Forever, until the context ends: here after the second line, as
		// Ctrl-C would through main's signal.NotifyContext.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out := &onLine{after: 2, do: cancel}
		var errOut bytes.Buffer
		code := runContext(ctx, append(append([]string{"sluice", "watch"}, admin...), "--interval", "1ms", "api", "alice"), out, &errOut)
		if code != exitOK || out.lines != 2 || errOut.Len() != 0 {
			t.Fatalf("exit %d after %d lines, stderr %q", code, out.lines, errOut.String())
		}
	})
	for _, tt := range []struct {
		name, contains string
		args           []string
	}{
		{"unknown rule", `sluice watch: the daemon has no rule "nope"`, []string{"--count", "3", "nope", "k"}},
		{"zero interval", "sluice watch: --interval 0s must be positive", []string{"--interval", "0", "api", "k"}},
		{"negative count", "sluice watch: --count -1 must be 0 (forever) or more", []string{"--count", "-1", "api", "k"}},
		{"missing key", "sluice watch: want RULE KEY", []string{"api"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := sluice(t, append(append([]string{"watch"}, admin...), tt.args...)...)
			if code != exitError || out != "" || !strings.Contains(errOut, tt.contains) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, tt.contains)
			}
		})
	}
	t.Run("rule removed while watching", func(t *testing.T) { // last: it changes the rules
		// After the first line the rule disappears: later polls report the
		// error and go on, and the last failed poll makes the exit 2.
		out := &onLine{after: 1, do: func() {
			n.write(t, "rules:\n  other:\n    rate: 1/1s\n")
			if err := n.d.Reload(); err != nil {
				t.Error(err)
			}
		}}
		var errOut bytes.Buffer
		code := run(append(append([]string{"sluice", "watch"}, admin...), "--count", "3", "--interval", "1ms", "api", "alice"), out, &errOut)
		if code != exitError || out.lines != 1 || strings.Count(errOut.String(), `sluice watch: `) != 2 || !strings.Contains(errOut.String(), `the daemon has no rule "api"`) {
			t.Fatalf("exit %d after %d lines, stderr %q", code, out.lines, errOut.String())
		}
	})
}

// onLine counts the lines written to it and calls do once the count reaches after.
type onLine struct {
	after, lines int
	do           func()
}

func (o *onLine) Write(p []byte) (int, error) {
	for range bytes.Count(p, []byte("\n")) {
		if o.lines++; o.lines == o.after {
			o.do()
		}
	}
	return len(p), nil
}

func TestAdminErrors(t *testing.T) {
	// A port nothing listens on: connections are refused at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	// A server that never answers, and one that is not sluiced.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(hang.Close)
	other := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(other.Close)
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>hello</html>")) }))
	t.Cleanup(html.Close)

	commands := [][]string{{"members"}, {"rules"}, {"inspect", "api", "k"}, {"reload"}, {"watch", "--count", "2", "api", "k"}}
	tests := []struct {
		name     string
		admin    string
		contains string
	}{
		{"refused", closed, "cannot reach the daemon's admin endpoint http://" + closed + " (is sluiced running with --admin-addr there?): dial tcp " + closed},
		{"no answer", hang.URL, "cannot reach the daemon's admin endpoint " + hang.URL + ": no answer within 50ms (--timeout)"},
		{"not found", other.URL, " answered 404: 404 page not found"},
		{"not JSON", html.URL, " did not answer as a sluiced admin endpoint does (invalid character '<' looking for beginning of value); is --admin right?"},
		{"bad scheme", "ftp://127.0.0.1:1", `--admin "ftp://127.0.0.1:1": want http://HOST:PORT or HOST:PORT`},
		{"empty", " ", "--admin is empty"},
	}
	for _, tt := range tests {
		for _, cmd := range commands {
			t.Run(tt.name+"/"+cmd[0], func(t *testing.T) {
				start := time.Now()
				// 50 ms for the server that never answers; the others are
				// given time to answer on a loaded machine.
				timeout := "10s"
				if tt.admin == hang.URL {
					timeout = "50ms"
				}
				code, out, errOut := sluice(t, append([]string{cmd[0], "--admin", tt.admin, "--timeout", timeout}, cmd[1:]...)...)
				if code != exitError || out != "" || !strings.HasPrefix(errOut, "sluice "+cmd[0]+": ") || !strings.Contains(errOut, tt.contains) {
					t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, tt.contains)
				}
				if took := time.Since(start); took > 5*time.Second {
					t.Errorf("took %s", took)
				}
			})
		}
	}
}

func TestAdminAddressWithoutSchemeFromEnv(t *testing.T) {
	n := startNode(t, testRules, nil)
	t.Setenv("SLUICE_ADMIN", n.admin.Listener.Addr().String())
	if code, out, errOut := sluice(t, "members"); code != exitOK || !strings.Contains(out, "no rules drift") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestNewAdminClient(t *testing.T) {
	tests := []struct {
		addr, base, err string
	}{
		{"127.0.0.1:9464", "http://127.0.0.1:9464", ""},
		{"http://127.0.0.1:9464/", "http://127.0.0.1:9464", ""},
		{"https://admin.example/sluice/", "https://admin.example/sluice", ""},
		{"[::1]:9464", "http://[::1]:9464", ""},
		{"localhost", "http://localhost", ""},
		{"", "", "--admin is empty"},
		{"unix:///run/x", "", "want http://HOST:PORT or HOST:PORT"},
		{"http://", "", "want http://HOST:PORT or HOST:PORT"},
		{"http://a b:1", "", "invalid character"},
	}
	for _, tt := range tests {
		a, err := newAdminClient(tt.addr, time.Second)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: error %v, want %q", tt.addr, err, tt.err)
		case tt.err == "" && (err != nil || a.base != tt.base):
			t.Errorf("%q: %+v, %v; want base %q", tt.addr, a, err, tt.base)
		}
	}
	if _, err := newAdminClient("127.0.0.1:1", 0); err == nil {
		t.Error("zero timeout accepted")
	}
}

func TestFormatting(t *testing.T) {
	for in, want := range map[string]string{"1h0m0s": "1h", "24h0m0s": "1d", "48h0m0s": "2d", "36h0m0s": "36h", "1m0s": "1m",
		"1m30s": "90s", "1s": "1s", "500ms": "500ms", "1.5ms": "1.5ms", "weird": "weird"} {
		if got := shortPeriod(in); got != want {
			t.Errorf("shortPeriod(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[float64]string{1: "1", 0.999999: "1", 2.5: "2.5", -8: "-8", -0.001: "0", 1.234: "1.23"} {
		if got := num(in); got != want {
			t.Errorf("num(%v) = %q, want %q", in, got, want)
		}
	}
	for _, tt := range []struct {
		balance float64
		burst   int64
		want    string
	}{
		{4, 4, "[####################]"}, {1, 4, "[#####...............]"}, {0, 4, "[....................]"},
		{-8, 4, "[....................]"}, {0.1, 100, "[....................]"}, {1, 0, "[....................]"},
	} {
		if got := bar(tt.balance, tt.burst); got != tt.want {
			t.Errorf("bar(%v, %d) = %q, want %q", tt.balance, tt.burst, got, tt.want)
		}
	}
}
