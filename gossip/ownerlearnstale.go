package gossip

import "time"

// A debt learnt late is aged by the refill since it was sent.
//
// A young aggregate's owner lowers its balance to the debt a contributor's
// heard message reports (ownerlearn.go). The debt is the contributor's when
// it sent the message; the owner compares it with its own balance when it
// handles it. A starved owner handles what queued while it did not run all
// at once, messages sent up to hundreds of milliseconds before, and the
// contributor's bucket has refilled since by the rate times that delay:
// taken as it was sent, the old debt charged the owner that refill, on top
// of the consumption it then counted from the same queue. Ten bare syncers
// holding the real test's limit (burst 100, 100/s) on buckets that refill,
// stalled at random from their tenth round (5-44 rounds, 4% of rounds):
// the owner charged 18-48 tokens above the others' ~1,280 in 3 of 12 seeds,
// every other node exact (TestStarvedOwnerLearnsTheDebtOnce); and the
// owner's balance is the debt it tells newcomers (newcomerPrevLocked).
// So the debt is aged
// by the message's delay, as its stamp places it on this node's clock.
//
// The delay is measured as counters' times are (stamp.go,
// originTimeLocked): against the least delay the sender's packets have
// shown, never more than the real delay, so a debt is never aged below
// what the contributor holds now (it errs toward charging the owner more,
// by at most the rate times that least delay, as before). A sender whose
// packets this node has not placed yet is not aged at all. A member lying
// in its stamp can only shrink the debt it reports, which it could by
// reporting a smaller one.

// sentAgoLocked is how long ago, on this node's clock, origin sent a packet
// stamped sentAt: the delay beyond the least its packets have shown, 0 for
// an origin never placed. Unlike originTimeLocked it records nothing.
// Caller holds s.mu.
func (s *Syncer) sentAgoLocked(origin string, sentAt uint64) time.Duration {
	nowNanos := s.clock().UnixNano()
	off, ok := s.offsets[origin]
	if !ok || nowNanos < 0 || sentAt > 1<<63-1 {
		return 0
	}
	return time.Duration(max(0, off-(int64(sentAt)-nowNanos)))
}
