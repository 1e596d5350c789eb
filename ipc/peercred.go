package ipc

import (
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/sluicelabs/sluice/internal/localsocket"
)

// ErrPeerCredUnsupported is returned by Serve when AllowUIDs or AllowGIDs is
// set on a system where the server cannot read a peer's credentials.
var ErrPeerCredUnsupported = localsocket.ErrPeerCredUnsupported

// PeerCredSupported reports whether ServerConfig.AllowUIDs and AllowGIDs can
// be enforced on this system.
const PeerCredSupported = localsocket.PeerCredSupported

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

// maxLingering bounds the refused connections kept open at once to let
// their clients read the ERROR; beyond it a refused connection is closed as
// soon as the ERROR is written.
const maxLingering = 64

// peerOf reads the peer's credentials for attribution in logs.
func peerOf(c net.Conn) (peerCred, bool) {
	if !PeerCredSupported {
		return peerCred{}, false
	}
	p, err := readPeerCred(c)
	return p, err == nil
}

// admitPeer checks a new connection's peer against the allow-lists, before
// the connection counts against MaxConns. A refused peer (or one whose
// credentials cannot be read) is sent an ERROR CodePeerRefused and closed,
// after lingering in a bounded set so its client can read it; false tells
// the caller the connection is taken care of.
func (s *Server) admitPeer(c net.Conn) bool {
	p, err := readPeerCred(c)
	var msg string
	switch {
	case err != nil:
		s.warn(causePeerRefused, "connection refused: peer credentials unreadable", "error", err)
		msg = fmt.Sprintf("peer credentials unreadable: %v", err)
	case s.cfg.allows(p):
		return true
	default:
		s.warn(causePeerRefused, "connection refused: peer not allowed", "pid", p.PID, "uid", p.UID, "gid", p.GID)
		msg = fmt.Sprintf("uid %d gid %d not allowed", p.UID, p.GID)
	}
	s.stats.Accepted.Add(1)
	s.stats.PeersRefused.Add(1)
	// A fresh socket's send buffer is empty: this write does not wait.
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.Write(AppendError(nil, &Error{Code: CodePeerRefused, Message: msg})); err != nil {
		c.Close()
		return false
	}
	// Half-close and bound the linger before Shutdown can see the
	// connection, so Shutdown's deadline (now) is the one that holds.
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(min(s.cfg.HandshakeTimeout, refusedLinger)))
	s.mu.Lock()
	if s.closing || len(s.lingering) >= maxLingering {
		s.mu.Unlock()
		c.Close()
		return false
	}
	s.lingering[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		// Discard what the client sends until it closes or the deadline
		// passes: a client that writes HELLO before it reads (as all do)
		// thus reads the ERROR instead of failing its write on a socket
		// already closed.
		io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		c.Close()
		s.mu.Lock()
		delete(s.lingering, c)
		s.mu.Unlock()
	}()
	return false
}
