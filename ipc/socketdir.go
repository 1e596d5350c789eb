package ipc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrUnsafeSocketDir is wrapped by Listen's error when the socket's
// directory, or one of its ancestors, could let another local user replace
// the socket (and so answer the daemon's clients in its place).
var ErrUnsafeSocketDir = errors.New("unsafe socket directory")

// socketDirMode is the mode Listen creates a missing socket directory with:
// the daemon's group may reach the socket (whose own mode says who may
// connect), no one else may even list the directory, and only the daemon's
// user may create or remove names in it.
const socketDirMode = 0o750

// makeSocketDir creates dir (socketDirMode) and its missing parents (0755).
func makeSocketDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, socketDirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// checkSocketDir refuses a socket directory another local user could use to
// swap the socket: the directory itself must be owned by the daemon's user
// (or root) and writable by no one else (no group or other write bit, sticky
// or not: in a sticky directory another user can still take the socket's
// name first); every ancestor must be owned by the user or root and, if
// others may write to it, sticky (so they cannot rename the directory
// away). uid is the daemon's effective uid. Symbolic links are resolved.
func checkSocketDir(dir string, uid int) error { return checkSocketDirIn(dir, uid, false) }

// checkSocketDirIn is checkSocketDir; with sharedVolume, the socket
// directory's parent (a volume only the containers of one pod mount, such
// as a Kubernetes emptyDir: mode 0777, or 2777 with an fsGroup) may be
// writable by others without the sticky bit. Only the containers that mount
// the volume can write to it, and they are the socket's own clients, who
// gain nothing by moving the daemon's directory away. The socket
// directory itself must still be the daemon's (or root's) and writable by
// no one else, so a directory another container made first is refused.
func checkSocketDirIn(dir string, uid int, sharedVolume bool) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("resolve socket directory %s: %w", dir, err)
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return fmt.Errorf("resolve socket directory %s: %w", dir, err)
	}
	volume := filepath.Dir(real)
	for p, first := real, true; ; p, first = filepath.Dir(p), false {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("check socket directory %s: %w", p, err)
		}
		owner, ok := fileOwner(st)
		if !ok {
			return nil // no owners on this system: nothing to check
		}
		mode := st.Mode()
		what := "socket directory"
		if !first {
			what = "ancestor of the socket directory"
		}
		switch {
		case owner != uint32(uid) && owner != 0:
			return fmt.Errorf("%w: %s %s is owned by uid %d, not by this daemon's user (uid %d) or root; use a directory of your own (--socket)",
				ErrUnsafeSocketDir, what, p, owner, uid)
		case first && mode.Perm()&0o022 != 0:
			return fmt.Errorf("%w: socket directory %s (mode %04o) is writable by users other than its owner, who could replace the socket; run chmod go-w %s, or choose another --socket",
				ErrUnsafeSocketDir, p, mode.Perm(), p)
		case !first && mode.Perm()&0o022 != 0 && mode&fs.ModeSticky == 0 && !(sharedVolume && p == volume):
			return fmt.Errorf("%w: ancestor of the socket directory %s (mode %04o) is writable by others and not sticky, so they could move the socket directory away; choose another --socket "+
				"(or, if %s is a volume only this pod's containers mount, such as a Kubernetes emptyDir, pass --socket-shared-volume)",
				ErrUnsafeSocketDir, p, mode.Perm(), p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}
