package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/config"
)

// TestCLIAgainstTheService runs `sluice rules ...` against a real
// sluice-rules as a team's CI and an admin would, and holds it to its exit
// codes: 0 done, 1 refused (invalid, loosening without --confirm, stale),
// 2 error (forbidden, revoked, unreachable), 3 diff: differences.
func TestCLIAgainstTheService(t *testing.T) {
	svc := startRulesService(t)
	admin := []string{"SLUICE_RULES_SERVER=" + svc.url, "SLUICE_RULES_TOKEN=" + svc.adminToken}
	out, _ := mustCLI(t, 0, admin, "rules", "teams", "create", "--token-name", "ci", "payments")
	team := []string{"SLUICE_RULES_SERVER=" + svc.url, "SLUICE_RULES_TOKEN=" + strings.TrimSpace(out)}
	mustCLI(t, 0, admin, "rules", "teams", "create", "--no-token", "search")
	if out, _ := mustCLI(t, 0, admin, "rules", "teams", "list"); !strings.Contains(out, "payments") || !strings.Contains(out, "search") {
		t.Errorf("teams list:\n%s", out)
	}
	if out, _ := mustCLI(t, 0, team, "rules", "whoami"); !strings.Contains(out, "team payments") {
		t.Errorf("whoami: %s", out)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "payments.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	version := func() string {
		t.Helper()
		out, _ := mustCLI(t, 0, admin, "rules", "status")
		return regexp.MustCompile(`serves version (\d+)`).FindStringSubmatch(out)[1]
	}

	// Invalid here: refused before anything is sent.
	write("rules:\n  api:\n    rate: 100/1s\n    burst: -1\n")
	if _, errOut := mustCLI(t, 1, team, "rules", "push", file); !strings.Contains(errOut, file+":4:12: rules.api.burst:") {
		t.Errorf("push of an invalid file:\n%s", errOut)
	}
	if v := version(); v != "0" {
		t.Errorf("an invalid push made version %s", v)
	}
	// Valid for the daemon but not as a team's file: the service refuses it,
	// and the CLI words it as lint does.
	write("unknown_rule: deny\nrules:\n  api:\n    rate: 100/1s\n")
	if _, errOut := mustCLI(t, 1, team, "rules", "push", file); !strings.Contains(errOut, file+":1:1: unknown_rule:") {
		t.Errorf("push of a file with unknown_rule:\n%s", errOut)
	}

	// A good push, then pull and push back: nothing to change.
	write("rules:\n  api:\n    rate: 100/1s\n  login:\n    rate: 5/1m\n")
	mustCLI(t, 0, team, "rules", "push", file)
	pulled := filepath.Join(dir, "pulled.yaml")
	mustCLI(t, 0, team, "rules", "pull", pulled)
	if r, err := config.LoadRules(pulled); err != nil || len(r.ByName) != 2 {
		t.Fatalf("pulled file: %v %v", r, err)
	}
	if out, _ := mustCLI(t, 0, team, "rules", "push", pulled); !strings.Contains(out, "no change") {
		t.Errorf("pushing back what was pulled:\n%s", out)
	}
	v := version()
	// A generated file on standard input.
	if code, out, _ := cliInput(t, team, "rules:\n  api:\n    rate: 100/1s\n  login:\n    rate: 5/1m\n", "rules", "diff", "-"); code != 0 || !strings.Contains(out, "no difference") {
		t.Errorf("diff - : exit %d\n%s", code, out)
	}
	if code, _, errOut := cliInput(t, team, "rules:\n  api:\n    rate: x\n", "rules", "push", "-"); code != 1 || !strings.Contains(errOut, "stdin:3:11: rules.api.rate:") {
		t.Errorf("push - of an invalid document: exit %d\n%s", code, errOut)
	}

	// Loosening by 10x: diff warns, push refuses without --confirm.
	write("rules:\n  api:\n    rate: 1000/1s\n  login:\n    rate: 5/1m\n")
	if code, out, _ := cli(t, team, "rules", "diff", file); code != 3 || !strings.Contains(out, "! loosens api") {
		t.Errorf("diff of a loosening: exit %d\n%s", code, out)
	}
	if _, errOut := mustCLI(t, 1, team, "rules", "push", file); !strings.Contains(errOut, "--confirm") || !strings.Contains(errOut, "10x") {
		t.Errorf("push of a loosening:\n%s", errOut)
	}
	if version() != v {
		t.Error("a refused loosening made a version")
	}
	// --if-version pins what CI reviewed: a stale one is refused.
	if _, errOut := mustCLI(t, 1, team, "rules", "push", "--confirm", "--if-version", "0", file); !strings.Contains(errOut, "changed since") {
		t.Errorf("push with a stale --if-version:\n%s", errOut)
	}
	mustCLI(t, 0, team, "rules", "push", "--confirm", "--if-version", v, file)

	// Deleting a rule removes limits: it needs --confirm too.
	write("rules:\n  api:\n    rate: 1000/1s\n")
	mustCLI(t, 1, team, "rules", "push", file)
	mustCLI(t, 0, team, "rules", "push", "--confirm", file)

	// History, one version's file, and rollback twice (the second undoes
	// the first); rolling back to looser limits needs --confirm.
	out, _ = mustCLI(t, 0, team, "rules", "history")
	if n := strings.Count(out, "replace"); n != 3 {
		t.Errorf("history lists %d pushes, want 3:\n%s", n, out)
	}
	if out, _ := mustCLI(t, 0, team, "rules", "history", "--show", v); !strings.Contains(out, "rate: 100/1s") || !strings.Contains(out, "login") {
		t.Errorf("history --show %s:\n%s", v, out)
	}
	if out, _ := mustCLI(t, 0, team, "rules", "rollback", "--dry-run"); !strings.Contains(out, "+ create login") || !strings.Contains(out, "dry run") {
		t.Errorf("rollback --dry-run:\n%s", out)
	}
	mustCLI(t, 0, team, "rules", "rollback")
	if code, out, _ := cli(t, team, "rules", "diff", file); code != 3 || !strings.Contains(out, "login") {
		t.Errorf("diff after a rollback: exit %d\n%s", code, out)
	}
	if _, errOut := mustCLI(t, 1, team, "rules", "rollback"); !strings.Contains(errOut, "--confirm") {
		t.Errorf("rolling back a rollback (deletes login):\n%s", errOut)
	}
	mustCLI(t, 0, team, "rules", "rollback", "--confirm")
	mustCLI(t, 0, team, "rules", "diff", file)

	// A team's token reaches only its own team; teams are the admin's.
	if _, errOut := mustCLI(t, 2, team, "rules", "pull", "--team", "search"); !strings.Contains(errOut, "403") {
		t.Errorf("pull of another team's rules:\n%s", errOut)
	}
	if _, errOut := mustCLI(t, 2, team, "rules", "teams", "create", "mine"); !strings.Contains(errOut, "403") {
		t.Errorf("a team creating a team:\n%s", errOut)
	}
	// The admin works on a team by name.
	if out, _ := mustCLI(t, 0, admin, "rules", "pull", "--team", "payments"); !strings.Contains(out, "api") {
		t.Errorf("admin pull --team payments:\n%s", out)
	}
	if _, errOut := mustCLI(t, 2, admin, "rules", "pull"); !strings.Contains(errOut, "--team") {
		t.Errorf("admin pull without --team:\n%s", errOut)
	}

	// A revoked token is refused.
	out, _ = mustCLI(t, 0, admin, "rules", "tokens", "list", "payments")
	id := regexp.MustCompile(`(?m)^([0-9a-f]{6,})\s+ci\b`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("tokens list:\n%s", out)
	}
	mustCLI(t, 0, admin, "rules", "tokens", "revoke", "payments", id[1])
	if _, errOut := mustCLI(t, 2, team, "rules", "whoami"); !strings.Contains(errOut, "unknown or revoked") {
		t.Errorf("whoami with a revoked token:\n%s", errOut)
	}

	// No service there.
	svc.Kill()
	if _, errOut := mustCLI(t, 2, admin, "rules", "status"); !strings.Contains(errOut, "cannot reach the rules service") {
		t.Errorf("status with the service down:\n%s", errOut)
	}
}
