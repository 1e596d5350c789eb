package gossiptest

import (
	"net"
	"testing"
)

// FreePort is a loopback port free for both TCP and UDP at the time of the
// call, for a gossip listener (memberlist binds both on one port).
func FreePort(t testing.TB) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", l.Addr().String())
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no loopback port free for both TCP and UDP in 50 tries")
	return 0
}
