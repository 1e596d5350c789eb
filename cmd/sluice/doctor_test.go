package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/clientlib"
)

func TestDoctorExplainsEachStep(t *testing.T) {
	sock := startDaemon(t)
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777) // past the umask
	me := os.Geteuid()
	tests := []struct {
		name string
		args []string
		code int
		want []string // in order
	}{
		{"reachable", []string{"--socket", sock}, exitOK, []string{
			"this process: uid ", "[ok  ] path: " + sock + " (set by --socket)", "[ok  ] directory /:", "[ok  ] socket: mode 0",
			"[ok  ] connect", fmt.Sprintf("[ok  ] daemon credentials: pid %d uid %d", os.Getpid(), me), "[ok  ] handshake: protocol version",
			"reachable: sluiced at " + sock}},
		{"no socket", []string{"--socket", filepath.Join(dir, "none.sock")}, exitError, []string{
			"[FAIL] socket: does not exist", "fix: start sluiced", "NOT REACHABLE: cannot reach sluiced at " + filepath.Join(dir, "none.sock") + ": no such file"}},
		{"no directory", []string{"--socket", filepath.Join(dir, "gone", "d.sock")}, exitError, []string{
			"[FAIL] directory " + filepath.Join(dir, "gone"), "fix: ", "NOT REACHABLE"}},
		{"stale socket", []string{"--socket", stale}, exitError, []string{
			"[ok  ] socket:", "[FAIL] connect: connection refused: a socket file is there but no process listens", "fix: sluiced is not running"}},
		{"untrusted daemon", []string{"--socket", sock, "--daemon-uids", fmt.Sprint(me + 1)}, exitError, []string{
			"[ok  ] connect", fmt.Sprintf("[FAIL] daemon credentials: pid %d uid %d", os.Getpid(), me), fmt.Sprintf("trusted daemon uids: %d", me+1),
			"fix: another local user may be impersonating sluiced", "NOT REACHABLE"}},
		{"bad uid list", []string{"--socket", sock, "--daemon-uids", "root"}, exitError, []string{"--daemon-uids"}},
		{"world-writable directory", []string{"--socket", filepath.Join(open, "none.sock")}, exitError, []string{
			"[ok  ] directory " + open + ": mode 0777", "note: every user may create files here and replace the socket (no sticky bit)", "[FAIL] socket: does not exist"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !clientlib.PeerCredChecked && strings.Contains(tt.name, "untrusted") {
				t.Skip("no SO_PEERCRED here")
			}
			var out, errOut bytes.Buffer
			code := run(append([]string{"sluice", "doctor"}, tt.args...), &out, &errOut)
			all := out.String() + errOut.String()
			rest := all
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("exit %d, output:\n%s\ndoes not say %q (in order)", code, all, w)
				}
				rest = rest[i+len(w):]
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tt.code, all)
			}
		})
	}
}

// sluice check names the path and the cause when it cannot reach the socket.
func TestCheckNamesPathAndCause(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.sock")
	var out, errOut bytes.Buffer
	code := run([]string{"sluice", "check", "--socket", missing, "r", "k"}, &out, &errOut)
	want := "error: sluice: cannot reach sluiced at " + missing + ": no such file"
	if code != exitError || !strings.Contains(errOut.String(), want) || !strings.Contains(errOut.String(), "sluice doctor") {
		t.Fatalf("exit %d, stderr %q; want %q and a pointer to sluice doctor", code, errOut.String(), want)
	}
}
