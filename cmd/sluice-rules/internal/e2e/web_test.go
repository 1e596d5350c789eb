package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/web"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// TestWebPageInChromium drives the web page of a real sluice-rules in
// headless Chromium as a team does: it signs in with the team's token, sees
// its rules (a hostile override key shown as text), edits a rule with an
// error and sees the problem named, edits it validly and sees the diff
// preview, saves, sees the new version in the table and the history, rolls
// the change back from the page, and signs out. The page must throw nothing
// and trip no Content-Security-Policy rule on the way.
func TestWebPageInChromium(t *testing.T) {
	b := newBrowser(t)
	svc := startRulesService(t)
	ctx := context.Background()
	admin := rulesapi.NewClient(svc.url, svc.adminToken)
	if _, err := admin.CreateTeam(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.CreateToken(ctx, "web", "browser")
	if err != nil {
		t.Fatal(err)
	}
	team := rulesapi.NewClient(svc.url, tok.Secret)
	const hostile = `<i>x</i>"&'`
	if _, err := team.PutRule(ctx, "web", "api", "rate: 5/1h\n", rulesapi.ChangeOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := team.PutRule(ctx, "web", "odd", "rate: 1/1s\noverrides:\n  '"+strings.ReplaceAll(hostile, "'", "''")+"':\n    rate: 2/1s\n", rulesapi.ChangeOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("headers", func(t *testing.T) {
		resp, err := http.Get(svc.url + "/ui/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") != web.CSP || resp.Header.Get("X-Frame-Options") != "DENY" ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET /ui/: %s, headers %v", resp.Status, resp.Header)
		}
		if !strings.Contains(string(body), `<script src="app.js" defer></script>`) {
			t.Errorf("GET /ui/ is not the page:\n%s", body)
		}
	})

	b.signIn(svc.url, tok.Secret)
	if got := b.text("#who"); !strings.Contains(got, "team web") {
		t.Errorf("signed in as %q", got)
	}
	if got := b.text(`#rules tr[data-rule="api"] td.served`); got != "web.api" {
		t.Errorf("api is served as %q", got)
	}
	if spec := b.text(`#rules tr[data-rule="odd"] td.spec`); !strings.Contains(spec, `<i>x</i>"&`) {
		t.Errorf("the hostile override key is not shown as text: %q", spec)
	}
	if n := b.count("#rules i"); n != 0 {
		t.Errorf("an override key was inserted as HTML: %d <i> elements", n)
	}

	b.openRule("api")
	b.checkSpec("rate: 5/1h\nburst: -1\n")
	if problems := b.text("#problems"); !strings.Contains(problems, "burst") || !strings.Contains(problems, "line 2") {
		t.Errorf("the problem shown does not name the field and line: %q", problems)
	}
	if b.eval(`String(document.getElementById('save').disabled)`) != "true" {
		t.Error("Save is enabled for an invalid rule")
	}

	b.checkSpec("rate: 7/1h\n")
	if n := b.count("#problems li"); n != 0 {
		t.Errorf("problems shown for a valid rule: %s", b.text("#problems"))
	}
	diff := b.text(`#diff .diff[data-rule="api"]`)
	if !strings.Contains(diff, "-rate: 5/1h") || !strings.Contains(diff, "+rate: 7/1h") {
		t.Errorf("the diff preview does not show the change: %q", diff)
	}
	if n := b.count("#diff .add") + b.count("#diff .del"); n < 2 {
		t.Errorf("the diff marks %d lines as added or removed", n)
	}
	if got, _, err := team.Rule(ctx, "web", "api"); err != nil || got.Spec != "rate: 5/1h\n" {
		t.Fatalf("the preview stored the change: %+v %v", got, err)
	}

	notice := b.save()
	saved, _, err := team.Rule(ctx, "web", "api")
	if err != nil || saved.Spec != "rate: 7/1h\n" {
		t.Fatalf("after saving, the service has %+v (%v)", saved, err)
	}
	if !strings.Contains(notice, "version") {
		t.Errorf("notice after saving: %q", notice)
	}
	b.waitFor("the table shows the saved rule", `(document.querySelector('#rules tr[data-rule="api"] td.spec') || {}).textContent === 'rate: 7/1h\n'`)
	b.waitFor("the history lists the update", `(document.querySelector('#history tbody tr') || {dataset: {}}).dataset.action === 'update'`)
	if by := b.text("#history tbody tr td:nth-child(3)"); by != "team:web" {
		t.Errorf("history says the update was by %q", by)
	}

	// Roll the change back from the page: a preview first, then the rollback.
	b.do("preview the rollback", clickCSS("#rollback"))
	b.waitFor("the rollback preview shows", `!document.getElementById('rollback-preview').hidden`)
	if d := b.text("#rollback-diff"); !strings.Contains(d, "+rate: 5/1h") {
		t.Errorf("the rollback preview does not show the way back: %q", d)
	}
	b.do("roll back", clickCSS("#rollback-do"))
	b.waitFor("the page says it rolled back", `document.getElementById('notice').textContent.startsWith('Rolled back') || document.getElementById('error').textContent !== ''`)
	if got, _, err := team.Rule(ctx, "web", "api"); err != nil || got.Spec != "rate: 5/1h\n" {
		t.Errorf("after the rollback, the service has %+v (%v); page: %s", got, err, b.pageState())
	}
	b.waitFor("the history lists the rollback", `(document.querySelector('#history tbody tr') || {dataset: {}}).dataset.action === 'rollback'`)

	// A stale edit: someone else changes the rule after the page opened it.
	b.openRule("api")
	b.checkSpec("rate: 6/1h\n")
	if _, err := team.PutRule(ctx, "web", "api", "rate: 4/1h\n", rulesapi.ChangeOptions{}); err != nil {
		t.Fatal(err)
	}
	b.do("save a stale edit", clickCSS("#save"))
	b.waitFor("the page reports the conflict", `document.getElementById('error').textContent.includes('changed')`)
	if got, _, _ := team.Rule(ctx, "web", "api"); got.Spec != "rate: 4/1h\n" {
		t.Errorf("a stale save overwrote the other change: %q", got.Spec)
	}

	// A new rule, then its deletion: a loosening, saved only once confirmed.
	b.do("new rule", clickCSS("#new-rule"))
	b.waitFor("the editor opens empty", `!document.getElementById('editor').hidden && document.getElementById('edit-name').value === ''`)
	b.do("name it", chromedp.SetValue(chromedp.CSS("#edit-name"), "login"))
	b.checkSpec("rate: 5/1m\n")
	if d := b.text(`#diff .diff[data-rule="login"]`); !strings.HasPrefix(d, "create login") || !strings.Contains(d, "+rate: 5/1m") {
		t.Errorf("the preview of a new rule: %q", d)
	}
	b.save()
	b.waitFor("the table lists the new rule", `document.querySelector('#rules tr[data-rule="login"]') !== null`)
	b.openRule("login")
	b.do("ask to delete", clickCSS("#delete-rule"))
	b.waitFor("the deletion's preview shows", `!document.getElementById('preview').hidden`)
	if l := b.text("#loosenings"); !strings.Contains(l, "login") {
		t.Errorf("the deletion is not flagged as a loosening: %q", l)
	}
	b.do("delete without confirming", clickCSS("#save"))
	b.waitFor("the page asks for confirmation", `document.getElementById('error').textContent.includes('confirm')`)
	if _, _, err := team.Rule(ctx, "web", "login"); err != nil {
		t.Fatalf("deleted without confirmation: %v", err)
	}
	b.do("confirm and delete", clickCSS("#confirm"), clickCSS("#save"))
	b.waitFor("the page says it deleted", `document.getElementById('notice').textContent.startsWith('Deleted login')`)
	b.waitFor("the table no longer lists it", `document.querySelector('#rules tr[data-rule="login"]') === null`)

	// Back to a chosen version from the history: the version the page
	// saved above (api at 7/1h), its rules shown folded in its row.
	row := fmt.Sprintf(`#history tr[data-version="%d"]`, saved.Version)
	if doc := b.text(row + " details pre"); !strings.Contains(doc, "rate: 7/1h") {
		t.Errorf("the history row of version %d does not hold the team's rules then: %q", saved.Version, doc)
	}
	b.do("go back to a version", clickCSS(row+" button.back"))
	b.waitFor("the preview of going back shows", `!document.getElementById('rollback-preview').hidden`)
	if d := b.text("#rollback-diff"); !strings.Contains(d, "-rate: 4/1h") || !strings.Contains(d, "+rate: 7/1h") {
		t.Errorf("the preview of going back to version %d: %q", saved.Version, d)
	}
	b.do("go back", clickCSS("#rollback-do"))
	b.waitFor("the page says it went back", `document.getElementById('notice').textContent.startsWith('Rolled back') || document.getElementById('error').textContent !== ''`)
	if got, _, err := team.Rule(ctx, "web", "api"); err != nil || got.Spec != "rate: 7/1h\n" {
		t.Errorf("after going back to version %d the service has %+v (%v); page: %s", saved.Version, got, err, b.pageState())
	}

	// Reloading the page keeps the tab signed in (session storage), with the
	// token still out of the URL.
	b.do("reload", navigate(svc.url+"/ui/"))
	b.waitFor("signed in again after a reload", `!document.getElementById('team').hidden && document.getElementById('team-name').textContent === 'web'`)

	b.do("sign out", clickCSS("#signout"))
	b.waitFor("the sign-in form is back", `!document.getElementById('signin').hidden`)
	if v := b.eval(`String(sessionStorage.getItem('sluice-rules-token'))`); v != "null" {
		t.Errorf("the token is still in session storage after signing out: %q", v)
	}
	b.clean()
}

// TestWebPageForTheAdmin: the admin token picks a team from a list and
// sees that team's rules.
func TestWebPageForTheAdmin(t *testing.T) {
	b := newBrowser(t)
	svc := startRulesService(t)
	ctx := context.Background()
	admin := rulesapi.NewClient(svc.url, svc.adminToken)
	for _, name := range []string{"alpha", "beta"} {
		if _, err := admin.CreateTeam(ctx, name); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.PutRule(ctx, name, name+"-rule", "rate: 3/1s\n", rulesapi.ChangeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b.signIn(svc.url, svc.adminToken)
	if who := b.text("#who"); !strings.HasPrefix(who, "admin") {
		t.Errorf("signed in as %q", who)
	}
	b.waitFor("alpha's rules show", `document.querySelector('#rules tr[data-rule="alpha-rule"]') !== null`)
	b.do("pick beta", chromedp.SetValue(chromedp.CSS("#team-select"), "beta"))
	b.eval(`document.getElementById('team-select').dispatchEvent(new Event('change')), ''`)
	b.waitFor("beta's rules show", `document.querySelector('#rules tr[data-rule="beta-rule"]') !== null && document.getElementById('team-name').textContent === 'beta'`)
	b.clean()
}

// TestWebPageRefusesABadToken: a wrong token is refused with a message, and
// nothing of a team shows.
func TestWebPageRefusesABadToken(t *testing.T) {
	b := newBrowser(t)
	svc := startRulesService(t)
	b.do("load the page", navigate(svc.url+"/ui/"), waitVisibleCSS("#token"))
	b.do("sign in", sendKeysCSS("#token", "slr_not-a-token"), clickCSS("#signin-button"))
	b.waitFor("the page reports the bad token", `document.getElementById('error').textContent !== ''`)
	if e := b.text("#error"); !strings.Contains(e, "unknown or revoked") {
		t.Errorf("error shown: %q", e)
	}
	if b.eval(`String(document.getElementById('team').hidden)`) != "true" {
		t.Error("the team view shows after a refused sign-in")
	}
	b.clean()
}
