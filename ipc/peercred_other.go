//go:build !linux

package ipc

import "net"

func readPeerCred(net.Conn) (peerCred, error) { return peerCred{}, ErrPeerCredUnsupported }
