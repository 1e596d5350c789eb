package gossip

import (
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Asking for a repair. A node that first hears of a member's counter
// midway (its Prev above 0: the packets before were lost, or were sent
// before that member knew this node) has not charged what lies below, and
// its view of the key stays above its peers' until a push-pull with a
// node that has charged it explains the difference (explainLocked). Under
// even demand the node with the highest view admits everything and the
// others nothing (issue 20: a three-process cluster split so for 12 s, the
// time until a random push-pull happened to pair the right nodes). So this
// node asks at once: it push-pulls with the sender (memberlist's Join with
// a member is a push-pull), at most once per seen range (seenRange.asked),
// once per repairSpacing per sender, and once per repairGap in all, so a
// node that joins a busy cluster exchanges state with each peer once, not
// once per key.

// repairSpacing is the least time between two repairs with one sender.
const repairSpacing = 5 * time.Second

// repairGap is the least time between two repairs of this node.
const repairGap = time.Second

// repairHorizon bounds the consumption below a counter first heard midway
// that is worth a repair: what its origin could admit in this long after
// its burst.
const repairHorizon = 5 * time.Second

// repairTick is how often asked repairs are started.
const repairTick = 100 * time.Millisecond

// repairState is the senders to push-pull with, and when each was last.
// Under s.mu; want holds members only, so it is bounded by the membership.
// strangers (under its own lock, as the transport's packet reader fills
// it) are the addresses of keyed senders that are no members here, to
// join (see noteStranger), when each was last tried.
type repairState struct {
	want map[string]bool
	last map[string]time.Time
	any  time.Time

	strangerMu sync.Mutex
	strangers  map[netip.AddrPort]time.Time
}

// maxStrangers bounds the strangers' addresses held to join.
const maxStrangers = 16

// noteStranger notes the source of a counters packet that a keyed sender
// sent this node without being a member here. A node restarted under its
// old name before its peers declared the old one dead (a seed started
// without --join) is still a member to them: they send it their counters,
// but it knows none of them, so it sent them none of its own and handed
// out a fresh burst that nobody charged until a push-pull happened to
// reach it (issue 20: 4-12 s, +4.5% over 20 s). Joining the sender of
// such a packet ends that within one gossip round and a push-pull. Only
// keyed clusters: there the packet is authenticated, elsewhere its source
// could be made up. Called from the transport's packet reader; quick.
func (s *Syncer) noteStranger(src netip.AddrPort) {
	r := &s.repair
	r.strangerMu.Lock()
	defer r.strangerMu.Unlock()
	if _, ok := r.strangers[src]; ok || len(r.strangers) >= maxStrangers {
		return
	}
	if r.strangers == nil {
		r.strangers = map[netip.AddrPort]time.Time{}
	}
	r.strangers[src] = time.Time{}
}

// joinStranger joins one noted stranger's address, once per repairSpacing
// each; an address that is a member by now is forgotten. It reports
// whether it tried one.
func (s *Syncer) joinStranger(now time.Time) bool {
	book := s.senders.Load()
	r := &s.repair
	var addr netip.AddrPort
	r.strangerMu.Lock()
	for a, at := range r.strangers {
		if book.owner(a) != "" {
			delete(r.strangers, a)
			continue
		}
		if now.Sub(at) >= repairSpacing {
			addr = a
			r.strangers[a] = now
			break
		}
	}
	for a, at := range r.strangers { // tried long ago and no longer heard of: forget
		if !at.IsZero() && now.Sub(at) >= 2*repairSpacing {
			delete(r.strangers, a)
		}
	}
	r.strangerMu.Unlock()
	if !addr.IsValid() {
		return false
	}
	if n, err := s.list().Join([]string{addr.String()}); n > 0 {
		s.log.Info("joined a member that counted this node a member without being known here (a restart under the same name)", "address", addr.String())
		s.stats.Repairs.Add(1)
	} else {
		s.log.Debug("joining an unknown sender failed", "address", addr.String(), "error", err)
	}
	return true
}

// askRepairLocked notes that counter c, just received from sender, was
// first heard midway, and asks for a push-pull with sender once per seen
// range. Only a part below that the origin could have admitted within
// repairHorizon (its allowance a, when the ledger bounds) is worth a
// repair: a larger one is mostly old consumption (a key that resumed after
// its counter here was pruned as idle), long since refilled, and the
// periodic push-pull is enough for it. Caller holds s.mu.
func (s *Syncer) askRepairLocked(sender string, sr *seenRange, c Counter, a Allowance, bounded bool) {
	if sr == nil || sr.asked || sr.gen(c) != &sr.cur || sr.cur.lo == 0 {
		return
	}
	if bounded && float64(sr.cur.lo) > a.Burst+a.PerSecond*repairHorizon.Seconds() {
		return
	}
	if _, ok := s.peers[sender]; !ok || sender == s.self {
		return
	}
	sr.asked = true
	if s.repair.want == nil {
		s.repair.want = map[string]bool{}
	}
	s.repair.want[sender] = true
}

// repairOne starts the push-pull of one asked repair that its spacing
// allows. It runs on its own loop: a push-pull is a TCP exchange.
func (s *Syncer) repairOne() {
	ml := s.list()
	if ml == nil || s.leaving.Load() {
		return
	}
	now := s.clock()
	if s.joinStranger(now) {
		return
	}
	var addr, name string
	s.mu.Lock()
	if now.Sub(s.repair.any) >= repairGap {
		for n := range s.repair.want {
			p, ok := s.peers[n]
			if !ok {
				delete(s.repair.want, n)
				continue
			}
			if now.Sub(s.repair.last[n]) < repairSpacing {
				continue
			}
			delete(s.repair.want, n)
			if s.repair.last == nil {
				s.repair.last = map[string]time.Time{}
			}
			s.repair.last[n], s.repair.any = now, now
			addr, name = net.JoinHostPort(p.Addr.String(), strconv.Itoa(int(p.Port))), n
			break
		}
	}
	for n, at := range s.repair.last { // bounded: forget what no longer spaces anything
		if now.Sub(at) >= repairSpacing {
			delete(s.repair.last, n)
		}
	}
	s.mu.Unlock()
	if addr == "" {
		return
	}
	if _, err := ml.Join([]string{addr}); err != nil {
		s.log.Debug("repair push-pull failed", "with", name, "error", err)
		return
	}
	s.stats.Repairs.Add(1)
}
