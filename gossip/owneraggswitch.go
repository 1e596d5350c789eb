package gossip

import "time"

// A user that switches aggregators (owneragg.go): its slot moved when the
// member count moved the key's aggregation points (k, the power of two at
// or above √N, changes as N crosses a square: 1,024 members at 1,000
// nodes, crashed members not yet declared dead included), or it failed
// over to the next slot's aggregator.

// aggSwitchLocked reports, for an answer about k that this node just took
// from its aggregator sender after answers of another (aggUse.cameFrom: the
// ring moved its slot, or a failover), the last others that other one told
// it, if that came after what sender last told it, at most others (the
// answer's: see below). Every aggregator tells
// its users the key in the owner's numbering (aggHeardLocked), so an
// answer from sender charges only what lies above it: a new aggregator's
// first answer tells the key's whole history to a user whose subscription
// it made before the owner first answered its group, and an old one's
// answer on the subscription a user comes back to tells it all the other
// one told it since (1,000 simulated nodes whose member count crossed
// 1,024, the aggregators' slots moving twice: 34 nodes charged the key's
// history, 1,212-1,270 tokens, then 442 charged 340-397 again). What is
// left: this node's own consumption through the other aggregator is in
// sender's numbering and not in what the other told it (charged once
// more, it admits that much less), and its own consumption through sender
// before it left is in what the other told it (not charged: it admits
// that much more).
//
// The owner's numbering is each group's first answer's: a group that a
// member made while the key was failed over (a churn joiner the ring made
// an aggregator, its group counters unanswered by the dead owner) took the
// replica's, whose aggregate counts from the failover, hundreds of tokens
// below the owner's; the groups made before go on in the owner's (each
// adds what the replica's answers add). A user that the ring moved from an
// older aggregator to that group charged nothing until the group's others
// passed what the older one had told it: nothing of the key for 9 s, the
// others' whole consumption meanwhile (300 simulated nodes, 10%/min churn,
// the owner killed at 8 s, seed 1: 4 users 887-890 tokens under what the
// others admitted, seeds 5, 8, 13, 21 -741..-887; -33..-73 with the cap:
// TestSwitchToAGroupInTheReplicasNumbering). So the other's last others
// counts only up to the answer's others: in one numbering a new group
// lags the old one's by what reached the owner in about a round trip
// (charged here once more, a few tokens), and in a lower one the user
// charges from the switch on, losing what the others consumed between its
// old aggregator's last answer and the new one's first. Caller holds s.mu.
//
// A user coming back to a subscription it still holds (sender's slot, gen:
// its ring moved its slot back, or its failover ended) adds to where that
// subscription stopped what it charged through the other one since it
// switched there (heardSlot.base), in no numbering: what the other told it
// (its absolute others) is below where the subscription stopped when the
// other counts in a lower numbering, and everything the other told it was
// charged a second time (300 simulated nodes, 10%/min churn, the owner
// killed at 8 s, seed 9: a user moved at 15.5 s from its aggregator,
// told 1,660, to the old replica's group, told 0 to 302, came back at
// 18.9 s to others 2,004 and was charged 344, the 302 again; 10 users
// +299..+336: TestComingBackFromAGroupInALowerNumbering). Where what the
// other told is higher (one numbering, a new group that lagged: the few
// tokens charged once more at the switch), it stands.
func (s *Syncer) aggSwitchLocked(k aggKey, sender string, gen, others uint64) (uint64, bool) {
	told, via, ok := s.aggSwitchToldLocked(k, sender)
	if h := s.owner.heard[k]; ok && h != nil {
		for _, sl := range h.slots {
			if sl.owner == sender && sl.gen == gen {
				told = max(told, sl.last+via) // coming back
			}
		}
	}
	return min(told, others), ok
}

// aggSwitchToldLocked is aggSwitchLocked without the bound to others nor
// the subscription sender's: what the other told, and what it charged
// since this node switched to it. Caller holds s.mu.
func (s *Syncer) aggSwitchToldLocked(k aggKey, sender string) (told, via uint64, ok bool) {
	u := s.owner.agg.hot[[2]string{k.rule, k.key}]
	if u == nil || u.cameFrom == "" {
		return 0, 0, false
	}
	from := u.cameFrom
	u.cameFrom = ""
	if from == s.self {
		// It heard the key through its own group, which it handed on:
		// what lies above the group's total (aggHandOnLocked); any other
		// own group's view comes from the owner's answers (aggFirstLocked).
		// A subscription it comes back to was raised at the hand-on.
		ok := u.handedSwitch && u.handedWindow == k.window
		u.handedSwitch = false
		return u.handedUpTo, 0, ok
	}
	h := s.owner.heard[k]
	if h == nil || from == sender {
		return 0, 0, false
	}
	var last, since time.Duration = -1, -1
	for _, sl := range h.slots {
		switch {
		case sl.owner == from && sl.at > last:
			last, told, via = sl.at, sl.last, sl.last-min(sl.last, sl.base)
		case sl.owner == sender:
			since = max(since, sl.at)
		}
	}
	return told, via, last > since
}

// raise raises the slot's last to v, a floor rather than a charge: its
// base rises with it, what it charged since the switch stays.
func (sl *heardSlot) raise(v uint64) {
	if v > sl.last {
		sl.base += v - sl.last
		sl.last = v
	}
}

// aggOwnedHereLocked reports whether this node owns (rule, key) on its
// ring: a user whose key's owner died or left and who became its owner
// counts the key itself (the groups' counters, its own consumption), so it
// neither sends its counters through an aggregator nor takes an
// aggregator's answers, which would charge it everything a second time
// (100 simulated nodes under churn: a user that became the owner took its
// old aggregator's answers for 18 s and ended charged 1,951 tokens more
// than the others admitted). Caller holds s.mu, the ring refreshed.
func (s *Syncer) aggOwnedHereLocked(rule, key string) bool {
	owner, _ := s.owner.ring.owners(rule, key)
	return owner == s.self
}

// aggHandOnLocked notes that this node hands on its group g of k (its ring
// names it no aggregator of the key any more, or names it the key's
// replica: aggRoundLocked): the owner's
// answers to that group charge nothing from now on (aggOwnAnswerLocked),
// and this node, a user of its new aggregator, switches from itself. The
// group's total is what it heard of the key in the owner's numbering (the
// owner's view and the group's consumption, charged here as it was
// counted): the subscriptions it holds, the first answer it takes from an
// aggregator (aggSwitchLocked) and a subscription the owner starts here
// (aggHandedFloorLocked) charge only what lies above it. Without that
// floor, an aggregator that had been a user (its ring flapped) took its
// old aggregator's answer on the subscription it had left, and was
// charged everything it had heard through its group since: 28 nodes ended
// 108-439 tokens over; and one that had never been a user (no aggUse: its
// own counters went to the owner, which only acknowledges an aggregator's
// own counters while its group is active, and then answers them from
// where it stopped) was told the key's whole history: 1,358 over (1,000
// simulated nodes, 10%/min churn, seed 3).
//
// A subscription above the group's total (its aggregator counted in a
// higher numbering: the group was made while the key was failed over, its
// first answer from a joiner owner or the replica, whose aggregates count
// from the failover) adds instead what the owner's answers to the group
// added, in no numbering. A replica's group went without a hand-on, and
// its aggregator's answer on the subscription it had left charged again
// everything the group had told it (300 simulated nodes, 10%/min churn,
// the owner killed at 8 s, seed 9: the old replica aggregated the joiner
// owner's lower numbering from 15.5 s to 18.9 s, told 0 to 324 there, then
// was charged 347 for the others' 23, and ended +501:
// TestAggregatorMadeReplicaComesBackOnce). Caller holds s.mu.
func (s *Syncer) aggHandOnLocked(k aggKey, g *aggGroup, now time.Duration) {
	st := &s.owner.agg
	hk := [2]string{k.rule, k.key}
	u := st.hot[hk]
	if u == nil {
		if len(st.hot) >= s.cfg.MaxSeen {
			return
		}
		if st.hot == nil {
			st.hot = map[[2]string]*aggUse{}
		}
		u = &aggUse{used: now} // its counters go to its aggregator from now on (aggSendLocked)
		st.hot[hk] = u
	}
	u.handed = g.epoch
	if !g.upSet {
		return // the owner never answered the group: no numbering to go on from
	}
	u.handedUpTo, u.handedWindow, u.handedFrom, u.handedAt, u.handedSwitch = g.o.total, k.window, g.upFrom, now, true
	u.heardFrom, u.cameFrom, u.baseSet = s.self, "", false
	u.handedAlt, u.handedAltUpTo = "", 0
	if h := s.owner.heard[k]; h != nil {
		// The other owner that answered the group, before the raise below (owneraggfloor.go).
		u.handedAlt, u.handedAltUpTo = handedAltOf(h, g.upFrom)
		// And the group's own consumption it counted (owneraggfloor.go).
		u.handedAltUpTo += g.altCounted(u.handedAlt)
		var via uint64 // charged through the group: what the owner's answers to it added
		for _, sl := range h.slots {
			if sl.owner == g.upFrom && !sl.own {
				via = max(via, sl.last-min(sl.last, sl.base))
			}
		}
		for i := range h.slots {
			sl := &h.slots[i]
			if sl.last > g.o.total && (sl.owner != g.upFrom || sl.own) {
				sl.raise(sl.last + via) // a subscription in a higher numbering than the group's
			}
			sl.raise(g.o.total)
		}
	}
	s.aggHandedNoteLocked(k, u, g) // owneraggflap.go
}

// aggHandedFloorLocked adjusts a, an answer of the key's owner (sender) to
// this node's own counter while it holds no group of the key: after this
// node handed its group on, its subscription starts (or goes on) at least
// from the group's total, if sender is the owner whose numbering
// that is (aggHandOnLocked), within subTTL, and from what its new
// aggregator told it since; if sender is the other owner that last
// answered the group (the replica after a failover), from what it told
// the group and what this node charged since (owneraggfloor.go). The owner only acknowledged an aggregator's
// own counter while its group was active, and answers it from there once
// the group is idle. Caller holds s.mu.
func (s *Syncer) aggHandedFloorLocked(sender string, a ownerAnswer) ownerAnswer {
	u := s.owner.agg.hot[[2]string{a.rule, a.key}]
	if u == nil || u.handedWindow != a.window || s.sinceBorn()-u.handedAt > s.subTTL() {
		return a
	}
	k := aggKey{a.rule, a.key, a.window}
	var floor uint64
	switch sender {
	case u.handedFrom:
		floor = max(u.handedUpTo, s.aggHeardElsewhereLocked(k, sender, a.others))
	case u.handedAlt:
		floor = s.aggHandedAltFloorLocked(k, u) // owneraggfloor.go
	default:
		return a
	}
	if h := s.owner.heard[k]; h != nil {
		for i := range h.slots {
			if sl := &h.slots[i]; sl.owner == sender && sl.gen == a.gen {
				sl.raise(floor) // raised to the group's total at the hand-on
				return a
			}
		}
	}
	a.prev = max(a.prev, floor)
	return a
}
