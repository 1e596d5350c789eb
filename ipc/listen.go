package ipc

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// ErrSocketInUse is returned by Listen when a live daemon already serves the path.
var ErrSocketInUse = errors.New("socket in use by a running daemon")

// maxSocketPath is the longest path a Unix socket address holds on Linux
// (sun_path is 108 bytes, one of them the terminating NUL).
const maxSocketPath = 107

// Listen opens the Unix socket at path with the given permission bits.
//
// A socket file left behind by a daemon that died is replaced; a path on which
// a daemon still answers is refused with ErrSocketInUse; a path holding
// anything other than a socket is never removed. The socket is created under a
// temporary name, given its permissions, then renamed into place, so there is
// no moment at which it is reachable with looser permissions. A missing
// socket directory is created 0750 (its missing parents 0755). A directory
// another local user could use to replace the socket is refused with
// ErrUnsafeSocketDir before anything is made in it (see checkSocketDir):
// it must be owned by the daemon's user or root and writable by no one
// else, and its ancestors may be writable by others only if sticky. Closing the listener does not remove the
// file: the Server removes it on shutdown, and only if it is still its own.
// A path too long for a socket address is refused before anything is made.
func Listen(path string, mode fs.FileMode) (*net.UnixListener, error) {
	return ListenWith(path, mode, ListenOptions{})
}

// ListenOptions adjust Listen.
type ListenOptions struct {
	// SharedVolume says the socket directory's parent is a volume only the
	// containers of one pod mount (a Kubernetes emptyDir, which is
	// world-writable and not sticky): it is accepted, and the socket
	// directory made inside it must still be the daemon's own (see
	// checkSocketDirIn).
	SharedVolume bool
}

// ListenWith is Listen with options.
func ListenWith(path string, mode fs.FileMode, o ListenOptions) (*net.UnixListener, error) {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+strconv.Itoa(os.Getpid()))
	if len(tmp) > maxSocketPath {
		return nil, fmt.Errorf("listen %s: path too long: a Unix socket address holds %d bytes, and this path (with the temporary name it is created under) needs %d; choose a shorter --socket",
			path, maxSocketPath, len(tmp))
	}
	if err := makeSocketDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("listen %s: create directory: %w", path, err)
	}
	if err := checkSocketDirIn(filepath.Dir(path), os.Geteuid(), o.SharedVolume); err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("listen %s: path exists and is not a socket; refusing to replace it", path)
		}
		if c, err := net.DialTimeout("unix", path, 500*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen %s: %w (stop it, or choose another --socket)", path, ErrSocketInUse)
		}
		// Nobody answers: a stale socket from a daemon that did not clean up.
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("listen %s: remove stale socket: %w", path, err)
		}
	}
	_ = os.Remove(tmp)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, mode); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("listen %s: set permissions %o: %w", path, mode, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return l, nil
}
