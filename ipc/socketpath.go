package ipc

import "github.com/sluicelabs/sluice/internal/localsocket"

// DefaultSocketPath is where the daemon listens and clients connect when not
// told otherwise: $SLUICE_SOCKET if set; else $XDG_RUNTIME_DIR/sluice/sluiced.sock
// when that directory exists; else /run/sluice/sluiced.sock for root; else
// $TMPDIR/sluice-UID/sluiced.sock, which any unprivileged user can create.
// Listen creates the socket's directory 0750 (a private subdirectory even
// under a shared, sticky $TMPDIR) and refuses one another user owns or may
// write to, so a user who made $TMPDIR/sluice-UID first cannot stand in for
// the daemon: the daemon then exits with ErrUnsafeSocketDir naming the path.
func DefaultSocketPath() string { return localsocket.DefaultPath() }
