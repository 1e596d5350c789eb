// Package dnstest is a DNS server for tests whose answers the test sets
// and changes while it runs: the stand-in for a Kubernetes headless
// Service's name, which resolves to the addresses of the pods that exist
// when it is asked.
//
// A Server answers A, AAAA and ANY questions over UDP and TCP (memberlist
// asks ANY over TCP first; Go's resolver asks A and AAAA over UDP) from a
// table of names. A name with no addresses, or not in the table, is
// NXDOMAIN, as a Service with no endpoints is. Answers may differ by the
// asking client's address (SetFor), to model resolvers that disagree for
// a while. The test chooses where the server listens (any PacketConn and
// Listener: on loopback, or made inside a network namespace), so the
// processes under test can be pointed at it through their resolv.conf.
package dnstest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/miekg/dns"
)

// TTL is the time to live of every answer, in seconds: short, as
// CoreDNS's for Services (nothing under test caches, but it is honest).
const TTL = 5

// Server answers from its table until Close. Its methods are safe for
// concurrent use.
type Server struct {
	mu      sync.Mutex
	names   map[string][]netip.Addr                // canonical name -> addresses, for every client
	per     map[netip.Addr]map[string][]netip.Addr // client -> name -> addresses, over names
	queries map[string]int                         // canonical name -> questions asked
	servers []*dns.Server
	done    chan error
}

// New returns a server with an empty table, not yet serving.
func New() *Server {
	return &Server{names: map[string][]netip.Addr{}, per: map[netip.Addr]map[string][]netip.Addr{}, queries: map[string]int{}}
}

// canonical is name as DNS compares it: lower case, fully qualified.
func canonical(name string) string { return dns.CanonicalName(name) }

// Set makes name resolve to addrs for every client without an answer of
// its own (SetFor); no addrs makes it NXDOMAIN.
func (s *Server) Set(name string, addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[canonical(name)] = slices.Clone(addrs)
}

// SetFor makes name resolve to addrs when client asks, whatever Set says;
// no addrs makes it NXDOMAIN for that client.
func (s *Server) SetFor(client netip.Addr, name string, addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.per[client.Unmap()] == nil {
		s.per[client.Unmap()] = map[string][]netip.Addr{}
	}
	s.per[client.Unmap()][canonical(name)] = slices.Clone(addrs)
}

// Forget drops the answers SetFor gave client: it gets Set's again.
func (s *Server) Forget(client netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.per, client.Unmap())
}

// Queries is how many questions about name the server has answered.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[canonical(name)]
}

// lookup counts a question about name (canonical) from client and
// returns the addresses it resolves to for that client.
func (s *Server) lookup(client netip.Addr, name string) []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries[name]++
	if addrs, ok := s.per[client][name]; ok {
		return slices.Clone(addrs)
	}
	return slices.Clone(s.names[name])
}

// Serve answers questions arriving on pc (UDP) and l (TCP) until Close;
// either may be nil. It returns once both serve.
func (s *Server) Serve(pc net.PacketConn, l net.Listener) error {
	if pc == nil && l == nil {
		return errors.New("dnstest: serve: no packet conn and no listener")
	}
	s.mu.Lock()
	if s.done != nil {
		s.mu.Unlock()
		return errors.New("dnstest: serve: already serving")
	}
	s.done = make(chan error, 2)
	var started sync.WaitGroup
	for _, srv := range []*dns.Server{{PacketConn: pc}, {Listener: l}} {
		if srv.PacketConn == nil && srv.Listener == nil {
			continue
		}
		srv.Handler = dns.HandlerFunc(s.answer)
		started.Add(1)
		srv.NotifyStartedFunc = started.Done
		s.servers = append(s.servers, srv)
	}
	servers := s.servers
	s.mu.Unlock()
	for _, srv := range servers {
		go func() { s.done <- srv.ActivateAndServe() }()
	}
	started.Wait()
	return nil
}

// Close stops serving and closes the connections Serve was given.
func (s *Server) Close() error {
	s.mu.Lock()
	servers := s.servers
	s.servers = nil
	s.mu.Unlock()
	var errs []error
	for _, srv := range servers {
		if err := srv.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("dnstest: shut down: %w", err))
		}
		if srv.Listener != nil {
			srv.Listener.Close()
		}
		<-s.done
	}
	return errors.Join(errs...)
}

// answer is the handler: every question of the message answered from the
// table (a resolver sends one).
func (s *Server) answer(w dns.ResponseWriter, req *dns.Msg) {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.Authoritative = true
	client := clientAddr(w.RemoteAddr())
	for _, q := range req.Question {
		if q.Qclass != dns.ClassINET {
			resp.SetRcode(req, dns.RcodeRefused)
			break
		}
		addrs := s.lookup(client, canonical(q.Name))
		if len(addrs) == 0 {
			resp.SetRcode(req, dns.RcodeNameError)
			continue
		}
		for _, a := range addrs {
			hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: TTL}
			switch {
			case a.Is4() && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY):
				hdr.Rrtype = dns.TypeA
				resp.Answer = append(resp.Answer, &dns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
			case a.Is6() && (q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY):
				hdr.Rrtype = dns.TypeAAAA
				resp.Answer = append(resp.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())})
			}
		}
	}
	w.WriteMsg(resp) // a client gone is the client's problem
}

// clientAddr is the asking address, unmapped; the zero Addr if unknown.
func clientAddr(a net.Addr) netip.Addr {
	var ip net.IP
	switch a := a.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	default:
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			return ap.Addr().Unmap()
		}
		return netip.Addr{}
	}
	addr, _ := netip.AddrFromSlice(ip)
	return addr.Unmap()
}

// ResolvConf is the text of a resolv.conf that sends every lookup to a
// server at addr (port 53: resolv.conf cannot say another), failing fast
// if it does not answer.
func ResolvConf(addr netip.Addr) string {
	var b strings.Builder
	fmt.Fprintf(&b, "nameserver %s\n", addr)
	b.WriteString("options timeout:1 attempts:2\n")
	return b.String()
}
