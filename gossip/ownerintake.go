package gossip

import "time"

// The first checks of a counter sent to this node in owner mode, the same
// for a user's counter to its owner (kind 4, owner.go), a user's to its
// aggregator (kind 6, owneragg.go) and an aggregator's group counter to
// the owner (kind 7, owneraggowner.go): the packet's sender is a member
// and the packet stamped (memberStampCheck); a counter is taken only from
// the sender itself, never of this node's own; not from before a reset of
// its key (staleLocked); within what its origin may send (admitLocked);
// and placed on this node's clock at the packet's stamp
// (originTimeLocked).

// counterIntake is what an owner-mode receiver knows of a counters packet
// as it decodes it; make it with newCounterIntake.
type counterIntake struct {
	s        *Syncer
	bounded  BoundedLedger // nil: the ledger bounds nothing (tests)
	now      time.Duration // since the syncer's birth
	nowNanos uint64        // this node's clock
	sender   string
	sentAt   uint64
	foreign  int // counters whose origin was not the sender
}

// newCounterIntake returns the intake of a counters packet about to be
// decoded, and the sender check to decode it with.
func (s *Syncer) newCounterIntake() (*counterIntake, func(from string, at uint64, stamped bool) error) {
	bounded, _ := s.ledger.(BoundedLedger)
	in := &counterIntake{s: s, bounded: bounded, now: s.sinceBorn(), nowNanos: uint64(max(0, s.clock().UnixNano()))}
	return in, s.memberStampCheck(&in.sender, &in.sentAt)
}

// fromSender reports whether a counter of origin may be taken: the
// sender's own, and not this node's (any other is counted as foreign).
// Caller holds s.mu.
func (in *counterIntake) fromSender(origin string) bool {
	if origin != in.sender || origin == in.s.self {
		in.foreign++
		return false
	}
	return true
}

// admit reports whether counter c of origin is counted: not stale, within
// what the origin may send; with the origin's allowance for its key and
// the counter's time on this node's clock. Caller holds s.mu.
func (in *counterIntake) admit(origin string, c Counter) (Allowance, time.Duration, bool) {
	s := in.s
	if s.staleLocked(c) {
		return Allowance{}, 0, false
	}
	a, ok := s.admitLocked(in.bounded, origin, c, in.nowNanos)
	if !ok {
		return Allowance{}, 0, false
	}
	return a, s.originTimeLocked(origin, in.sentAt, in.nowNanos), true
}

// done counts the packet as refused for its origins if any counter's
// origin was not its sender.
func (in *counterIntake) done() {
	if in.foreign > 0 {
		in.s.tstats.countPacket(PacketRefusedOrigin)
	}
}
