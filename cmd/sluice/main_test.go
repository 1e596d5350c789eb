package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/daemon/daemontest"
)

func startDaemon(t *testing.T) string {
	t.Helper()
	return daemontest.Start(t, "unknown_rule: deny\nrules:\n  two:\n    rate: 2/1h\n").SocketPath()
}

func TestCheckExitCodesAndOutput(t *testing.T) {
	sock := startDaemon(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"admitted", []string{"check", "two", "k"}, exitAdmitted, "admitted (ok): limit 2, remaining 1"},
		{"admitted json", []string{"check", "--json", "two", "k"}, exitAdmitted, `"remaining":0`},
		{"throttled", []string{"check", "two", "k"}, exitThrottled, "throttled (over_limit): limit 2, retry after "},
		{"throttled json", []string{"check", "--json", "two", "k"}, exitThrottled, `"status":"over_limit"`},
		{"unknown rule denied", []string{"check", "nope", "k"}, exitThrottled, "unknown_rule"},
		{"cost above burst", []string{"check", "--cost", "3", "two", "other"}, exitError, "cost out of range"},
		{"missing args", []string{"check", "two"}, exitError, "want RULE KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"sluice", tt.args[0], "--socket", sock}, tt.args[1:]...)
			code := run(args, &out, &errOut)
			all := out.String() + errOut.String()
			if code != tt.code || !strings.Contains(all, tt.contains) {
				t.Fatalf("exit %d, output %q; want exit %d containing %q", code, all, tt.code, tt.contains)
			}
		})
	}
}

func TestCheckWithoutDaemonIsAnError(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"sluice", "check", "--socket", filepath.Join(t.TempDir(), "none.sock"), "--json", "r", "k"}, &out, &errOut)
	var got checkOutput
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("--json output %q: %v", out.String(), err)
	}
	if code != exitError || got.Allowed || got.Status != "error" || !strings.Contains(got.Error, "none.sock") {
		t.Fatalf("exit %d, %+v", code, got)
	}
}
