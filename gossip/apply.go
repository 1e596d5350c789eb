package gossip

import (
	"time"
)

type charge struct {
	rule, key      string
	window, tokens uint64
}

// receive applies a message from a peer: counters, or resets. A kind this
// version does not know (a newer peer's) is ignored. A counters packet is
// refused whole when its stamp says it is a replay (see stamp.go); each of
// its counters is then admitted (admitLocked), deduplicated by the seen
// table (applyLocked), and charged no more than its origin's allowance
// (boundLocked). Counters must have come in a packet whose sender the
// transport checked (senderguard.go); while the cluster is small enough for
// direct fan-out, a sender's counters of other origins are refused too.
func (s *Syncer) receive(b []byte) {
	s.stats.PacketsReceived.Add(1)
	s.stats.BytesReceived.Add(uint64(len(b)))
	kind, ok := packetKind(b)
	switch {
	case ok && kind == msgReset:
		s.receiveResets(b)
		return
	case ok && (kind == msgOwnerCounters || kind == msgOwnerAnswer || kind == msgOwnerHeard):
		s.receiveOwner(kind, b) // owner.go
		return
	case ok && kind >= msgAggUsers && kind <= msgAggNotice:
		s.receiveAgg(kind, b) // owneragg.go
		return
	case ok && kind > msgReset:
		s.stats.IgnoredPackets.Add(1)
		s.log.Debug("ignored a gossip message of an unknown kind", "kind", kind, "bytes", len(b))
		return
	}
	if t := s.transport; ok && kind == msgCounters && t != nil && t.senders != nil && !t.senders.vouch.take(b) {
		s.tstats.countPacket(PacketRefusedUnchecked)
		s.badLog.warn(s.log, s.clock(), "refused counters the transport did not check (not from a packet)", "bytes", len(b))
		return
	}
	var charges []charge
	n := int(max(1, s.members.Load()))
	foreign := 0 // counters of other origins refused (direct fan-out)
	transmits := retransmits(n)
	bounded, _ := s.ledger.(BoundedLedger)
	now := s.sinceBorn()
	nowNanos := uint64(max(0, s.clock().UnixNano()))
	// The packet's sender and stamp: an origin's own counters are bounded
	// on its clock (see originTimeLocked).
	var sender string
	var sentAt uint64
	var stamped bool
	check := func(from string, at uint64, ok bool) error {
		sender, sentAt, stamped = from, at, ok
		err := s.checkStampLocked(from, at, ok)
		if err == nil {
			s.heardFromLocked(from) // away.go
		}
		return err
	}
	s.mu.Lock()
	owner := s.ownerModeLocked()
	relay := !owner && !s.fanoutLocked(n)
	ownOnly := owner || s.cfg.GossipMode == ModeDirect || (s.cfg.GossipMode != ModeRelay && directOnly(n, s.cfg.FanoutLimit))
	_, err := decodeCountersChecked(b, check, func(origin string, c Counter) {
		if origin == s.self || s.staleLocked(c) {
			return
		}
		if ownOnly && origin != sender && s.transport != nil {
			foreign++ // each node sends only its own counters
			return
		}
		a, ok := s.admitLocked(bounded, origin, c, nowNanos)
		if !ok {
			return
		}
		h, news, sr := s.hearLocked(origin, c)
		tokens := h.tokens()
		if origin == sender {
			s.askRepairLocked(sender, sr, c, a, bounded != nil)
		}
		clamped := false
		if bounded != nil && tokens > 0 {
			at := now
			if stamped && origin == sender {
				at = s.originTimeLocked(origin, sentAt, nowNanos)
			}
			give := s.boundLocked(sr, a, origin, c, h, at)
			clamped, tokens = give < tokens, give
		}
		if tokens > 0 {
			charges = append(charges, charge{c.Rule, c.Key, c.Window, tokens})
		}
		if news && relay && !clamped { // a suspicious counter is not spread further
			s.relayLocked(origin, c, transmits)
		}
	})
	s.mu.Unlock()
	if foreign > 0 {
		s.tstats.countPacket(PacketRefusedOrigin)
		s.badLog.warn(s.log, s.clock(), "refused counters sent in other origins' names while every node sends its own",
			"sender", sender, "counters", foreign)
	}
	if err != nil {
		s.stats.BadPackets.Add(1)
		s.badLog.warn(s.log, s.clock(), "dropped a gossip packet", "bytes", len(b), "error", err)
		return
	}
	s.chargeDirect(charges) // stalllate.go
}

// admitLocked decides whether a counter is applied at all, and returns the
// origin's allowance for its key. With a BoundedLedger, a counter of a rule
// this node does not have, or of a key longer than its clients may send, is
// neither charged nor remembered; and one whose epoch is implausibly far
// ahead of this node's clock (see maxEpochAhead) is refused as suspicious.
// Caller holds s.mu.
func (s *Syncer) admitLocked(bounded BoundedLedger, origin string, c Counter, nowNanos uint64) (Allowance, bool) {
	if c.Epoch > satAdd(nowNanos, maxEpochAhead) {
		s.suspectLocked(origin, c, "epoch ahead of this node's clock", c.Epoch, nowNanos)
		return Allowance{}, false
	}
	if bounded == nil {
		return Allowance{}, true
	}
	a, ok := bounded.Allowance(c.Rule, c.Key)
	if !ok {
		s.stats.UnknownCounters.Add(1)
		return Allowance{}, false
	}
	return a, true
}

// boundLocked clamps what origin's counter c newly brought here (h, just
// recorded in sr by hearLocked) to what the origin could have admitted
// since it was last heard (see allowance), counting the report as
// suspicious when it claims more, and returns what may be charged. What is
// not charged is taken back out of the range (seenRange.unhear): it is not
// heard, so a later report or a push-pull may still charge it, from the
// allowance as it then stands. A non-member's report that only the
// allowance non-members share could not pay (see takeLocked) is deferred
// so, and counted in Stats.DeferredReports rather than as suspicious.
// Caller holds s.mu.
func (s *Syncer) boundLocked(sr *seenRange, a Allowance, origin string, c Counter, h heard, now time.Duration) uint64 {
	tokens := h.tokens()
	give, deferred := s.takeLocked(sr, a, origin, c, tokens, now)
	if give < tokens {
		sr.unhear(c, h, tokens-give)
		if deferred {
			s.stats.DeferredReports.Add(1)
		} else {
			s.suspectLocked(origin, c, "more than the origin could have admitted", tokens, give)
		}
	}
	return give
}

func (s *Syncer) charge(charges []charge) {
	for _, c := range charges {
		s.ledger.Charge(c.rule, c.key, c.window, c.tokens)
		for {
			old := s.stats.TokensCharged.Load()
			if s.stats.TokensCharged.CompareAndSwap(old, satAdd(old, c.tokens)) {
				break
			}
		}
	}
}

// directOnly reports whether, with n members here, every member surely
// sends straight to every other, so each sender's counters must be its own.
// Members count each other a little apart while the cluster grows (a node
// that already counts more than limit relays to one that does not yet), so
// the check stops short of the limit by an eighth of it (at least one):
// a relayed counter is not refused for a lag in counting.
func directOnly(n, limit int) bool { return n+max(1, limit/8) <= limit }
