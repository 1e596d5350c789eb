//go:build linux

package clientlib

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// A socket served by a process whose uid is not trusted is refused before
// anything is sent: calls fail open, counted as untrusted_daemon, and the
// log names the path, the uid found and the uids expected.
func TestUntrustedDaemonIsRefused(t *testing.T) {
	path := socketPath(t)
	d := startDaemon(t, path) // runs as this process's uid
	me := uint32(os.Geteuid())
	trusted := []uint32{me + 1, me + 2}
	rec := &lineRecorder{}
	c := openClient(t, Options{SocketPath: path, DaemonUIDs: trusted, Log: rec.log, LogInterval: time.Hour, ReconnectMin: time.Millisecond, ReconnectMax: 5 * time.Millisecond})
	var got Decision
	eventually(t, "a call fails as untrusted", func() bool {
		got = c.Allow(context.Background(), "api", "k")
		return errors.Is(got.Err, ErrUntrustedDaemon)
	})
	want := fmt.Sprintf("sluice: cannot reach sluiced at %s: served by an untrusted process (the socket is served by pid %d running as uid %d gid %d; trusted daemon uids are %d, %d",
		path, os.Getpid(), me, os.Getegid(), me+1, me+2)
	if !got.Allowed || !got.FailedOpen || !strings.HasPrefix(got.Err.Error(), want) {
		t.Fatalf("got %+v\nwant an error starting %q", got, want)
	}
	if c.Up() || c.Stats().Untrusted == 0 || c.FailOpens().Total(CauseUntrusted) == 0 {
		t.Fatalf("up %v, stats %+v, totals %v", c.Up(), c.Stats(), c.FailOpens().Totals())
	}
	if n := d.srv.Stats().Requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the untrusted socket", n)
	}
	if _, err := Dial(context.Background(), Options{SocketPath: path, DaemonUIDs: trusted, Log: quiet}); !errors.Is(err, ErrUntrustedDaemon) {
		t.Fatalf("Dial: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, l := range rec.lines {
		if strings.HasPrefix(l["msg"].(string), "sluice: cannot reach") && l["path"] == path && strings.Contains(fmt.Sprint(l["error"]), want) {
			return
		}
	}
	t.Fatalf("no reach line naming the path and uids in %v", rec.lines)
}

// By default the daemon may be root or this process's own user; so may any
// uid listed in $SLUICE_DAEMON_UIDS.
func TestDefaultTrustedDaemonUIDs(t *testing.T) {
	me := uint32(os.Geteuid())
	t.Setenv(DaemonUIDsEnv, "")
	uids, err := defaultDaemonUIDs()
	if err != nil || uids[0] != 0 || uids[len(uids)-1] != me {
		t.Fatalf("default %v %v", uids, err)
	}
	t.Setenv(DaemonUIDsEnv, "998, 0")
	if uids, err := defaultDaemonUIDs(); err != nil || fmt.Sprint(uids) != "[998 0]" {
		t.Fatalf("from env: %v %v", uids, err)
	}
	t.Setenv(DaemonUIDsEnv, "root")
	if _, err := defaultDaemonUIDs(); err == nil {
		t.Fatal("a name was accepted as a uid")
	}
	path := socketPath(t)
	startDaemon(t, path)
	t.Setenv(DaemonUIDsEnv, "")
	c, err := Dial(context.Background(), Options{SocketPath: path, Timeout: generous, Log: quiet})
	if err != nil {
		t.Fatalf("a daemon of this process's own uid was refused: %v", err)
	}
	c.Close()
}
