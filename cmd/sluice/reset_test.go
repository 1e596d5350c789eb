package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

func TestReset(t *testing.T) {
	n := startNode(t, "rules:\n  api:\n    rate: 3/1h\n", nil)
	n.take(t, "api", "alice", 3)
	admin := []string{"--admin", n.admin.URL}
	tests := []struct {
		name    string
		args    []string
		code    int
		out     string
		errOut  string
		balance float64 // alice's after
	}{
		{"bad usage", []string{"api"}, exitError, "", "want RULE KEY", 0},
		{"unknown rule", []string{"nope", "alice"}, exitError, "", `no rule "nope"`, 0},
		// The CLI sends the Sluice-Admin header the daemon requires of a DELETE.
		{"reset", []string{"api", "alice"}, exitOK, `reset api "alice" on ` + n.d.Syncer().Self() + " and 0 of 0 other members", "", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := sluice(t, append(append([]string{"reset"}, admin...), tt.args...)...)
			if code != tt.code || !strings.Contains(out, tt.out) || !strings.Contains(errOut, tt.errOut) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errOut, tt.code, tt.out, tt.errOut)
			}
			if b, _ := n.d.Balance("api", "alice"); b != tt.balance {
				t.Fatalf("alice's balance %v, want %v", b, tt.balance)
			}
		})
	}
	n.take(t, "api", "alice", 1)
	code, out, _ := sluice(t, append(append([]string{"reset", "--json"}, admin...), "api", "alice")...)
	var v adminapi.ResetView
	if err := json.Unmarshal([]byte(out), &v); code != exitOK || err != nil || v.Rule != "api" || v.Key != "alice" || !v.Clustered || v.At.IsZero() {
		t.Fatalf("reset --json: exit %d %v %s", code, err, out)
	}
}
