package clientlib

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The first call to an unreachable socket already fails with an error that
// names the path, the cause and the fix; the log says so once, however many
// calls follow; every undecided call is counted by cause and logged at most
// once per interval.
func TestFirstFailureNamesThePathAndTheCause(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	os.WriteFile(file, nil, 0o600)
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close() // the file stays; nobody listens
	tests := []struct {
		name, path, cause string
		is                error
	}{
		{"no such file", filepath.Join(dir, "none.sock"), "no such file", fs.ErrNotExist},
		{"no such directory", filepath.Join(dir, "gone", "d.sock"), "no such directory", fs.ErrNotExist},
		{"not a socket", file, "not a socket", ErrDaemonDown},
		{"stale socket", stale, "connection refused", ErrDaemonDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &lineRecorder{}
			c := openClient(t, Options{SocketPath: tt.path, Log: rec.log, LogInterval: time.Hour, ReconnectMin: time.Millisecond, ReconnectMax: 5 * time.Millisecond})
			var first Decision
			// The stale socket is only found out by dialling.
			eventually(t, "a call fails with the reason", func() bool {
				first = c.Allow(context.Background(), "api", "k")
				var re *ReachError
				return errors.As(first.Err, &re) && re.Cause != "not connected yet"
			})
			var re *ReachError
			errors.As(first.Err, &re)
			want := fmt.Sprintf("sluice: cannot reach sluiced at %s: %s", tt.path, tt.cause)
			if !first.Allowed || !first.FailedOpen || !strings.HasPrefix(first.Err.Error(), want) || re.Fix == "" ||
				!errors.Is(first.Err, tt.is) || !errors.Is(first.Err, ErrDaemonDown) {
				t.Fatalf("first call: %+v\nwant an error starting %q, wrapping %v, with a fix", first, want, tt.is)
			}
			for range 100 {
				c.Allow(context.Background(), "api", "k")
			}
			// Let the reconnect loop fail a few more times: still one line.
			n := c.Stats().FailedOpen
			eventually(t, "more calls fail", func() bool { c.Allow(context.Background(), "api", "k"); return c.Stats().FailedOpen > n+20 })
			reach, failOpen := 0, 0
			rec.mu.Lock()
			for _, l := range rec.lines {
				switch {
				case strings.HasPrefix(l["msg"].(string), "sluice: cannot reach sluiced"):
					reach++
					if l["path"] != tt.path || !strings.Contains(fmt.Sprint(l["error"]), tt.cause) {
						t.Errorf("reach line %v", l)
					}
				case strings.Contains(l["msg"].(string), "failing open"):
					failOpen++
				}
			}
			rec.mu.Unlock()
			if reach != 1 || failOpen != 1 {
				t.Fatalf("%d reach lines and %d fail-open lines, want 1 and 1: %v", reach, failOpen, rec.lines)
			}
			if got := c.FailOpens().Total(CauseDaemonDown); got != c.Stats().FailedOpen {
				t.Fatalf("daemon_down total %d, failed open %d", got, c.Stats().FailedOpen)
			}
		})
	}
}

// Permissions are read as the kernel would apply them to another user.
func TestPermissionProblemsAreExplained(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("makes files owned by root for another identity to look at")
	}
	dir, err := os.MkdirTemp("", "perm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	closed := filepath.Join(dir, "closed")
	os.Mkdir(closed, 0o700)
	group := filepath.Join(dir, "group") // as systemd's RuntimeDirectory= with a Group=
	os.Mkdir(group, 0o750)
	sock := filepath.Join(dir, "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.Chmod(sock, 0o660)
	other := identity{uid: 1000, gids: []uint32{1000, 27}}
	tests := []struct {
		name, path string
		as         identity
		want       []string // in the error, in order
	}{
		{"socket not writable", sock, other, []string{"permission denied", "the socket is mode 0660 owned by uid 0 gid 0", "runs as uid 1000 gids [1000 27]", "add this user to group 0", "--socket-mode 0666", "--allow-uid 1000"}},
		{"directory not searchable", filepath.Join(closed, "d.sock"), other, []string{"permission denied", "the directory " + closed + " is mode 0700 owned by uid 0 gid 0", "cannot search it", "chmod o+x " + closed}},
		{"directory its group may search", filepath.Join(group, "d.sock"), other, []string{"permission denied", "the directory " + group + " is mode 0750 owned by uid 0 gid 0", "cannot search it", "add this user to group 0 (the directory's group, which may search it)"}},
		{"in the socket's group", sock, identity{uid: 1000, gids: []uint32{1000, 0}}, nil},
		{"root", sock, identity{uid: 0, gids: []uint32{0}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			re := examinePathAs(tt.as, tt.path, "set by Options.SocketPath")
			if tt.want == nil {
				if re != nil {
					t.Fatalf("found a problem: %v", re)
				}
				return
			}
			if re == nil {
				t.Fatal("no problem found")
			}
			msg := re.Error()
			rest := msg
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("%q\ndoes not say %q (in order)", msg, w)
				}
				rest = rest[i+len(w):]
			}
			if !errors.Is(re, fs.ErrPermission) || !strings.Contains(msg, tt.path) {
				t.Fatalf("%q: want the path named and fs.ErrPermission wrapped", msg)
			}
		})
	}
}

func TestSocketPathChoiceAgreesWithTheDefault(t *testing.T) {
	for _, env := range []map[string]string{
		{"SLUICE_SOCKET": "/x/y.sock"},
		{"SLUICE_SOCKET": "", "XDG_RUNTIME_DIR": t.TempDir()},
		{"SLUICE_SOCKET": "", "XDG_RUNTIME_DIR": ""},
	} {
		for k, v := range env {
			t.Setenv(k, v)
		}
		path, why := SocketPathChoice()
		c := New(Options{Log: quiet})
		got, gotWhy := c.SocketPath()
		c.Close()
		if path == "" || why == "" || got != path || gotWhy != why {
			t.Fatalf("env %v: choice %q (%s), client %q (%s)", env, path, why, got, gotWhy)
		}
	}
}
