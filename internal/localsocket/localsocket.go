// Package localsocket holds the facts about sluiced's Unix socket that the
// daemon's settings, the protocol server and clients all need: where the
// socket is when nobody says, and whether this platform can tell who is at
// the other end of it. It imports only the standard library, so config can
// use it without depending on the protocol package.
package localsocket

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
)

// DefaultPath is where the daemon listens and clients connect when not told
// otherwise: $SLUICE_SOCKET if set; else $XDG_RUNTIME_DIR/sluice/sluiced.sock
// when that directory exists; else /run/sluice/sluiced.sock for root; else
// $TMPDIR/sluice-UID/sluiced.sock, which any unprivileged user can create.
func DefaultPath() string {
	if p := os.Getenv("SLUICE_SOCKET"); p != "" {
		return p
	}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return filepath.Join(dir, "sluice", "sluiced.sock")
		}
	}
	uid := os.Getuid()
	if uid == 0 {
		return "/run/sluice/sluiced.sock"
	}
	return filepath.Join(os.TempDir(), "sluice-"+strconv.Itoa(uid), "sluiced.sock")
}

// ErrPeerCredUnsupported reports a peer credential check asked for on a
// platform that cannot make it.
var ErrPeerCredUnsupported = errors.New("peer credential checks need Linux")
