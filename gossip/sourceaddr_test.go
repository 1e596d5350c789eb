package gossip

import (
	"io"
	"log"
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestSourceOOB(t *testing.T) {
	any4, lo := netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("127.0.0.1")
	for _, tt := range []struct {
		name      string
		bind, adv netip.Addr
		want      bool
	}{
		{"bound to one address: its own", lo, netip.MustParseAddr("127.0.0.2"), false},
		{"every interface, IPv4 advertised", any4, netip.MustParseAddr("127.0.0.2"), true},
		{"every interface, IPv6 advertised", netip.IPv6Unspecified(), netip.MustParseAddr("::1"), true},
		{"every interface, nothing advertised", any4, netip.Addr{}, false},
		{"every interface, unspecified advertised", any4, any4, false},
	} {
		if got := sourceOOB(tt.bind, tt.adv) != nil; got != tt.want {
			t.Errorf("%s: control message %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A node bound to every interface sends from its advertised address; when
// that is not this host's (a NAT's), the kernel refuses it and packets leave
// from the route's address instead, once warned about: they still arrive.
func TestTransportSendsFromTheAdvertisedAddress(t *testing.T) {
	recv, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	for _, tt := range []struct {
		adv, from string
	}{{"127.0.0.2", "127.0.0.2"}, {"192.0.2.1", "127.0.0.1"}} { // 192.0.2.1: TEST-NET-1, not this host's
		tr, err := newTransport("0.0.0.0", 0, log.New(io.Discard, "", 0), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := tr.FinalAdvertiseAddr(tt.adv, tr.Port()); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.WriteTo([]byte("x"), recv.LocalAddr().String()); err != nil {
			t.Fatalf("advertising %s: %v", tt.adv, err)
		}
		recv.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 16)
		_, from, err := recv.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("advertising %s: %v", tt.adv, err)
		}
		if from.Addr().Unmap().String() != tt.from || int(from.Port()) != tr.Port() {
			t.Errorf("advertising %s: the packet came from %v, want %s:%d", tt.adv, from, tt.from, tr.Port())
		}
		tr.Shutdown()
	}
}
