//go:build !linux

package localsocket

// PeerCredSupported reports whether this platform can read the credentials
// of a Unix socket's peer (SO_PEERCRED).
const PeerCredSupported = false
