package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/pgtest"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/store"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// env is a running server with an admin client.
type env struct {
	secret string // the admin token
	srv    *Server
	st     *store.Store
	http   *httptest.Server
	admin  *rulesapi.Client
}

func (e *env) client(token string) *rulesapi.Client { return rulesapi.NewClient(e.http.URL, token) }

// teamClient creates a team and returns a client with a token of it.
func (e *env) teamClient(t *testing.T, team string) *rulesapi.Client {
	t.Helper()
	ctx := context.Background()
	if _, err := e.admin.CreateTeam(ctx, team); err != nil {
		t.Fatalf("create team %s: %v", team, err)
	}
	tok, err := e.admin.CreateToken(ctx, team, "test")
	if err != nil || !strings.HasPrefix(tok.Secret, tokenPrefix) {
		t.Fatalf("create token: %+v %v", tok, err)
	}
	return e.client(tok.Secret)
}

func start(t *testing.T, dbURL string) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	secret, err := BootstrapAdmin(ctx, st, "", time.Now())
	if err != nil || secret == "" {
		t.Fatalf("bootstrap: %q %v", secret, err)
	}
	if again, err := BootstrapAdmin(ctx, st, "", time.Now()); err != nil || again != "" {
		t.Fatalf("second bootstrap made another token: %q %v", again, err)
	}
	srv, err := New(ctx, Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Drain(); hs.Close() })
	return &env{secret: secret, srv: srv, st: st, http: hs, admin: rulesapi.NewClient(hs.URL, secret)}
}

func backends(t *testing.T, f func(t *testing.T, e *env)) {
	t.Run("sqlite", func(t *testing.T) { f(t, start(t, "sqlite://"+filepath.Join(t.TempDir(), "rules.db"))) })
	t.Run("postgres", func(t *testing.T) { f(t, start(t, pgtest.URL(t))) })
}

func apiCode(err error) (int, string) {
	var ae *rulesapi.APIError
	if errors.As(err, &ae) {
		return ae.Status, ae.Code
	}
	return 0, ""
}

func wantCode(t *testing.T, what string, err error, status int, code string) *rulesapi.APIError {
	t.Helper()
	var ae *rulesapi.APIError
	if !errors.As(err, &ae) || ae.Status != status || ae.Code != code {
		t.Fatalf("%s: error %v; want %d %s", what, err, status, code)
	}
	return ae
}

func served(t *testing.T, e *env) (string, string) {
	t.Helper()
	doc, etag, err := e.client("").Served(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.ParseRules("served", doc); err != nil {
		t.Fatalf("served an invalid document: %v\n%s", err, doc)
	}
	return string(doc), etag
}

func TestAuthorization(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		pay := e.teamClient(t, "pay")
		web := e.teamClient(t, "web")
		if _, err := pay.PutRule(ctx, "pay", "api", "rate: 10/1s", rulesapi.ChangeOptions{}); err != nil {
			t.Fatal(err)
		}
		// A team token cannot read, change, delete, roll back or read the
		// history of another team's rules, nor manage teams or tokens.
		steps := []struct {
			name string
			call func() error
		}{
			{"put other team's rule", func() error {
				_, err := web.PutRule(ctx, "pay", "api", "rate: 1000/1s", rulesapi.ChangeOptions{Confirm: true})
				return err
			}},
			{"delete other team's rule", func() error {
				_, err := web.DeleteRule(ctx, "pay", "api", rulesapi.ChangeOptions{Confirm: true})
				return err
			}},
			{"replace other team's rules", func() error {
				_, err := web.PutTeamRules(ctx, "pay", "rules: {}\n", rulesapi.ChangeOptions{Confirm: true})
				return err
			}},
			{"read other team's rules", func() error { _, _, err := web.TeamRules(ctx, "pay"); return err }},
			{"roll back other team", func() error {
				_, err := web.Rollback(ctx, "pay", 0, rulesapi.ChangeOptions{Confirm: true})
				return err
			}},
			{"other team's history", func() error { _, err := web.History(ctx, "pay", 0); return err }},
			{"create team", func() error { _, err := web.CreateTeam(ctx, "evil"); return err }},
			{"token for itself", func() error { _, err := web.CreateToken(ctx, "web", "more"); return err }},
			{"token for another team", func() error { _, err := web.CreateToken(ctx, "pay", "steal"); return err }},
			{"delete team", func() error { _, err := web.DeleteTeam(ctx, "pay", true); return err }},
		}
		for _, s := range steps {
			if st, _ := apiCode(s.call()); st != http.StatusForbidden {
				t.Errorf("%s: status %d, want 403", s.name, st)
			}
		}
		for _, tok := range []string{"", "slr_nope", strings.Repeat("x", 300)} {
			_, err := e.client(tok).WhoAmI(ctx)
			wantCode(t, "token "+tok, err, http.StatusUnauthorized, rulesapi.CodeUnauthorized)
		}
		if r, _, err := pay.Rule(ctx, "pay", "api"); err != nil || r.Spec != "rate: 10/1s\n" {
			t.Fatalf("pay.api changed: %+v %v", r, err)
		}
		// Nor can a spec smuggle a rule of another team into the served
		// document, whatever line breaks it uses.
		for _, brk := range []string{"\r", "\u0085", "\u2028"} {
			pay.PutRule(ctx, "pay", "sneak", "rate: 1/1s"+brk+"  web.api: {rate: 1000000/1s}", rulesapi.ChangeOptions{Confirm: true})
			if doc, _ := served(t, e); strings.Contains(doc, "web.api") {
				t.Fatalf("break %q smuggled a rule of team web:\n%s", brk, doc)
			}
		}
		// The audit log a team reads is its own.
		log, err := web.Audit(ctx, rulesapi.AuditQuery{Team: "pay"})
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range log.Entries {
			if en.Team != "web" {
				t.Errorf("team web read an audit entry of %q", en.Team)
			}
		}
		// A revoked token stops working.
		toks, err := e.admin.ListTokens(ctx, "web")
		if err != nil || len(toks) != 1 {
			t.Fatalf("tokens: %+v %v", toks, err)
		}
		if err := e.admin.RevokeToken(ctx, "web", toks[0].ID); err != nil {
			t.Fatal(err)
		}
		_, err = web.WhoAmI(ctx)
		wantCode(t, "revoked token", err, http.StatusUnauthorized, rulesapi.CodeUnauthorized)
	})
}

func TestRuleLifecycle(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		pay := e.teamClient(t, "pay")
		doc, etag := served(t, e)
		if doc != "rules: {}" || etag != `"v0"` {
			t.Fatalf("initial served = %q %s", doc, etag)
		}
		res, err := pay.PutRule(ctx, "pay", "api", "rate: 100/1s\nburst: 200\n", rulesapi.ChangeOptions{IfNoneMatch: "*"})
		if err != nil || res.Version != 1 || !res.Changed || res.Changes[0].Action != rulesapi.ActionCreate {
			t.Fatalf("create: %+v %v", res, err)
		}
		_, err = pay.PutRule(ctx, "pay", "api", "rate: 1/1s", rulesapi.ChangeOptions{IfNoneMatch: "*"})
		wantCode(t, "create again with If-None-Match", err, http.StatusConflict, rulesapi.CodeExists)
		doc, etag = served(t, e)
		if !strings.Contains(doc, "pay.api:") || etag != `"v1"` {
			t.Fatalf("served after create = %q %s", doc, etag)
		}
		// 304 while unchanged.
		if _, _, err := e.client("").Served(ctx, etag, 0); !errors.Is(err, rulesapi.ErrNotModified) {
			t.Fatalf("conditional GET: %v", err)
		}
		// The same spec again: nothing changes.
		if res, err := pay.PutRule(ctx, "pay", "api", "rate: 100/1s\nburst: 200", rulesapi.ChangeOptions{}); err != nil || res.Changed || res.Version != 1 {
			t.Fatalf("same again: %+v %v", res, err)
		}
		// Invalid: 422 naming rule and field; nothing stored.
		_, err = pay.PutRule(ctx, "pay", "api", "rate: 100/1s\nburst: 0\n", rulesapi.ChangeOptions{})
		ae := wantCode(t, "invalid", err, http.StatusUnprocessableEntity, rulesapi.CodeInvalidRules)
		if p := ae.Problems[0]; p.Rule != "api" || p.Field != "burst" || p.Line != 2 {
			t.Errorf("problem = %+v", p)
		}
		// Loosening 10x needs confirmation; a dry run shows it.
		dry, err := pay.PutRule(ctx, "pay", "api", "rate: 1000/1s\nburst: 200\n", rulesapi.ChangeOptions{DryRun: true})
		if err != nil || !dry.DryRun || !dry.Changed || len(dry.Loosenings) != 1 || dry.Version != 1 || !strings.Contains(dry.Changes[0].Diff, "+rate: 1000/1s") {
			t.Fatalf("dry run: %+v %v", dry, err)
		}
		_, err = pay.PutRule(ctx, "pay", "api", "rate: 1000/1s\nburst: 200\n", rulesapi.ChangeOptions{})
		ae = wantCode(t, "loosen", err, http.StatusConflict, rulesapi.CodeConfirmRequired)
		if len(ae.Loosenings) != 1 || ae.Loosenings[0].Factor != 10 {
			t.Errorf("loosenings = %+v", ae.Loosenings)
		}
		// Stale If-Match: 412.
		_, etag, err = pay.Rule(ctx, "pay", "api")
		if err != nil || etag != `"v1"` {
			t.Fatalf("rule etag %s %v", etag, err)
		}
		if _, err := pay.PutRule(ctx, "pay", "api", "rate: 150/1s\nburst: 200\n", rulesapi.ChangeOptions{IfMatch: etag}); err != nil {
			t.Fatal(err)
		}
		_, err = pay.PutRule(ctx, "pay", "api", "rate: 120/1s\nburst: 200\n", rulesapi.ChangeOptions{IfMatch: etag})
		ae = wantCode(t, "stale", err, http.StatusPreconditionFailed, rulesapi.CodeStale)
		if ae.Current != `"v2"` {
			t.Errorf("current etag %q", ae.Current)
		}
		if _, err := pay.PutRule(ctx, "pay", "api", "rate: 2000/1s\nburst: 200\n", rulesapi.ChangeOptions{Confirm: true}); err != nil {
			t.Fatal(err)
		}
		// Roll back one step: to 150/1s (a tightening: no confirm).
		rb, err := pay.Rollback(ctx, "pay", 0, rulesapi.ChangeOptions{})
		if err != nil || rb.Version != 4 || !strings.Contains(rb.Changes[0].After, "150/1s") {
			t.Fatalf("rollback: %+v %v", rb, err)
		}
		doc, _ = served(t, e)
		if !strings.Contains(doc, "rate: 150/1s") {
			t.Fatalf("served after rollback:\n%s", doc)
		}
		// Roll back to version 1.
		if rb, err := pay.Rollback(ctx, "pay", 1, rulesapi.ChangeOptions{}); err != nil || !strings.Contains(rb.Changes[0].After, "100/1s") {
			t.Fatalf("rollback to 1: %+v %v", rb, err)
		}
		h, err := pay.History(ctx, "pay", 0)
		if err != nil || len(h.Entries) != 5 || h.Entries[0].Action != rulesapi.ActionRollback || h.Entries[4].Action != rulesapi.ActionCreate {
			t.Fatalf("history: %+v %v", h, err)
		}
		// Delete needs confirmation.
		_, err = pay.DeleteRule(ctx, "pay", "api", rulesapi.ChangeOptions{})
		wantCode(t, "delete", err, http.StatusConflict, rulesapi.CodeConfirmRequired)
		if _, err := pay.DeleteRule(ctx, "pay", "api", rulesapi.ChangeOptions{Confirm: true}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := pay.Rule(ctx, "pay", "api"); err == nil {
			t.Fatal("deleted rule still there")
		}
		doc, etag = served(t, e)
		if doc != "rules: {}\n" || etag != `"v6"` {
			t.Fatalf("served after delete = %q %s", doc, etag)
		}
		// The audit log: who, what, before and after, newest first.
		log, err := e.admin.Audit(ctx, rulesapi.AuditQuery{Team: "pay"})
		if err != nil {
			t.Fatal(err)
		}
		var actions []string
		for _, en := range log.Entries {
			actions = append(actions, en.Action)
			if en.Action == rulesapi.ActionUpdate && en.Version == 3 && (!strings.Contains(en.Before, "150/1s") || !strings.Contains(en.After, "2000/1s") || en.Actor != "team:pay") {
				t.Errorf("audit of the update: %+v", en)
			}
		}
		want := "delete rollback rollback update update create token.create team.create"
		if strings.Join(actions, " ") != want {
			t.Errorf("audit actions = %q, want %q", strings.Join(actions, " "), want)
		}
	})
}

func TestTeamDocumentPushIsIdempotent(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		pay := e.teamClient(t, "pay")
		doc := "rules:\n  api: {rate: 100/1s, burst: 200}\n  login:\n    limits:\n      - rate: 5/1m\n      - rate: 100/1d\n        algorithm: fixed_window\n"
		res, err := pay.PutTeamRules(ctx, "pay", doc, rulesapi.ChangeOptions{})
		if err != nil || len(res.Changes) != 2 || res.Version != 1 {
			t.Fatalf("push: %+v %v", res, err)
		}
		tr, etag, err := pay.TeamRules(ctx, "pay")
		if err != nil || etag != `"v1"` || len(tr.Rules) != 2 {
			t.Fatalf("pull: %+v %s %v", tr, etag, err)
		}
		// Pushing what was pulled (or the original) changes nothing.
		for _, d := range []string{tr.Document, doc} {
			if res, err := pay.PutTeamRules(ctx, "pay", d, rulesapi.ChangeOptions{IfMatch: etag}); err != nil || res.Changed {
				t.Fatalf("push again: %+v %v", res, err)
			}
		}
		_, err = pay.PutTeamRules(ctx, "pay", "rules:\n  api:\n    rate: 1/1s\n    burst: x\n", rulesapi.ChangeOptions{})
		ae := wantCode(t, "bad document", err, http.StatusUnprocessableEntity, rulesapi.CodeInvalidRules)
		if p := ae.Problems[0]; p.Rule != "api" || p.Field != "burst" || p.Line != 4 {
			t.Errorf("problem = %+v", p)
		}
		_, err = pay.PutTeamRules(ctx, "pay", "unknown_rule: deny\nrules: {}\n", rulesapi.ChangeOptions{Confirm: true})
		wantCode(t, "unknown_rule", err, http.StatusUnprocessableEntity, rulesapi.CodeInvalidRules)
		_, err = pay.PutTeamRules(ctx, "pay", "rules: {}\n", rulesapi.ChangeOptions{})
		wantCode(t, "empty the team", err, http.StatusConflict, rulesapi.CodeConfirmRequired)
		// Deleting the team with rules needs confirmation, then removes them from the served document.
		_, err = e.admin.DeleteTeam(ctx, "pay", false)
		wantCode(t, "delete team", err, http.StatusConflict, rulesapi.CodeConfirmRequired)
		if _, err := e.admin.DeleteTeam(ctx, "pay", true); err != nil {
			t.Fatal(err)
		}
		if doc, _ := served(t, e); doc != "rules: {}\n" {
			t.Fatalf("served after team delete: %q", doc)
		}
		log, err := e.admin.Audit(ctx, rulesapi.AuditQuery{Team: "pay", Limit: 2})
		if err != nil || log.Entries[0].Action != rulesapi.ActionTeamDelete || log.Entries[1].Action == rulesapi.ActionTeamDelete ||
			!strings.Contains(log.Entries[0].Before, "api:") || log.Entries[0].After != "rules: {}\n" {
			t.Fatalf("audit of the team's deletion: %+v %v", log.Entries, err)
		}
		if _, err := e.admin.CreateTeam(ctx, "empty"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.DeleteTeam(ctx, "empty", false); err != nil {
			t.Fatalf("delete a team without rules: %v", err)
		}
		if log, err := e.admin.Audit(ctx, rulesapi.AuditQuery{Team: "empty", Limit: 5}); err != nil || len(log.Entries) != 2 || log.Entries[0].Action != rulesapi.ActionTeamDelete {
			t.Fatalf("audit of the empty team's deletion: %+v %v", log.Entries, err)
		}
	})
}

// TestConcurrentEditsWithStaleIfMatch: of writers that read the same ETag,
// exactly one wins; the others get 412.
func TestConcurrentEditsWithStaleIfMatch(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		pay := e.teamClient(t, "pay")
		if _, err := pay.PutRule(ctx, "pay", "api", "rate: 100/1s", rulesapi.ChangeOptions{}); err != nil {
			t.Fatal(err)
		}
		_, etag, err := pay.Rule(ctx, "pay", "api")
		if err != nil {
			t.Fatal(err)
		}
		const writers = 6
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = pay.PutRule(ctx, "pay", "api", "rate: "+string(rune('1'+i))+"0/1s", rulesapi.ChangeOptions{IfMatch: etag})
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
				continue
			}
			wantCode(t, "concurrent writer", err, http.StatusPreconditionFailed, rulesapi.CodeStale)
		}
		if won != 1 {
			t.Fatalf("%d writers won; want 1", won)
		}
	})
}

// TestLongPollIsAnsweredByTheNextVersion: a held request returns the new
// document as soon as a change is stored.
func TestLongPollIsAnsweredByTheNextVersion(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		pay := e.teamClient(t, "pay")
		type answer struct {
			doc  []byte
			etag string
			err  error
		}
		got := make(chan answer, 1)
		go func() {
			doc, etag, err := e.client("").Served(ctx, `"v0"`, 60*time.Second)
			got <- answer{doc, etag, err}
		}()
		eventually(t, "the long-poll to be held", func() bool { return e.srv.held.Load() > 0 })
		start := time.Now()
		if _, err := pay.PutRule(ctx, "pay", "api", "rate: 7/1s", rulesapi.ChangeOptions{}); err != nil {
			t.Fatal(err)
		}
		select {
		case a := <-got:
			if a.err != nil || a.etag != `"v1"` || !bytes.Contains(a.doc, []byte("pay.api")) {
				t.Fatalf("long-poll answer: %q %s %v", a.doc, a.etag, a.err)
			}
			t.Logf("long-poll answered %v after the change", time.Since(start))
		case <-time.After(30 * time.Second):
			t.Fatal("the held request was not answered by the change")
		}
		// A wait that passes answers 304.
		if _, _, err := e.client("").Served(ctx, `"v1"`, time.Second); !errors.Is(err, rulesapi.ErrNotModified) {
			t.Fatalf("expired wait: %v", err)
		}
	})
}

func TestLimitsAndBadRequests(t *testing.T) {
	e := start(t, "sqlite://"+filepath.Join(t.TempDir(), "rules.db"))
	ctx := context.Background()
	pay := e.teamClient(t, "pay")
	_, err := pay.PutRule(ctx, "pay", "api", strings.Repeat("#", rulesapi.MaxBodyBytes+10), rulesapi.ChangeOptions{})
	wantCode(t, "huge body", err, http.StatusRequestEntityTooLarge, rulesapi.CodeTooLarge)
	_, err = pay.PutRule(ctx, "pay", "Bad_Name", "rate: 1/1s", rulesapi.ChangeOptions{})
	wantCode(t, "bad rule name", err, http.StatusBadRequest, rulesapi.CodeBadRequest)
	_, err = e.admin.CreateTeam(ctx, strings.Repeat("a", rulesapi.MaxNameLen+1))
	wantCode(t, "long team name", err, http.StatusBadRequest, rulesapi.CodeBadRequest)
	_, err = e.admin.CreateTeam(ctx, "pay")
	wantCode(t, "team exists", err, http.StatusConflict, rulesapi.CodeExists)
	var many strings.Builder
	many.WriteString("rules:\n")
	for i := range rulesapi.MaxRulesPerTeam + 1 {
		many.WriteString("  r" + strconv.Itoa(i) + ": {rate: 1/1s}\n")
	}
	_, err = pay.PutTeamRules(ctx, "pay", many.String(), rulesapi.ChangeOptions{})
	if st, _ := apiCode(err); st != http.StatusUnprocessableEntity && st != http.StatusRequestEntityTooLarge {
		t.Fatalf("too many rules: %v", err)
	}
	// Unknown endpoints and methods answer JSON.
	for _, req := range [][2]string{{"GET", "/v1/nope"}, {"POST", "/v1/whoami"}} {
		r, _ := http.NewRequest(req[0], e.http.URL+req[1], nil)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !bytes.Contains(body, []byte(`"not_found"`)) {
			t.Errorf("%s %s: %d %s", req[0], req[1], resp.StatusCode, body)
		}
	}
}

// eventually polls cond every 5 ms until it holds, failing after 15 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(15 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestHealthMetricsAndBackup(t *testing.T) {
	e := start(t, "sqlite://"+filepath.Join(t.TempDir(), "rules.db"))
	ctx := context.Background()
	pay := e.teamClient(t, "pay")
	if _, err := pay.PutRule(ctx, "pay", "api", "rate: 1/1s\nburst: 0", rulesapi.ChangeOptions{}); err == nil {
		t.Fatal("invalid rule accepted")
	}
	if _, err := pay.PutRule(ctx, "pay", "api", "rate: 1/1s", rulesapi.ChangeOptions{}); err != nil {
		t.Fatal(err)
	}
	c := e.client("")
	_, etag, _ := c.Served(ctx, "", 0)
	c.Served(ctx, etag, 0)
	c.Served(ctx, etag, 0)
	get := func(path string) (int, string) {
		resp, err := http.Get(e.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, _ := get("/healthz"); st != 200 {
		t.Errorf("/healthz %d", st)
	}
	if st, _ := get("/readyz"); st != 200 {
		t.Errorf("/readyz %d", st)
	}
	_, m := get("/metrics")
	for _, want := range []string{
		`sluice_rules_changes_total{action="create"} 1`,
		`sluice_rules_validation_failures_total 1`,
		`sluice_rules_serves_total{code="200"} 1`,
		`sluice_rules_serves_total{code="304"} 2`,
		`sluice_rules_version 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The backup endpoint's file is a database that opens with the rules.
	req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/v1/admin/backup", nil)
	req.Header.Set("Authorization", "Bearer "+e.secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("backup: %v %v", resp, err)
	}
	path := filepath.Join(t.TempDir(), "restored.db")
	f, _ := os.Create(path)
	io.Copy(f, resp.Body)
	f.Close()
	resp.Body.Close()
	restored, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	if r, err := restored.Read().Rule(ctx, "pay", "api"); err != nil || r.Spec != "rate: 1/1s\n" {
		t.Fatalf("restored rule: %+v %v", r, err)
	}
	// Drain answers held long-polls at once.
	e.srv.Drain()
	if _, _, err := c.Served(ctx, `"v1"`, time.Minute); !errors.Is(err, rulesapi.ErrNotModified) {
		t.Fatalf("long-poll after drain: %v", err)
	}
}
