//go:build linux

package ipc

import (
	"fmt"
	"math"
	"net"
	"syscall"
)

// readPeerCred reads SO_PEERCRED on c's own descriptor (no duplication).
func readPeerCred(c net.Conn) (peerCred, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peerCred{}, fmt.Errorf("read peer credentials: %T has no file descriptor", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return peerCred{}, fmt.Errorf("read peer credentials: %w", err)
	}
	var uc *syscall.Ucred
	var uerr error
	if err := raw.Control(func(fd uintptr) {
		uc, uerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return peerCred{}, fmt.Errorf("read peer credentials: %w", err)
	}
	if uerr != nil {
		return peerCred{}, fmt.Errorf("read peer credentials: SO_PEERCRED: %w", uerr)
	}
	if uc.Uid == math.MaxUint32 { // the kernel's "no credentials": not a Unix socket peer
		return peerCred{}, fmt.Errorf("read peer credentials: none recorded for this socket")
	}
	return peerCred{PID: uc.Pid, UID: uc.Uid, GID: uc.Gid}, nil
}
