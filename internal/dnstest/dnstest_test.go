package dnstest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// serve starts s on loopback (UDP and TCP on one port) and returns the
// address; it is closed with the test.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", l.Addr().String())
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	if err := s.Serve(pc, l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return l.Addr().String()
}

// goResolver is Go's own resolver sending every question to addr.
func goResolver(addr string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestServerAnswersFromItsTable(t *testing.T) {
	s := New()
	addr := serve(t, s)
	const name = "sluice-peers.default.svc.cluster.local"
	s.Set(name, addrs("10.0.0.1", "10.0.0.2", "fd00::3")...)
	s.Set("empty.test")
	s.SetFor(netip.MustParseAddr("127.0.0.1"), "mine.test", addrs("10.9.9.9")...)
	s.SetFor(netip.MustParseAddr("127.0.0.2"), "mine.test", addrs("10.8.8.8")...)
	for _, tt := range []struct {
		name, net, q string
		qtype        uint16
		want         []string // addresses answered; nil: NXDOMAIN
	}{
		{"A over UDP", "udp", name, dns.TypeA, []string{"10.0.0.1", "10.0.0.2"}},
		{"AAAA over UDP", "udp", name, dns.TypeAAAA, []string{"fd00::3"}},
		{"ANY over TCP, as memberlist asks", "tcp", name, dns.TypeANY, []string{"10.0.0.1", "10.0.0.2", "fd00::3"}},
		{"case and the final dot do not matter", "udp", "SLUICE-Peers.default.svc.cluster.local.", dns.TypeA, []string{"10.0.0.1", "10.0.0.2"}},
		{"a name without addresses", "udp", "empty.test", dns.TypeA, nil},
		{"a name not in the table", "tcp", "nowhere.test", dns.TypeANY, nil},
		{"an answer for this client", "udp", "mine.test", dns.TypeA, []string{"10.9.9.9"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion(dns.Fqdn(tt.q), tt.qtype)
			in, _, err := (&dns.Client{Net: tt.net, Timeout: 5 * time.Second}).Exchange(m, addr)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if in.Rcode != dns.RcodeNameError || len(in.Answer) != 0 {
					t.Fatalf("rcode %s, %d answers; want NXDOMAIN", dns.RcodeToString[in.Rcode], len(in.Answer))
				}
				return
			}
			var got []string
			for _, rr := range in.Answer {
				switch rr := rr.(type) {
				case *dns.A:
					got = append(got, rr.A.String())
				case *dns.AAAA:
					got = append(got, rr.AAAA.String())
				}
				if rr.Header().Ttl != TTL {
					t.Errorf("ttl %d, want %d", rr.Header().Ttl, TTL)
				}
			}
			if in.Rcode != dns.RcodeSuccess || !slices.Equal(got, tt.want) {
				t.Fatalf("rcode %s, answers %v; want %v", dns.RcodeToString[in.Rcode], got, tt.want)
			}
		})
	}
	if got := s.Queries(name); got != 4 {
		t.Errorf("Queries(%s) = %d, want 4", name, got)
	}
}

// What a process's resolver sees: Go's resolver (as sluiced's rejoin asks)
// gets the table as it is now, and NXDOMAIN as "no such host".
func TestGoResolverSeesChanges(t *testing.T) {
	s := New()
	r := goResolver(serve(t, s))
	const name = "peers.test"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r.LookupIPAddr(ctx, name)
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("before Set: %v, want not found", err)
	}
	for _, want := range [][]string{{"10.0.0.1"}, {"10.0.0.1", "10.0.0.2", "10.0.0.3"}, {"10.0.0.4"}} {
		s.Set(name, addrs(want...)...)
		ips, err := r.LookupIPAddr(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ip := range ips {
			got = append(got, ip.IP.String())
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("resolved %v, want %v", got, want)
		}
	}
}

func TestServeAndCloseAreOrdered(t *testing.T) {
	s := New()
	if err := s.Serve(nil, nil); err == nil {
		t.Fatal("Serve with nothing to serve on did not fail")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close before Serve: %v", err)
	}
	serve(t, s)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if err := s.Serve(pc, nil); err == nil {
		t.Fatal("a second Serve did not fail")
	}
}

func TestResolvConf(t *testing.T) {
	got := ResolvConf(netip.MustParseAddr("10.213.0.1"))
	cfg, err := dns.ClientConfigFromReader(strings.NewReader(got))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Servers, []string{"10.213.0.1"}) || cfg.Port != "53" || cfg.Timeout != 1 || cfg.Attempts != 2 {
		t.Fatalf("parsed %+v from %q", cfg, got)
	}
}
