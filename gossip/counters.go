package gossip

import (
	"cmp"
	"math"
	"slices"
)

// The sending side of the counter protocol: this node's consumption and
// what it relays wait, coalesced, in the pending queue, and go out every
// GossipInterval (see wire.go for the format, apply.go for the receiving
// side).

// Pause holds sending: consumption accumulates and goes out, coalesced, once
// resumed. Membership and receiving carry on. Tests use it to make "all of
// this load lands before any gossip" deterministic.
func (s *Syncer) Pause(paused bool) { s.paused.Store(paused) }

// Flush sends what is pending now instead of at the next round.
func (s *Syncer) Flush() { s.round() }

// retransmits is how many rounds a counter is sent in when gossip is relayed.
func retransmits(n int) int { return 3 * int(math.Ceil(math.Log10(float64(n+1)))) }

// round sends what is pending: to every member in small clusters, to
// GossipNodes random members in large ones.
func (s *Syncer) round() {
	if s.paused.Load() {
		s.lateRound(nil) // a paused round is not a stall (stalllate.go)
		return
	}
	var own []Counter
	s.ledger.Drain(func(c Counter) { own = append(own, c) })
	s.lateRound(own) // stalllate.go

	s.mu.Lock()
	others := s.othersLocked()
	fanout := s.fanoutLocked(others + 1)
	owner := s.ownerModeLocked() // owner.go
	transmits := 1
	switch {
	case owner:
		transmits = ownerResends
	case !fanout:
		transmits = retransmits(others + 1)
	}
	for _, c := range own {
		if !s.staleLocked(c) && s.ownSendLocked(c, owner) { // consumption a reset forgave is not reported; touches: ownershare.go
			s.queueLocked(s.self, c, ownTransmits(c, transmits))
		}
	}
	if owner {
		out := s.ownerRoundLocked()
		self := s.owner.selfViews
		s.owner.selfViews = nil
		s.mu.Unlock()
		s.sendOwner(out)
		s.tellViews(self) // ownershare.go
		return
	}
	if len(s.pending) == 0 || others == 0 {
		s.mu.Unlock()
		return
	}
	packets, counts := s.packPendingLocked(fanout)
	targets := s.targetsLocked(fanout)
	// The stamp is the instant the counters were taken out of pending, read
	// under the same lock: whoever sees pending emptied also sees every stamp
	// of what was taken fixed, however late this goroutine then sends.
	at := uint64(max(0, s.clock().UnixNano()))
	s.mu.Unlock()

	for i, plain := range packets {
		var stamped []byte
		for _, n := range targets {
			p := plain
			if readsStamps(n) {
				if stamped == nil {
					stamped = stampPacket(plain, at)
				}
				p = stamped
			}
			if err := s.list().SendBestEffort(n, p); err != nil {
				s.log.Debug("send failed", "to", n.Name, "error", err)
				continue
			}
			s.stats.PacketsSent.Add(1)
			s.stats.BytesSent.Add(uint64(len(p)))
			s.stats.CountersSent.Add(uint64(counts[i]))
		}
	}
}

// packPendingLocked writes the pending counters into packets, counting one
// transmission of each and dropping those sent often enough. Windowed
// counters go in ascending window order, so a receiver meets the last
// counter of a window before the first of the next; bucket counters (window
// 0) go first, in any order. Windowed counters never share a packet with
// bucket counters: a peer of a version before windows refuses a packet
// holding any, and must not lose the bucket counters with them during a
// rolling upgrade. With direct fan-out, relayed counters still pending from
// when the cluster relayed are dropped, not sent: receivers then take a
// sender's own counters only (see receive), and each origin sends its own
// to every member. Caller holds s.mu.
func (s *Syncer) packPendingLocked(direct bool) ([][]byte, []int) {
	w := newPacketWriter(s.self, s.cfg.PacketSize)
	send := func(k pendingKey, p *pendingCounter) {
		if direct && k.origin != s.self {
			s.dropPendingLocked(k)
			return
		}
		if k.origin == s.self {
			w.add(k.origin, p.carry())
		} else {
			w.add(k.origin, p.c)
		}
		if p.transmits--; p.transmits <= 0 {
			s.dropPendingLocked(k)
		}
	}
	var windowed []pendingKey
	s.eachPendingLocked(func(k pendingKey, p *pendingCounter) {
		if k.window == 0 {
			send(k, p)
		} else {
			windowed = append(windowed, k)
		}
	})
	slices.SortFunc(windowed, func(a, b pendingKey) int { return cmp.Compare(a.window, b.window) })
	w.flush()
	for _, k := range windowed {
		send(k, s.pending[k])
	}
	return w.packets()
}

// queueLocked makes c pending, coalescing with what is already pending for
// the same (origin, rule, key, window, epoch): one entry each, the newest
// counter, the earliest previous value not yet sent. A counter of another
// window or epoch is another entry, so a key moving to a new window (or a
// bucket to a new epoch) leaves its old generation's last counter queued
// beside the new one. Caller holds s.mu.
//
// At MaxPending, new relayed entries are dropped, and so are this node's own
// windowed ones (a key leaves one entry per window while no member is there
// to take them); push-pull repairs what is dropped. This node's own bucket
// counters are always queued: one per key and epoch, bounded by the ledger's
// keys (an old epoch's last counter leaves once sent).
func (s *Syncer) queueLocked(origin string, c Counter, transmits int) {
	k := pendingKey{counterKey{origin, c.Rule, c.Key}, c.Window, c.Epoch}
	p, ok := s.pending[k]
	if !ok {
		if len(s.pending) >= s.cfg.MaxPending && (origin != s.self || c.Window != 0) {
			return
		}
		s.pending[k] = &pendingCounter{c: c, transmits: transmits}
		return
	}
	p.c.Used = max(p.c.Used, c.Used)
	p.c.Prev = min(p.c.Prev, c.Prev)
	p.transmits = max(p.transmits, transmits)
}
