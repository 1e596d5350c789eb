package ipc

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// ErrPeerCredUnsupported is returned by Serve when AllowUIDs or AllowGIDs is
// set on a system where the server cannot read a peer's credentials.
var ErrPeerCredUnsupported = errors.New("peer credential checks need Linux")

// peerCred is what the kernel recorded about the process at the other end of
// a Unix socket when it connected.
type peerCred struct {
	PID      int32
	UID, GID uint32
}

// checksPeers reports whether connections are checked against an allow-list.
func (cfg *ServerConfig) checksPeers() bool { return len(cfg.AllowUIDs) > 0 || len(cfg.AllowGIDs) > 0 }

// allows reports whether the allow-lists admit p.
func (cfg *ServerConfig) allows(p peerCred) bool {
	return slices.Contains(cfg.AllowUIDs, p.UID) || slices.Contains(cfg.AllowGIDs, p.GID)
}

// refusedLinger bounds how long a refused connection is kept open so that
// its client can read the ERROR.
const refusedLinger = time.Second

// admitPeer checks the peer against the allow-lists. A refused peer (or one
// whose credentials cannot be read) is sent an ERROR CodePeerRefused, and
// false tells the caller to close the connection.
func (sc *serverConn) admitPeer() bool {
	p, err := readPeerCred(sc.conn)
	var msg string
	switch {
	case err != nil:
		sc.s.cfg.Logger.Warn("connection refused: peer credentials unreadable", "error", err)
		msg = fmt.Sprintf("peer credentials unreadable: %v", err)
	case sc.s.cfg.allows(p):
		return true
	default:
		sc.s.cfg.Logger.Warn("connection refused: peer not allowed", "pid", p.PID, "uid", p.UID, "gid", p.GID)
		msg = fmt.Sprintf("uid %d gid %d not allowed", p.UID, p.GID)
	}
	sc.s.stats.PeersRefused.Add(1)
	sc.out = AppendError(sc.out, &Error{Code: CodePeerRefused, Message: msg})
	if sc.flush() == nil {
		sc.linger()
	}
	return false
}

// linger half-closes the connection and discards what the client sends until
// it closes, for at most refusedLinger. A client that writes HELLO before it
// reads (as all do) thus reads the ERROR instead of failing its write on a
// socket already closed.
func (sc *serverConn) linger() {
	if cw, ok := sc.conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	sc.conn.SetReadDeadline(time.Now().Add(min(sc.s.cfg.HandshakeTimeout, refusedLinger)))
	if sc.stopping.Load() { // Shutdown: do not wait
		sc.conn.SetReadDeadline(time.Now())
	}
	io.Copy(io.Discard, io.LimitReader(sc.conn, 64<<10))
}
