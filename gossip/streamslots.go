package gossip

import (
	"net/netip"
	"sync"
	"time"
)

// Stream slots: who may hold the maxStreams inbound streams. One cap alone
// let a stranger keep every slot busy (silent streams, streamTimeout each),
// delaying members' push-pulls, joins and reliable resets. So the slots are
// shared out:
//   - a source address that is not a member's holds at most
//     maxStreamsPerSource streams at once (an IPv6 source: its /64, which
//     one host usually holds whole);
//   - sources that are not members hold at most maxStreams −
//     memberStreamSlots together: the rest are kept for members' addresses;
//   - a member's address may take any free slot, beyond both caps.
//
// And a stream must send its header within streamHeaderTimeout, not
// streamTimeout: a silent stream gives its slot back after that. The
// header follows the push-pull state memberlist builds before writing it
// (up to stateBudget), so the bound is not tighter.
//
// A member's address is the address memberlist knows it by (see
// Syncer.memberAddr): TCP's handshake means a stream cannot claim a source
// address it cannot receive at. Members on one host share one address, and
// so its per-source cap; they are exempt from it anyway. The cost for an
// honest node: a node that is not a member yet (joining) competes with
// strangers for their share, but one source holds at most
// maxStreamsPerSource of it.

const (
	// maxStreamsPerSource is how many inbound streams one source address
	// that is not a member's may hold at once. An honest node opens one at
	// a time to a given peer (a push-pull, a join, a reliable message).
	maxStreamsPerSource = 4
	// memberStreamSlots are the slots only members' addresses may take.
	memberStreamSlots = 8
	// streamHeaderTimeout is how long a stream may take to send its header
	// (the guard's first bytes); the stream then has until streamTimeout.
	// memberlist writes the label at once, and the rest of the header once
	// it has built and encrypted what it sends: a push-pull's state of up
	// to stateBudget, well under a second on a loaded host.
	streamHeaderTimeout = 5 * time.Second
)

// streamSlots counts the inbound streams open, by source. It is safe for
// concurrent use.
type streamSlots struct {
	mu        sync.Mutex
	open      int                // all streams; mirrored in stats.StreamsOpen
	strangers int                // streams taken under the strangers' caps
	bySource  map[netip.Addr]int // streams taken under the strangers' caps, by source
	// isMember reports whether an address is a live member's (nil: none
	// is). It is called without mu held and may take the syncer's lock.
	isMember func(netip.Addr) bool
	stats    *TransportStats
}

// slot is one stream slot held: by a source under the strangers' caps, or
// by a member beyond them.
type slot struct {
	src      netip.Addr
	stranger bool
}

// acquire takes a slot for a stream from src, or returns why not
// (RefusedBusy: every slot, or every slot strangers may take, is held;
// RefusedSource: src holds its share).
func (s *streamSlots) acquire(addr netip.Addr) (slot, string) {
	src := sourceOf(addr)
	s.mu.Lock()
	if s.open >= maxStreams {
		s.mu.Unlock()
		return slot{}, RefusedBusy
	}
	if s.strangers < maxStreams-memberStreamSlots && s.bySource[src] < maxStreamsPerSource {
		if s.bySource == nil {
			s.bySource = map[netip.Addr]int{}
		}
		s.bySource[src]++
		s.strangers++
		s.open++
		s.stats.StreamsOpen.Store(int64(s.open))
		s.mu.Unlock()
		return slot{src: src, stranger: true}, ""
	}
	full := s.strangers >= maxStreams-memberStreamSlots
	s.mu.Unlock()
	if s.isMember == nil || !s.isMember(addr) {
		if full {
			return slot{}, RefusedBusy
		}
		return slot{}, RefusedSource
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open >= maxStreams {
		return slot{}, RefusedBusy
	}
	s.open++
	s.stats.StreamsOpen.Store(int64(s.open))
	return slot{src: src}, ""
}

// sourceOf is the source a stream from addr counts against: the address,
// or for IPv6 beyond loopback its /64.
func sourceOf(addr netip.Addr) netip.Addr {
	addr = addr.Unmap()
	if addr.Is6() && !addr.IsLoopback() {
		p, _ := addr.Prefix(64)
		return p.Addr()
	}
	return addr
}

// release gives a slot back.
func (s *streamSlots) release(sl slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	s.stats.StreamsOpen.Store(int64(s.open))
	if !sl.stranger {
		return
	}
	s.strangers--
	if s.bySource[sl.src]--; s.bySource[sl.src] <= 0 {
		delete(s.bySource, sl.src)
	}
}

// memberAddr reports whether a is the address of a live member other than
// this node: streams from it may take the slots kept for members.
func (s *Syncer) memberAddr(a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, n := range s.peers {
		if name == s.self {
			continue
		}
		if ip, ok := netip.AddrFromSlice(n.Addr); ok && ip.Unmap() == a {
			return true
		}
	}
	return false
}
