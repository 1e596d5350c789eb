package bucket

import (
	"fmt"
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
// since it was created) / members, beside the bucket's own balance. How
// the burst's part is counted is StoreConfig.FirstContact's choice: with
// FirstContactToken it is rounded up, ceil(Burst / members), so a node
// always admits at least one token of a key it meets, and a key the
// cluster uses lightly (hosts that each call it now and then, and forget
// it between calls) is served; with FirstContactShare it is rounded up or
// down at random, once per bucket, so that the cluster's expected
// admission is that amount whatever its size (a node new to a key that
// calls it once is admitted with probability share): a key that every
// host meets at once is admitted about one burst, not one token per host,
// but a host that calls a key rarely meets it anew at every call and is
// refused with probability 1 - share each time. The default,
// FirstContactAuto, divides the burst by the crowd the owners said of the
// rule's keys lately instead of by members (crowd.go): a token for the
// keys of a lightly used rule, the share for a rule not heard of lately or
// whose keys are met by crowds. The hold is one
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

// FirstContact is how a node counts its share of a key's burst during the
// hold of a bucket it has just created (see above).
type FirstContact uint8

// First contact's choices.
const (
	// FirstContactAuto holds a new key of a rule to burst / the crowd the
	// owners said of the rule's keys at first contact lately (crowd.go),
	// rounded at random and at most what FirstContactToken admits; a rule
	// not heard of lately, to burst / members, as FirstContactShare. A key
	// every node meets at once is admitted about one burst, and hosts that
	// each call the keys of a lightly used rule now and then are served.
	// The default.
	FirstContactAuto FirstContact = iota
	// FirstContactToken rounds the share of the burst up: at least one
	// token per node. Errs toward admitting.
	FirstContactToken
	// FirstContactShare rounds a share below one token up or down at
	// random: the cluster admits about one burst however many nodes meet
	// the key at once, and refuses light users far below their limit.
	FirstContactShare
)

// FirstContacts are the choices, the default first.
var FirstContacts = [...]FirstContact{FirstContactAuto, FirstContactToken, FirstContactShare}

// String is the choice's name, as sluiced's --first-contact takes it.
func (f FirstContact) String() string {
	switch f {
	case FirstContactAuto:
		return "auto"
	case FirstContactToken:
		return "token"
	case FirstContactShare:
		return "share"
	}
	return fmt.Sprintf("FirstContact(%d)", uint8(f))
}

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

// heldBack reports whether a take of cost on the tracked bucket st of
// namespace ns, whose tracking is t, under lim at now goes beyond its share during its hold, and
// if so how long until the share covers it. It ends the hold (see
// shareclock.go) once it is over. The caller holds the shard's lock and has
// checked that st is a bucket held to its first share.
func (s *Store) heldBack(ns Namespace, st *state, t *tracking, lim Limit, cost int64, now time.Time) (bool, time.Duration) {
	hold, members := s.firstHold.Load(), s.firstMembers.Load()
	born, _ := st.heldSince()
	age := now.UnixNano() - born
	if hold <= 0 || members <= 1 || age >= hold || age < 0 {
		st.setShareClock(0) // the hold is over; the fair floor starts at the next use
		return false, 0
	}
	refill := float64(age) / float64(lim.nanosPerToken) / float64(members)
	token := math.Ceil(float64(lim.burst)/float64(members)) + refill
	var share float64
	switch s.firstContact {
	case FirstContactToken:
		share = token
	case FirstContactShare:
		share = math.Floor((float64(lim.burst)+float64(age)/float64(lim.nanosPerToken))/float64(members) + s.offset(t.epoch))
	default: // FirstContactAuto: the rule's crowd for the members, if heard of lately (crowd.go)
		crowd := float64(members)
		if c, ok := s.crowds.crowd(ns, now); ok {
			crowd = max(1, min(crowd, c))
		}
		share = min(token, math.Floor(float64(lim.burst)/crowd+refill+s.offset(t.epoch)))
	}
	over := float64(t.used) + float64(cost) - share
	if over <= 0 {
		return false, 0
	}
	wait := time.Duration(min(over*float64(lim.nanosPerToken)*float64(members), float64(hold-age)))
	return true, max(wait, 1)
}
