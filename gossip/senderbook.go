package gossip

import (
	"net/netip"
	"slices"
	"sync"
)

// The sender book (the sender guard's, senderguard.go): members' advertised
// addresses and their names, both ways, for live members and those that
// went away (their names stay reserved to their addresses). An address
// claimed by a live member is that member's, whatever gone members claimed
// it before.
//
// It is kept up to date one member at a time: a membership change touches
// the changed member's entries only, so what a change costs does not grow
// with the membership (rebuilding it whole was O(members) per change: 20
// ms at 10,000 members, and O(N²) while a node learns a large membership;
// BenchmarkSenderBookChurn). The transport's packet reader reads it under a
// read lock while membership events change it.

// senderBook maps members' addresses to their names and back. The zero
// book is empty; a nil book allows every sender.
type senderBook struct {
	mu     sync.RWMutex
	byAddr map[netip.AddrPort]string
	byName map[string]netip.AddrPort
	// claims are the names at each address (live and gone), the address's
	// owner chosen among them. Writers' side.
	claims map[netip.AddrPort][]string
}

// allows reports whether a counters message naming sender may come from src.
func (b *senderBook) allows(src netip.AddrPort, sender []byte) bool {
	if b == nil {
		return true
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if owner, ok := b.byAddr[src]; ok {
		return owner == string(sender)
	}
	_, named := b.byName[string(sender)]
	return !named
}

// owner is the member at src, or "".
func (b *senderBook) owner(src netip.AddrPort) string {
	if b == nil {
		return ""
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.byAddr[src]
}

// named reports whether name is a member's (live or gone) in the book.
func (b *senderBook) named(name []byte) bool {
	if b == nil {
		return false
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	_, ok := b.byName[string(name)]
	return ok
}

// senderAddrLocked is name's address in the book: a live member's
// advertised address, else a gone member's; ok false when name is neither
// or its address does not parse. Caller holds s.mu.
func (s *Syncer) senderAddrLocked(name string) (ap netip.AddrPort, live, ok bool) {
	if n, in := s.peers[name]; in {
		ip, ok := netip.AddrFromSlice(n.Addr)
		return netip.AddrPortFrom(ip.Unmap(), n.Port), true, ok
	}
	if f, in := s.failed[name]; in {
		ap, err := netip.ParseAddrPort(f.addr)
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), false, err == nil
	}
	return netip.AddrPort{}, false, false
}

// noteSenderLocked brings member name's entries in the sender book up to
// date with peers and failed; call it after either changed for name.
// Caller holds s.mu.
func (s *Syncer) noteSenderLocked(name string) {
	if s.simulated {
		return // no transport reads it
	}
	b := s.senders.Load()
	if b == nil {
		b = &senderBook{byAddr: map[netip.AddrPort]string{}, byName: map[string]netip.AddrPort{}, claims: map[netip.AddrPort][]string{}}
		s.senders.Store(b)
	}
	ap, live, ok := s.senderAddrLocked(name)
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, had := b.byName[name]; had {
		delete(b.byName, name)
		b.claims[old] = slices.DeleteFunc(b.claims[old], func(n string) bool { return n == name })
		s.settleSenderLocked(b, old)
	}
	if !ok {
		return
	}
	b.byName[name] = ap
	if live {
		b.claims[ap] = slices.Insert(b.claims[ap], 0, name) // the newest live claim first
	} else {
		b.claims[ap] = append(b.claims[ap], name)
	}
	s.settleSenderLocked(b, ap)
}

// settleSenderLocked chooses the owner of address ap among its claims: a
// live member's (the newest), else a gone member's; none if unclaimed.
// Caller holds s.mu and b.mu.
func (s *Syncer) settleSenderLocked(b *senderBook, ap netip.AddrPort) {
	names := b.claims[ap]
	if len(names) == 0 {
		delete(b.claims, ap)
		delete(b.byAddr, ap)
		return
	}
	for _, name := range names {
		if _, live := s.peers[name]; live {
			b.byAddr[ap] = name
			return
		}
	}
	b.byAddr[ap] = names[0]
}
