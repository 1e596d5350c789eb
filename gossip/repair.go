package gossip

import (
	"net"
	"strconv"
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
type repairState struct {
	want map[string]bool
	last map[string]time.Time
	any  time.Time
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
