//go:build !linux

package envoyrls

import "net"

const peerCheckSupported = false

func peerIDs(net.Conn) (uid, gid uint32, err error) { return 0, 0, ErrPeerCheckUnsupported }
