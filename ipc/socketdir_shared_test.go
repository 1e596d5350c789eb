//go:build unix

package ipc

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// With SharedVolume, only the socket directory's immediate parent may be
// world-writable without the sticky bit; the socket directory itself and
// further ancestors are checked as before.
func TestCheckSocketDirInSharedVolume(t *testing.T) {
	uid := os.Geteuid()
	tests := []struct {
		name             string
		dirMode, upMode  fs.FileMode
		topMode          fs.FileMode // the parent's parent
		shared, accepted bool
	}{
		{"an emptyDir (2777) refused by default", 0o750, 0o777 | fs.ModeSetgid, 0o755, false, false},
		{"an emptyDir (2777) accepted as a pod volume", 0o750, 0o777 | fs.ModeSetgid, 0o755, true, true},
		{"an emptyDir without fsGroup (0777)", 0o750, 0o777, 0o755, true, true},
		{"the socket directory itself group-writable", 0o770, 0o777, 0o755, true, false},
		{"a world-writable grandparent is not the volume", 0o750, 0o755, 0o777, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			top := filepath.Join(shortDir(t), "top")
			up := filepath.Join(top, "vol")
			dir := filepath.Join(up, "sock")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			os.Chmod(dir, tt.dirMode)
			os.Chmod(up, tt.upMode)
			os.Chmod(top, tt.topMode)
			defer os.Chmod(top, 0o700)
			err := checkSocketDirIn(dir, uid, tt.shared)
			if tt.accepted && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.accepted && !errors.Is(err, ErrUnsafeSocketDir) {
				t.Fatalf("err = %v, want ErrUnsafeSocketDir", err)
			}
		})
	}
}
