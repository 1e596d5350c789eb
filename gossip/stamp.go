package gossip

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// Replays. A counters packet carries, as an optional fifth field, the
// instant its sender sent it (Unix nanoseconds on the sender's clock):
//
//	[1, sender, [origin, ...], [entry, ...], sent_at]
//
// A receiver refuses a stamped packet sent more than SeenTTL/2 ago or more
// than SeenTTL/2 ahead of its own clock. The seen table remembers a counter
// for at least SeenTTL after it was last heard, so any packet young enough
// to be accepted is one whose counters are still remembered and charge
// nothing twice; an older one (a capture replayed later, or replayed to a
// daemon that restarted since) is refused whatever the receiver remembers.
//
// Compatibility: a node advertises that it reads stamps by memberlist's
// delegate protocol range (DelegateProtocolMax = protoStamped; the current
// version stays 0, so older nodes still accept it as a member). It stamps
// what it sends to members that advertise it and sends the unstamped
// four-field packet to older members, which read it as before (they would
// refuse a fifth field). It accepts an unstamped packet only from a sender
// that is a member of an older version: a replay of an older member's
// packet is as possible as it was before the upgrade; one of a new
// member's, or one naming a sender that is no member, is refused.
const protoStamped = 1

// errStale and errUnstamped are why a counters packet was refused whole.
var (
	errStale     = errors.New("packet stamped outside the accepted window (replayed, or the sender's clock is off)")
	errUnstamped = errors.New("unstamped packet from a sender that is no member of an older version")
)

// stampPacket returns a copy of an unstamped counters packet p with the
// instant at appended as its fifth field. p starts with a fixarray header
// of 4 fields (0x94), which becomes 5 (0x95).
func stampPacket(p []byte, at uint64) []byte {
	q := make([]byte, 0, len(p)+9)
	q = append(q, 0x95)
	q = append(q, p[1:]...)
	return mp.AppendUint(q, at)
}

// readsStamps reports whether member n reads stamped packets.
func readsStamps(n *memberlist.Node) bool { return n.DMax >= protoStamped }

// checkStampLocked decides whether a counters packet from sender, stamped at
// sentAt (or unstamped), may be applied. Caller holds s.mu (for s.peers).
func (s *Syncer) checkStampLocked(sender string, sentAt uint64, stamped bool) error {
	if !stamped {
		if n, ok := s.peers[sender]; ok && !readsStamps(&n) {
			return nil
		}
		return errUnstamped
	}
	now := s.clock().UnixNano()
	window := int64(s.cfg.SeenTTL / 2)
	if window <= 0 {
		window = int64(30 * time.Second)
	}
	at := int64(min(sentAt, 1<<63-1))
	if at < now-window || at > now+window {
		return fmt.Errorf("%w: %s off this node's clock", errStale, time.Duration(at-now))
	}
	return nil
}

// originTimeLocked places a member's counters packet, stamped at sentAt on
// its clock, on this node's: at the stamp less the most the member's stamps
// have run ahead of this node's clock (nowNanos) in any packet it sent, as
// a duration since the syncer was made (like sinceBorn). The origin's
// allowance fills on that time.
//
// So packets that were delayed on the way or queued here (a busy node
// handles a batch at once) are bounded on the origin's own timeline, as
// far apart as they were sent: delay and jitter do not eat an honest
// origin's allowance. And a forged stamp buys nothing: the result is never
// ahead of this node's clock (a stamp further ahead raises the offset
// with it), and an allowance fills only when its time moves forward (see
// allowance.take), so what one origin is allowed on a key grows no faster
// than the rate on this node's clock. Names that are not members, whose number is
// not bounded, are placed at nowNanos. Caller holds s.mu.
func (s *Syncer) originTimeLocked(origin string, sentAt, nowNanos uint64) time.Duration {
	now := time.Duration(int64(nowNanos)-s.born.UnixNano()) + 1
	if !s.memberLocked(origin) || sentAt > 1<<63-1 || nowNanos > 1<<63-1 {
		return max(now, 1)
	}
	ahead := int64(sentAt) - int64(nowNanos)
	if off, ok := s.offsets[origin]; ok && off >= ahead {
		ahead = off
	} else if ok || len(s.offsets) < maxOrigins {
		if s.offsets == nil {
			s.offsets = map[string]int64{}
		}
		s.offsets[origin] = ahead
	}
	return max(now+time.Duration(int64(sentAt)-int64(nowNanos)-ahead), 1)
}

// pruneOffsetsLocked forgets the offsets of names that are no longer
// members. Caller holds s.mu.
func (s *Syncer) pruneOffsetsLocked() {
	for name := range s.offsets {
		if !s.memberLocked(name) {
			delete(s.offsets, name)
		}
	}
}

// memberStampCheck is the check owner-mode decoders give their packets'
// sender (owner counters, aggregation's user and group counters): the
// packet must be stamped, its sender a member and the stamp fresh. It
// keeps the sender and the stamp in *sender and *sentAt for the caller.
// Caller holds s.mu when the check runs.
func (s *Syncer) memberStampCheck(sender *string, sentAt *uint64) func(from string, at uint64, stamped bool) error {
	return func(from string, at uint64, stamped bool) error {
		*sender, *sentAt = from, at
		if !stamped {
			return errUnstamped
		}
		if !s.memberLocked(from) {
			return fmt.Errorf("sender %.64q is no member", from)
		}
		return s.checkStampLocked(from, at, stamped)
	}
}
