package bucket

import (
	"math"
	"time"
)

// First contact. In a cluster every daemon holds a full bucket for a key
// it has not seen, so a key new to the cluster could be admitted a full
// burst on every node before any gossip arrived: N bursts in the first
// interval (issue 20: 1,120-1,170 admitted in the first second on 10
// nodes against 200 allowed). So a bucket starts with a hold: for the hold
// after it was created, this daemon admits of it at most its share of
// what the cluster may admit meanwhile, (Burst + the rate for the time
// since it was created) / members, beside the bucket's own balance. A
// share below one token (more members than the burst) is rounded up or
// down at random, once per bucket, so that the cluster's expected
// admission is that amount whatever its size (a node new to a key that
// calls it once is admitted with probability share). The hold is one
// propagation delay: by its end this daemon has heard what the others
// admitted meanwhile, and its balance says the rest; in owner mode it ends
// as soon as the key's owner answers (SetOwnerView), which a held take asks
// for (share.go). A node that hears nobody (lost packets, a partition) is
// held back only for the hold: it then admits its full balance, erring
// toward admitting.
//
// The hold applies to buckets created by a decision or by a peer's charge;
// one created by adopting a peer's balance (push-pull) has heard the
// cluster's view and starts without. Windowed algorithms, multi-check
// decisions (Check then Charge) and stores that do not track consumption
// are not held. A cluster of one member holds nothing.

// SetFirstShare sets the hold on buckets created from now on (and on the
// ones still in theirs): members is the cluster's size (1 or less: no
// hold), hold the time a new bucket is held to its share (0: none). Safe
// to call concurrently with everything else.
func (s *Store) SetFirstShare(members int, hold time.Duration) {
	if members <= 1 || hold <= 0 {
		s.firstMembers.Store(1)
		s.firstHold.Store(0)
		return
	}
	s.firstMembers.Store(int64(members))
	s.firstHold.Store(int64(hold))
}

// heldBack reports whether a take of cost on the tracked bucket st, whose
// tracking is t, under lim at now goes beyond its share during its hold, and
// if so how long until the share covers it. It ends the hold (see
// shareclock.go) once it is over. The caller holds the shard's lock and has
// checked that st is a bucket held to its first share.
func (s *Store) heldBack(st *state, t *tracking, lim Limit, cost int64, now time.Time) (bool, time.Duration) {
	hold, members := s.firstHold.Load(), s.firstMembers.Load()
	born, _ := st.heldSince()
	age := now.UnixNano() - born
	if hold <= 0 || members <= 1 || age >= hold || age < 0 {
		st.setShareClock(0) // the hold is over; the fair floor starts at the next use
		return false, 0
	}
	share := (float64(lim.burst) + float64(age)/float64(lim.nanosPerToken)) / float64(members)
	over := float64(t.used) + float64(cost) - math.Floor(share+s.offset(t.epoch))
	if over <= 0 {
		return false, 0
	}
	wait := time.Duration(min(over*float64(lim.nanosPerToken)*float64(members), float64(hold-age)))
	return true, max(wait, 1)
}
