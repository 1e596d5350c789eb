//go:build !linux

package clientlib

import (
	"errors"
	"net"
)

// peerCredSupported is false here: this system offers no SO_PEERCRED, so
// the daemon's credentials are not checked and Options.DaemonUIDs has no
// effect. (BSD's LOCAL_PEERCRED and macOS's getpeereid could serve; they are
// not wired in.)
const peerCredSupported = false

func readPeerCred(net.Conn) (PeerCred, error) {
	return PeerCred{}, errors.New("read daemon credentials: not supported on this system")
}
