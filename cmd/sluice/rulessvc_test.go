package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// These tests hold the `sluice rules SUBCOMMAND` commands to the API's shape
// with a scripted service: what they send (If-Match, confirm, dry_run, the
// document) and how they word and exit on each answer. The end-to-end tests
// in cmd/sluice-rules/internal/e2e run them against the real service.

// fakeService answers "METHOD PATH" with a scripted status and JSON body,
// and records the requests it got.
type fakeService struct {
	mu      sync.Mutex
	answers map[string]fakeAnswer
	got     []fakeRequest
}

type fakeAnswer struct {
	status int
	etag   string
	body   any
}

type fakeRequest struct {
	method, path, query, ifMatch, ifNoneMatch, auth string
	body                                            []byte
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.got = append(f.got, fakeRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("If-Match"), r.Header.Get("If-None-Match"), r.Header.Get("Authorization"), body})
	a, ok := f.answers[r.Method+" "+r.URL.Path]
	f.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(rulesapi.ErrorBody{Error: rulesapi.ErrorDetail{Code: rulesapi.CodeNotFound, Message: "no route " + r.URL.Path}})
		return
	}
	if a.etag != "" {
		w.Header().Set("ETag", a.etag)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	json.NewEncoder(w).Encode(a.body)
}

// request returns the last request to METHOD PATH.
func (f *fakeService) request(t *testing.T, method, path string) fakeRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.got) - 1; i >= 0; i-- {
		if f.got[i].method == method && f.got[i].path == path {
			return f.got[i]
		}
	}
	t.Fatalf("no %s %s was sent; got %v", method, path, f.got)
	return fakeRequest{}
}

func apiError(status int, code, msg string, mod func(*rulesapi.ErrorDetail)) fakeAnswer {
	d := rulesapi.ErrorDetail{Code: code, Message: msg}
	if mod != nil {
		mod(&d)
	}
	return fakeAnswer{status: status, body: rulesapi.ErrorBody{Error: d}}
}

// teamAnswers are what a service holding team payments at version 3 says.
func teamAnswers() map[string]fakeAnswer {
	return map[string]fakeAnswer{
		"GET /v1/whoami": {status: 200, body: rulesapi.WhoAmI{Kind: rulesapi.ActorTeam, Team: "payments", TokenID: "t0k"}},
		"GET /v1/teams/payments/rules": {status: 200, etag: `"v3"`, body: rulesapi.TeamRules{Team: "payments", Version: 3,
			Rules:    []rulesapi.Rule{{Team: "payments", Name: "api", Served: "payments.api", Spec: "rate: 100/1s\n", Version: 3}},
			Document: "rules:\n    api:\n        rate: 100/1s\n"}},
		"PUT /v1/teams/payments/rules": {status: 200, body: rulesapi.ChangeResult{Version: 4, ETag: `"v4"`, Changed: true,
			Changes: []rulesapi.Change{{Rule: "api", Action: rulesapi.ActionUpdate, Before: "rate: 100/1s\n", After: "rate: 50/1s\n",
				Diff: "--- a/api\n+++ b/api\n@@ -1 +1 @@\n-rate: 100/1s\n+rate: 50/1s\n"}}}},
		"GET /v1/teams/payments/history": {status: 200, body: rulesapi.History{Team: "payments", Entries: []rulesapi.HistoryEntry{
			{Version: 3, Actor: "team:payments", TokenID: "t0k", Action: rulesapi.ActionReplace, Document: "rules:\n    api:\n        rate: 100/1s\n"},
			{Version: 1, Actor: "admin", TokenID: "adm", Action: rulesapi.ActionCreate, Rule: "api", Document: "rules:\n    api:\n        rate: 10/1s\n"}}}},
		"POST /v1/teams/payments/rollback": {status: 200, body: rulesapi.ChangeResult{Version: 5, ETag: `"v5"`, Changed: true,
			Changes: []rulesapi.Change{{Rule: "api", Action: rulesapi.ActionUpdate, Diff: "-rate: 100/1s\n+rate: 10/1s\n"}}}},
		"POST /v1/teams":                 {status: 201, body: rulesapi.Team{Name: "payments"}},
		"POST /v1/teams/payments/tokens": {status: 201, body: rulesapi.Token{ID: "t1", Team: "payments", Name: "ci", Secret: "slr_secret"}},
		"GET /v1/audit": {status: 200, body: rulesapi.AuditLog{Entries: []rulesapi.AuditEntry{
			{ID: 2, Actor: "team:payments", TokenID: "t0k", Action: rulesapi.ActionReplace, Team: "payments", Version: 3, Before: "a\n", After: "b\n"}}}},
	}
}

func TestRulesServiceCommands(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "rules:\n  api:\n    rate: 50/1s\n")
	badBurst := write("bad.yaml", "rules:\n  api:\n    rate: 50/1s\n    burst: -1\n")
	badName := write("badname.yaml", "rules:\n  API_v1:\n    rate: 50/1s\n")
	tokenFile := write("token", "slr_fromfile\n")

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		answers map[string]fakeAnswer // replace teamAnswers' answers
		code    int
		out     []string // in stdout
		errOut  []string // in stderr
		check   func(t *testing.T, f *fakeService)
	}{
		{name: "push sends the file with If-Match of the team's rules", args: []string{"push", good}, code: exitOK,
			out: []string{"~ update api", "    -rate: 100/1s", "    +rate: 50/1s", "pushed " + good + " to team payments: version 4"},
			check: func(t *testing.T, f *fakeService) {
				r := f.request(t, "PUT", "/v1/teams/payments/rules")
				var body rulesapi.PutTeamRulesRequest
				json.Unmarshal(r.body, &body)
				if r.ifMatch != `"v3"` || r.query != "" || body.Document != "rules:\n  api:\n    rate: 50/1s\n" || r.auth != "Bearer slr_team" {
					t.Errorf("PUT sent %+v, document %q", r, body.Document)
				}
			}},
		{name: "push --if-version pins the version", args: []string{"push", "--if-version", "v2", "--confirm", good}, code: exitOK,
			check: func(t *testing.T, f *fakeService) {
				if r := f.request(t, "PUT", "/v1/teams/payments/rules"); r.ifMatch != `"v2"` || r.query != "confirm=true" {
					t.Errorf("PUT sent If-Match %q, query %q", r.ifMatch, r.query)
				}
			}},
		{name: "push of an invalid file sends nothing", args: []string{"push", badBurst}, code: exitRefused,
			errOut: []string{badBurst + ":4:12: rules.api.burst:", "1 problem(s); nothing sent"},
			check: func(t *testing.T, f *fakeService) {
				if len(f.got) != 0 {
					t.Errorf("requests sent: %v", f.got)
				}
			}},
		{name: "push of a bad rule name sends nothing", args: []string{"push", badName}, code: exitRefused,
			errOut: []string{"rules.API_v1: a team's rule name must be lower-case"}},
		{name: "push refused by the service's parser", args: []string{"push", good}, code: exitRefused,
			answers: map[string]fakeAnswer{"PUT /v1/teams/payments/rules": apiError(422, rulesapi.CodeInvalidRules, "1 problem", func(d *rulesapi.ErrorDetail) {
				d.Problems = []rulesapi.FieldProblem{{Rule: "api", Field: "rate", Line: 3, Column: 11, Message: "too fast"}}
			})},
			errOut: []string{good + ":3:11: rules.api.rate: too fast"}},
		{name: "push that loosens needs --confirm", args: []string{"push", good}, code: exitRefused,
			answers: map[string]fakeAnswer{"PUT /v1/teams/payments/rules": apiError(409, rulesapi.CodeConfirmRequired, "loosens limits", func(d *rulesapi.ErrorDetail) {
				d.Loosenings = []rulesapi.Loosening{{Rule: "api", Factor: 10, Reason: "rate 100/1s -> 1000/1s is 10x looser (factor 2)"}}
			})},
			errOut: []string{"api: rate 100/1s -> 1000/1s is 10x looser", "run again with --confirm"}},
		{name: "push after a concurrent change is refused", args: []string{"push", good}, code: exitRefused,
			answers: map[string]fakeAnswer{"PUT /v1/teams/payments/rules": apiError(412, rulesapi.CodeStale, "stale", func(d *rulesapi.ErrorDetail) { d.Current = `"v9"` })},
			errOut:  []string{`changed since (now "v9")`}},
		{name: "diff with differences exits 3", args: []string{"diff", good}, code: exitDrift,
			answers: map[string]fakeAnswer{"PUT /v1/teams/payments/rules": {status: 200, body: rulesapi.ChangeResult{Version: 3, ETag: `"v3"`, Changed: true, DryRun: true,
				Changes:    []rulesapi.Change{{Rule: "api", Action: rulesapi.ActionUpdate, Diff: "-rate: 100/1s\n+rate: 50/1s\n"}},
				Loosenings: []rulesapi.Loosening{{Rule: "api", Reason: "looser"}}}}},
			out: []string{"~ update api", "! loosens api: looser", "differs from team payments's rules (version 3) in 1 rule(s)"},
			check: func(t *testing.T, f *fakeService) {
				if r := f.request(t, "PUT", "/v1/teams/payments/rules"); r.query != "dry_run=true" {
					t.Errorf("diff sent query %q", r.query)
				}
			}},
		{name: "diff without differences exits 0", args: []string{"diff", good}, code: exitOK,
			answers: map[string]fakeAnswer{"PUT /v1/teams/payments/rules": {status: 200, body: rulesapi.ChangeResult{Version: 3, ETag: `"v3"`, DryRun: true}}},
			out:     []string{"no difference"}},
		{name: "pull to stdout", args: []string{"pull"}, code: exitOK, out: []string{"rules:\n    api:\n        rate: 100/1s\n"}},
		{name: "history lists versions", args: []string{"history"}, code: exitOK, out: []string{"VERSION", "3 ", "team:payments", "replace", "admin"}},
		{name: "history --show prints a version's file", args: []string{"history", "--show", "1"}, code: exitOK, out: []string{"rate: 10/1s"}},
		{name: "rollback sends If-Match", args: []string{"rollback"}, code: exitOK, out: []string{"rolled back team payments's rules from version 3: version 5"},
			check: func(t *testing.T, f *fakeService) {
				if r := f.request(t, "POST", "/v1/teams/payments/rollback"); r.ifMatch != `"v3"` || string(bytes.TrimSpace(r.body)) != "{}" {
					t.Errorf("rollback sent If-Match %q, body %s", r.ifMatch, r.body)
				}
			}},
		{name: "rollback with nothing to roll back is refused", args: []string{"rollback"}, code: exitRefused,
			answers: map[string]fakeAnswer{"POST /v1/teams/payments/rollback": apiError(404, rulesapi.CodeNotFound, "no earlier version", nil)},
			errOut:  []string{"nothing to roll back"}},
		{name: "audit -v shows before and after", args: []string{"audit", "-v"}, code: exitOK, out: []string{"replace", "payments", "before:", "      a", "after:", "      b"}},
		{name: "teams create prints the token alone on stdout", args: []string{"teams", "create", "--token-name", "ci", "payments"}, code: exitOK,
			out: []string{"slr_secret\n"}, errOut: []string{"shown once"},
			check: func(t *testing.T, f *fakeService) {
				var body rulesapi.CreateTokenRequest
				json.Unmarshal(f.request(t, "POST", "/v1/teams/payments/tokens").body, &body)
				if body.Name != "ci" {
					t.Errorf("token requested with name %q", body.Name)
				}
			}},
		{name: "teams create of an existing team is refused", args: []string{"teams", "create", "payments"}, code: exitRefused,
			answers: map[string]fakeAnswer{"POST /v1/teams": apiError(409, rulesapi.CodeExists, "team payments exists", nil)}, errOut: []string{"exists"}},
		{name: "token from a file", args: []string{"history"}, env: map[string]string{"SLUICE_RULES_TOKEN": "", "SLUICE_RULES_TOKEN_FILE": tokenFile}, code: exitOK,
			check: func(t *testing.T, f *fakeService) {
				if r := f.request(t, "GET", "/v1/teams/payments/history"); r.auth != "Bearer slr_fromfile" {
					t.Errorf("sent Authorization %q", r.auth)
				}
			}},
		{name: "token and token file both set", args: []string{"history"}, env: map[string]string{"SLUICE_RULES_TOKEN_FILE": tokenFile}, code: exitError, errOut: []string{"give one"}},
		{name: "no token", args: []string{"history"}, env: map[string]string{"SLUICE_RULES_TOKEN": ""}, code: exitError, errOut: []string{"no token"}},
		{name: "unknown token", args: []string{"history", "--team", "payments"}, code: exitError,
			answers: map[string]fakeAnswer{"GET /v1/teams/payments/history": apiError(401, rulesapi.CodeUnauthorized, "unknown token", nil)},
			errOut:  []string{"401", "unknown or revoked"}},
		{name: "admin token needs --team", args: []string{"history"}, code: exitError,
			answers: map[string]fakeAnswer{"GET /v1/whoami": {status: 200, body: rulesapi.WhoAmI{Kind: rulesapi.ActorAdmin, TokenID: "adm"}}},
			errOut:  []string{"admin token: name the team with --team"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeService{answers: teamAnswers()}
			for k, v := range tt.answers {
				f.answers[k] = v
			}
			srv := httptest.NewServer(f)
			defer srv.Close()
			t.Setenv("SLUICE_RULES_SERVER", srv.URL)
			t.Setenv("SLUICE_RULES_TOKEN", "slr_team")
			t.Setenv("SLUICE_RULES_TOKEN_FILE", "")
			t.Setenv("SLUICE_RULES_TEAM", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out, errOut bytes.Buffer
			code := run(append([]string{"sluice", "rules"}, tt.args...), &out, &errOut)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out.String(), errOut.String())
			}
			for _, s := range tt.out {
				if !strings.Contains(out.String(), s) {
					t.Errorf("stdout lacks %q:\n%s\nstderr: %s", s, out.String(), errOut.String())
				}
			}
			for _, s := range tt.errOut {
				if !strings.Contains(errOut.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut.String())
				}
			}
			if tt.check != nil {
				tt.check(t, f)
			}
		})
	}
}

func TestRulesPullWritesTheFileAtomically(t *testing.T) {
	f := &fakeService{answers: teamAnswers()}
	srv := httptest.NewServer(f)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "payments.yaml")
	os.WriteFile(path, []byte("old"), 0o600)
	var out, errOut bytes.Buffer
	code := run([]string{"sluice", "rules", "pull", "--server", srv.URL, "--token", "slr_team", path}, &out, &errOut)
	data, err := os.ReadFile(path)
	if code != exitOK || err != nil || string(data) != "rules:\n    api:\n        rate: 100/1s\n" {
		t.Fatalf("exit %d (%s), file %q (%v)", code, errOut.String(), data, err)
	}
	if !strings.Contains(errOut.String(), "version 3") {
		t.Errorf("stderr does not name the version: %s", errOut.String())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestRulesServerURL(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"127.0.0.1:9470", "http://127.0.0.1:9470", true},
		{"https://rules.internal/prefix/", "https://rules.internal/prefix", true},
		{"", "", false},
		{"ftp://x", "", false},
		{"http://user:pw@x", "", false},
	}
	for _, tt := range tests {
		got, err := serverURL(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("serverURL(%q) = %q, %v; want %q ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
