//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/ipc"
)

// A client whose uid and gid are not allowed (root too, when the tests run as
// root) is refused with CodePeerRefused and the daemon logs who it was.
func TestAllowUIDRefusesOtherUsers(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	sock := filepath.Join(tempDir(t), "d.sock")
	p := startDaemon(t, "--socket", sock, "--admin-addr", "", "--allow-uid", fmt.Sprint(uid+1), "--allow-gid", fmt.Sprint(gid+1))
	eventually(t, "the daemon is serving", func() bool { return strings.Contains(p.stderr.String(), "sluiced serving") })
	_, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sock, Timeout: 5 * time.Second, DialTimeout: 5 * time.Second})
	var e *ipc.Error
	if !errors.As(err, &e) || e.Code != ipc.CodePeerRefused || e.Message != fmt.Sprintf("uid %d gid %d not allowed", uid, gid) {
		t.Fatalf("dial as uid %d: %v, want ERROR code %d", uid, err, ipc.CodePeerRefused)
	}
	eventually(t, "the refusal is logged", func() bool {
		return strings.Contains(p.stderr.String(), fmt.Sprintf("connection refused: peer not allowed: pid=%d uid=%d gid=%d", os.Getpid(), uid, gid))
	})
}
