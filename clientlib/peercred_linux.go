//go:build linux

package clientlib

import (
	"fmt"
	"math"
	"net"
	"syscall"
)

// peerCredSupported reports whether the daemon's credentials can be read,
// and so whether Options.DaemonUIDs is enforced.
const peerCredSupported = true

// readPeerCred reads SO_PEERCRED on c: for the client end of a Unix socket,
// the credentials of the process that made the listening socket, as the
// kernel recorded them (they cannot be forged by the peer).
func readPeerCred(c net.Conn) (PeerCred, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return PeerCred{}, fmt.Errorf("read daemon credentials: %T has no file descriptor", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return PeerCred{}, fmt.Errorf("read daemon credentials: %w", err)
	}
	var uc *syscall.Ucred
	var uerr error
	if err := raw.Control(func(fd uintptr) {
		uc, uerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return PeerCred{}, fmt.Errorf("read daemon credentials: %w", err)
	}
	if uerr != nil {
		return PeerCred{}, fmt.Errorf("read daemon credentials: SO_PEERCRED: %w", uerr)
	}
	if uc.Uid == math.MaxUint32 {
		return PeerCred{}, fmt.Errorf("read daemon credentials: none recorded for this socket")
	}
	return PeerCred{PID: uc.Pid, UID: uc.Uid, GID: uc.Gid}, nil
}
