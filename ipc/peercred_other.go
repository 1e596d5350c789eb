//go:build !linux

package ipc

import "net"

// PeerCredSupported reports whether ServerConfig.AllowUIDs and AllowGIDs can
// be enforced on this system.
const PeerCredSupported = false

func readPeerCred(net.Conn) (peerCred, error) { return peerCred{}, ErrPeerCredUnsupported }
