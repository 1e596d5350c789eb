package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/pgtest"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/proctest"
)

// Issue 19's "Done when", step by step against real processes: a new user
// starts sluice-rules with no flags, creates a team and a rule with the CLI,
// three daemons pick it up, the rule is changed in the web page and the
// daemons follow, it is rolled back with the CLI and the daemons follow
// again, and the audit log tells the whole story. On SQLite (the default)
// and on PostgreSQL.

func TestDoneWhenOnSQLite(t *testing.T) {
	doneWhen(t, startRulesService(t))
}

func TestDoneWhenOnPostgreSQL(t *testing.T) {
	url := pgtest.URL(t)
	doneWhen(t, startRulesService(t, "SLUICE_RULES_DB="+url))
}

// propagationBound is how long a change may take to reach a daemon in these
// tests: generous, for a loaded machine. A long-polling daemon gets a change
// in milliseconds, the plainly polling one within its 1 s poll (the figures
// are logged, and measured in TestPropagation); a long-polling daemon that
// missed a change would wait for its 30 s poll and fail the test.
const propagationBound = 10 * time.Second

func doneWhen(t *testing.T, svc *rulesService) {
	b := newBrowser(t) // first: it skips the test where there is no Chromium
	admin := []string{"SLUICE_RULES_SERVER=" + svc.url, "SLUICE_RULES_TOKEN=" + svc.adminToken}

	// The service answers, serving version 0 (no rules) to daemons.
	if out, _ := mustCLI(t, 0, admin, "rules", "status"); !strings.Contains(out, "serves version 0") {
		t.Fatalf("sluice rules status: %s", out)
	}
	// Two daemons long-poll (--rules-wait 30s), one polls plainly every
	// second, as a daemon against any web server would.
	daemons := append(startDaemons(t, "long", 2, svc.servedURL(), 30*time.Second, 30*time.Second),
		startDaemons(t, "poll", 1, svc.servedURL(), time.Second, 0)...)
	for _, d := range daemons {
		if l := d.limit(t, "payments.api"); l != 0 {
			t.Fatalf("daemon %s has payments.api (limit %d) before anyone made it", d.name, l)
		}
	}

	// An admin creates the team; its token comes out alone on stdout.
	out, _ := mustCLI(t, 0, admin, "rules", "teams", "create", "--token-name", "ci", "payments")
	token := strings.TrimSpace(out)
	if !regexp.MustCompile(`^slr_[A-Za-z0-9_-]{20,}$`).MatchString(token) {
		t.Fatalf("teams create printed %q, not a token", out)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
	team := []string{"SLUICE_RULES_SERVER=" + svc.url, "SLUICE_RULES_TOKEN_FILE=" + tokenFile}

	// The team keeps its rules in Git and pushes them from CI.
	rulesFile := filepath.Join(t.TempDir(), "payments.yaml")
	os.WriteFile(rulesFile, []byte("# payments' limits, reviewed in Git\nrules:\n  api:\n    rate: 5/1h\n"), 0o644)
	if code, out, _ := cli(t, team, "rules", "diff", rulesFile); code != 3 || !strings.Contains(out, "+ create api") {
		t.Fatalf("diff before the first push: exit %d\n%s", code, out)
	}
	out, _ = mustCLI(t, 0, team, "rules", "push", rulesFile)
	pushed := time.Now()
	if !strings.Contains(out, "+ create api") || !strings.Contains(out, "pushed "+rulesFile+" to team payments") {
		t.Errorf("push printed:\n%s", out)
	}
	took := waitLimit(t, daemons, "payments.api", 5, pushed, propagationBound)
	t.Logf("the pushed rule reached the daemons (long-poll, long-poll, 1 s poll) in %v", took)
	for _, d := range daemons {
		d.enforces(t, "payments.api", 5)
	}
	if out, _ := mustCLI(t, 0, team, "rules", "diff", rulesFile); !strings.Contains(out, "no difference") {
		t.Errorf("diff after the push:\n%s", out)
	}

	// The team changes the rule in the web page; the daemons follow.
	b.signIn(svc.url, token)
	b.openRule("api")
	b.checkSpec("rate: 7/1h\n")
	if d := b.text(`#diff .diff[data-rule="api"]`); !strings.Contains(d, "+rate: 7/1h") {
		t.Fatalf("the page's preview: %q", d)
	}
	b.save()
	saved := time.Now()
	took = waitLimit(t, daemons, "payments.api", 7, saved, propagationBound)
	t.Logf("the change made in the web page reached the daemons (long-poll, long-poll, 1 s poll) in %v (from the page showing it saved)", took)
	for _, d := range daemons {
		d.enforces(t, "payments.api", 7)
	}
	b.clean()
	// Git now differs from the service: CI's diff says so.
	if code, out, _ := cli(t, team, "rules", "diff", rulesFile); code != 3 || !strings.Contains(out, "-rate: 7/1h") || !strings.Contains(out, "+rate: 5/1h") {
		t.Errorf("diff after the web edit: exit %d\n%s", code, out)
	}

	// The team rolls the change back with the CLI; the daemons follow.
	out, _ = mustCLI(t, 0, team, "rules", "rollback")
	rolled := time.Now()
	if !strings.Contains(out, "rolled back team payments's rules") {
		t.Errorf("rollback printed:\n%s", out)
	}
	took = waitLimit(t, daemons, "payments.api", 5, rolled, propagationBound)
	t.Logf("the rollback reached the daemons (long-poll, long-poll, 1 s poll) in %v", took)
	for _, d := range daemons {
		d.enforces(t, "payments.api", 5)
	}

	// The history and the audit log tell who did what.
	out, _ = mustCLI(t, 0, team, "rules", "history")
	for _, want := range []string{"rollback", "update", "replace", "team:payments"} {
		if !strings.Contains(out, want) {
			t.Errorf("history lacks %q:\n%s", want, out)
		}
	}
	out, _ = mustCLI(t, 0, admin, "rules", "audit", "-v")
	t.Logf("sluice rules audit -v:\n%s", out)
	var actions []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 5 && regexp.MustCompile(`^\d+$`).MatchString(f[0]) {
			actions = append(actions, f[2]+" "+f[4])
		}
	}
	want := []string{"team:payments rollback", "team:payments update", "team:payments replace", "admin token.create", "admin team.create", "service token.create"}
	if strings.Join(actions, ", ") != strings.Join(want, ", ") {
		t.Errorf("audit log (newest first): %v, want %v", actions, want)
	}
	for _, s := range []string{"rate: 5/1h", "rate: 7/1h", "before:", "after:"} {
		if !strings.Contains(out, s) {
			t.Errorf("audit -v lacks %q", s)
		}
	}
	// A team's token reads its own team's entries, not the admin's tokens.
	if out, _ := mustCLI(t, 0, team, "rules", "audit"); strings.Contains(out, "team.create") && !strings.Contains(out, "payments") {
		t.Errorf("a team's audit:\n%s", out)
	}

	// The service goes down: the daemons keep the last good rules.
	svc.Kill()
	for _, d := range daemons {
		proctest.Eventually(t, propagationBound, "daemon "+d.name+" notices the service is gone", func() bool {
			return strings.Contains(d.Output.String(), "rules service unreachable")
		})
		d.enforces(t, "payments.api", 5)
	}
}
