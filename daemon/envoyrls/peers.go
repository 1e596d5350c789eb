package envoyrls

import (
	"errors"
	"net"
	"slices"
)

// ErrPeerCheckUnsupported refuses allow-lists where they cannot be enforced:
// on a TCP listener (no peer credentials: any local user can connect), or
// on a system whose Unix sockets do not report them.
var ErrPeerCheckUnsupported = errors.New("--allow-uid/--allow-gid can only be enforced on a unix: listener on Linux")

// peerListener admits a Unix socket connection only when its peer's uid is
// in uids or its primary gid in gids (read with SO_PEERCRED, as the daemon's
// own socket does); others, and peers whose credentials cannot be read, are
// closed at once, before gRPC reads a byte.
type peerListener struct {
	net.Listener
	uids, gids []uint32
	refused    func(err error, uid, gid uint32)
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, gid, err := peerIDs(c)
		if err == nil && (slices.Contains(l.uids, uid) || slices.Contains(l.gids, gid)) {
			return c, nil
		}
		c.Close()
		if l.refused != nil {
			l.refused(err, uid, gid)
		}
	}
}
