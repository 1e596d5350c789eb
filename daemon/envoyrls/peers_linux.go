//go:build linux

package envoyrls

import (
	"fmt"
	"math"
	"net"
	"syscall"
)

const peerCheckSupported = true

// peerIDs reads SO_PEERCRED on c's own descriptor.
func peerIDs(c net.Conn) (uid, gid uint32, err error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, 0, fmt.Errorf("read peer credentials: %T has no file descriptor", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, 0, fmt.Errorf("read peer credentials: %w", err)
	}
	var uc *syscall.Ucred
	var uerr error
	if err := raw.Control(func(fd uintptr) {
		uc, uerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, fmt.Errorf("read peer credentials: %w", err)
	}
	if uerr != nil {
		return 0, 0, fmt.Errorf("read peer credentials: SO_PEERCRED: %w", uerr)
	}
	if uc.Uid == math.MaxUint32 {
		return 0, 0, fmt.Errorf("read peer credentials: none recorded for this socket")
	}
	return uc.Uid, uc.Gid, nil
}
