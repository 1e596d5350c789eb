//go:build unix

package ipc

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckSocketDirRefusesDirectoriesOthersCanWrite(t *testing.T) {
	uid := os.Geteuid()
	tests := []struct {
		name      string
		dirMode   fs.FileMode // the socket's directory
		upMode    fs.FileMode // its parent
		asUID     int         // the daemon's uid as the check sees it
		wantError string      // empty: accepted
	}{
		{"private directory", 0o700, 0o700, uid, ""},
		{"group may list", 0o750, 0o755, uid, ""},
		{"group may write", 0o770, 0o700, uid, "writable by users other than its owner"},
		{"anyone may write", 0o777, 0o700, uid, "writable by users other than its owner"},
		{"sticky and world-writable, as /tmp", 0o777 | fs.ModeSticky, 0o700, uid, "writable by users other than its owner"},
		{"parent world-writable, not sticky", 0o700, 0o777, uid, "writable by others and not sticky"},
		{"parent world-writable and sticky", 0o700, 0o777 | fs.ModeSticky, uid, ""},
		{"owned by another user", 0o700, 0o700, uid + 1, "owned by uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.asUID != uid && uid == 0 {
				t.Skip("as root, every directory made here is root's, which is always trusted")
			}
			up := filepath.Join(shortDir(t), "up")
			dir := filepath.Join(up, "sock")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			os.Chmod(dir, tt.dirMode)
			os.Chmod(up, tt.upMode)
			defer os.Chmod(up, 0o700)
			err := checkSocketDir(dir, tt.asUID)
			switch {
			case tt.wantError == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantError != "" && (!errors.Is(err, ErrUnsafeSocketDir) || !strings.Contains(err.Error(), tt.wantError)):
				t.Fatalf("err = %v, want ErrUnsafeSocketDir saying %q", err, tt.wantError)
			}
		})
	}
}

func TestListenCreatesAPrivateSocketDirAndRefusesAnOpenOne(t *testing.T) {
	base := shortDir(t)
	path := filepath.Join(base, "made", "s.sock")
	l, err := Listen(path, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	st, err := os.Stat(filepath.Dir(path))
	if err != nil || st.Mode().Perm()&0o027 != 0 {
		t.Fatalf("created socket directory mode %v (%v), want no group write and nothing for others", st.Mode(), err)
	}

	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	if _, err := Listen(filepath.Join(open, "s.sock"), 0o660); !errors.Is(err, ErrUnsafeSocketDir) || !strings.Contains(err.Error(), open) {
		t.Fatalf("Listen in a world-writable directory: %v, want ErrUnsafeSocketDir naming it", err)
	}
	if entries, _ := os.ReadDir(open); len(entries) != 0 {
		t.Fatalf("Listen made %v in a directory it refused", entries)
	}
}
