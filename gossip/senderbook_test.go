package gossip

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/hashicorp/memberlist"
)

// wholeSenderBook is the sender book built whole from s's members, as
// every membership change built it before senderbook.go: the reference the
// book kept up to date is checked against (and benchmarked beside). An
// address claimed by several gone members only is any one of theirs
// (map order). Caller holds s.mu.
func wholeSenderBook(s *Syncer) *senderBook {
	b := &senderBook{
		byAddr: make(map[netip.AddrPort]string, len(s.peers)+len(s.failed)),
		byName: make(map[string]netip.AddrPort, len(s.peers)+len(s.failed)),
	}
	for name, f := range s.failed {
		if ap, err := netip.ParseAddrPort(f.addr); err == nil {
			ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			b.byAddr[ap], b.byName[name] = name, ap
		}
	}
	for name, n := range s.peers { // a live member's address wins over a gone one's
		if ip, ok := netip.AddrFromSlice(n.Addr); ok {
			ap := netip.AddrPortFrom(ip.Unmap(), n.Port)
			b.byAddr[ap], b.byName[name] = name, ap
		}
	}
	return b
}

// sameSenders reports how the kept book differs from the whole one: the
// same names at the same addresses, the same addresses owned, each by a
// live member claiming it if there is one, else by a gone one claiming it
// (which one, when several, is map order's choice in the whole build).
func sameSenders(s *Syncer, kept *senderBook) error {
	whole := wholeSenderBook(s)
	if kept == nil {
		kept = &senderBook{}
	}
	if !maps.Equal(kept.byName, whole.byName) {
		return fmt.Errorf("names: kept %v, whole %v", kept.byName, whole.byName)
	}
	if !slices.Equal(slices.SortedFunc(maps.Keys(kept.byAddr), netip.AddrPort.Compare), slices.SortedFunc(maps.Keys(whole.byAddr), netip.AddrPort.Compare)) {
		return fmt.Errorf("addresses: kept %v, whole %v", kept.byAddr, whole.byAddr)
	}
	for ap, name := range kept.byAddr {
		if whole.byName[name] != ap {
			return fmt.Errorf("%v is %q's, who is at %v", ap, name, whole.byName[name])
		}
		if _, live := s.peers[name]; !live {
			if w := whole.byAddr[ap]; s.peers[w].Name != "" {
				return fmt.Errorf("%v is gone %q's, live %q claims it", ap, name, w)
			}
		}
	}
	return nil
}

// The sender book kept up to date one change at a time is the book built
// whole from the members, through joins, leaves, address changes, members
// coming back, addresses reused by other names, gone members forgotten,
// and addresses that do not parse.
func TestSenderBookFollowsTheMembers(t *testing.T) {
	for seed := range uint64(20) {
		s, err := New(Config{NodeName: "self", GossipMode: ModeOwner}, newMemLedger())
		if err != nil {
			t.Fatal(err)
		}
		ev := (*events)(s)
		rnd := rand.New(rand.NewPCG(seed, 7))
		addrs := []net.IP{net.IPv4(10, 0, 0, 1), net.IPv4(10, 0, 0, 2), net.IPv4(10, 0, 0, 3), net.ParseIP("fd00::1"), net.IPv4(10, 0, 0, 1).To16(), {1, 2, 3}}
		node := func() memberlist.Node {
			return memberlist.Node{Name: fmt.Sprint("n", rnd.IntN(12)), Addr: addrs[rnd.IntN(len(addrs))], Port: uint16(7946 + rnd.IntN(2)), DMax: protoOwner}
		}
		for step := range 400 {
			n := node()
			s.mu.Lock()
			_, live := s.peers[n.Name]
			s.mu.Unlock()
			what := ""
			switch r := rnd.IntN(10); {
			case r < 4:
				what = "join"
				ev.NotifyJoin(&n)
			case r < 7 && live:
				what = "leave"
				ev.NotifyLeave(&n)
			case r < 9 && live:
				what = "update"
				ev.NotifyUpdate(&n)
			default:
				what = "forget the gone"
				s.mu.Lock()
				for name := range s.failed {
					if rnd.IntN(2) == 0 {
						delete(s.failed, name)
						s.noteSenderLocked(name)
					}
				}
				s.mu.Unlock()
			}
			s.mu.Lock()
			err := sameSenders(s, s.senders.Load())
			s.mu.Unlock()
			if err != nil {
				t.Fatalf("seed %d, step %d (%s %s at %v:%d): %v", seed, step, what, n.Name, n.Addr, n.Port, err)
			}
		}
	}
}

// BenchmarkSenderBookChurn measures what one membership change costs a
// daemon's sender book as the cluster grows: a member joins and then goes
// beside members live members and as many gone ones. "kept": the book as
// senderbook.go keeps it; "whole": built whole at each change, as before.
// Reported per size: ns/change, and for the kept book its ratio against
// the first size's in the same run (x100) and against the whole build's
// (xwhole).
//
//	go test -run '^$' -bench BenchmarkSenderBookChurn ./gossip
func BenchmarkSenderBookChurn(b *testing.B) {
	sizes := []int{100, 1000, 10000}
	kept := make([]float64, len(sizes))
	for i, n := range sizes {
		s, err := New(Config{NodeName: "self", GossipMode: ModeOwner}, newMemLedger())
		if err != nil {
			b.Fatal(err)
		}
		ev := (*events)(s)
		s.mu.Lock()
		for k := range n {
			name := fmt.Sprintf("n%05d", k)
			s.peers[name] = memberlist.Node{Name: name, Addr: net.IPv4(10, byte(k>>16), byte(k>>8), byte(k)), Port: 7946, DMax: protoOwner}
			s.addPeerLocked(name)
			s.noteSenderLocked(name)
			if len(s.failed) < maxOrigins {
				gone := fmt.Sprintf("g%05d", k)
				s.failed[gone] = failedMember{addr: net.JoinHostPort(net.IPv4(10, 128|byte(k>>16), byte(k>>8), byte(k)).String(), "7946")}
				s.noteSenderLocked(gone)
			}
		}
		s.mu.Unlock()
		joiner := memberlist.Node{Name: "joiner", Addr: net.IPv4(10, 99, 99, 99), Port: 7946, DMax: protoOwner}
		var whole float64
		b.Run(fmt.Sprintf("members=%d/whole", n), func(b *testing.B) {
			for b.Loop() {
				s.mu.Lock()
				s.senders.Store(wholeSenderBook(s))
				s.mu.Unlock()
			}
			whole = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(whole, "ns/change")
		})
		s.senders.Store(nil)
		s.mu.Lock()
		for name := range s.peers {
			s.noteSenderLocked(name)
		}
		for name := range s.failed {
			s.noteSenderLocked(name)
		}
		s.mu.Unlock()
		b.Run(fmt.Sprintf("members=%d/kept", n), func(b *testing.B) {
			for b.Loop() {
				ev.NotifyJoin(&joiner) // the whole join: the owner ring's bookkeeping, the peers
				ev.NotifyLeave(&joiner)
			}
			kept[i] = float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 2
			b.ReportMetric(kept[i], "ns/change")
			if i > 0 && kept[0] > 0 {
				b.ReportMetric(kept[i]/kept[0], fmt.Sprintf("x%d", sizes[0]))
			}
			if whole > 0 {
				b.ReportMetric(kept[i]/whole, "xwhole")
			}
		})
	}
}
