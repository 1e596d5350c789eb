package bucket

import (
	"math"
	"time"
)

// The fair floor. In a cluster every daemon decides on its own view of a
// key's shared balance, which lags the others' consumption by a gossip
// delay; under contention the balance hovers around zero and each token
// the refill brings goes to whichever node sees it first. Nodes do not see
// it at the same time (their views differ by what is in flight to each,
// which depends on the gossip rounds' phases), so under even demand one
// node could take 40% more than its share and another 30% less, run after
// run (issue 20's fairness goal is ±25% of 1/N over 2 s).
//
// So each daemon keeps, per key, a floor: when its own admissions of the
// key have run below (1 − floorMargin) × rate / members, it admits the
// next request even though the shared balance refuses it, charging the
// balance all the same (the consumption is real and gossiped like any
// other). A node that keeps losing the race therefore still gets nearly
// its share. Floors apply only while the balance is within a token per
// member below zero, where contention keeps it; a deeper debt is paid back
// as before. The floors of all
// members together are below the rate, so the long-run total stays
// burst + rate × T. With an owner's view of the key (share.go) the
// floor is shared by the key's users instead, and stands aside when they
// outnumber the burst's tokens. A node alone in its cluster has no floor, and
// windowed algorithms, reservations (MaxDelay) and multi-check decisions
// are not floored.

// floorMargin is the part of a node's share of the rate its floor leaves
// to the shared balance: it bounds how slowly a debt is paid back while
// every node lives on its floor.
const floorMargin = 0.05

// floorSlack is how many tokens of its floor a node may catch up at once
// after its own admissions fell behind (a GCRA's tolerance): without it a
// node admitted by its balance now and then, at random, kept only the
// spacing of its floor after each admission, and fell well short of it.
const floorSlack = 4

// floorAdmits reports whether the tracked bucket's own admissions have run
// below its floor, so a take refused by the balance (now balance) is
// admitted. Only near zero: a balance deeper than a token per member
// (each may take one before hearing of the others) is a debt to pay back
// (after a first contact, a partition, a reset), and floors would slow
// that down. (Down to the rate for one propagation delay was tried: a
// first contact's debt was then repaid at 5% of the rate, 110% of the
// limit over 5 s at 10 nodes and 200 ms.) The caller holds the shard's lock.
func (s *Store) floorAdmits(st *state, lim Limit, balance float64, f floorOf, now time.Time) bool {
	members := f.members
	if members <= 1 || lim.algo.Windowed() {
		return false
	}
	floor := st.shareClock()
	switch {
	case floor < 0: // held to its first share: no floor yet
		return false
	case floor == 0: // the floor starts at this node's first use: no credit for the time before
		st.setShareClock(now.UnixNano() + int64(f.phase*floorPer(lim, members)))
		return false
	case floor > now.UnixNano():
		return false
	}
	return balance > f.depth
}

// floorAside notes that the tracked bucket's floor stands aside at a take
// at now (an owner's view of more users than the burst's tokens, members:
// viewFloor): a floor that came due meanwhile moves on by whole spacings to
// its next due time after now, keeping its phase, so that it earns nothing
// while it stands aside and the floors of many nodes come back each at its
// own moment, spread over a spacing as they started. Left behind, every
// node's floor came due while they stood aside and all admitted a token at
// once when the count fell back (100 simulated nodes counted 101-103 users
// for 0.6 s, then 100: 68 tokens in 0.1 s, in debt;
// TestFloorsThatStoodAsideComeBackSpread). A floor not yet due keeps its
// time, and a bucket held to its first share its hold. The caller holds
// the shard's lock.
func floorAside(st *state, lim Limit, members int64, now time.Time) {
	floor, n := st.shareClock(), now.UnixNano()
	if floor <= 0 || floor > n {
		return
	}
	per := floorPer(lim, members)
	next := float64(floor) + (math.Floor(float64(n-floor)/per)+1)*per
	if next >= math.MaxInt64 {
		st.setShareClock(0) // a spacing beyond the clock's range: it starts again at the next use
		return
	}
	st.setShareClock(int64(next))
}

// floorOf is who a key's floor is shared with and how: members is how many
// share the key (the cluster's size, or the users an owner counts:
// share.go); the floor's first token is due phase (in (0, 1]) of a spacing
// after this node's first use; depth is the deepest balance the floor
// admits at (below, a debt to pay back).
type floorOf struct {
	members int64
	phase   float64
	depth   float64
}

// clusterFloor is the floor of a key without an owner's view: shared by
// the cluster's members, starting a spacing after the first use, admitting
// down to a token per member below zero (each may take one before hearing
// of the others).
func (s *Store) clusterFloor() floorOf {
	m := s.firstMembers.Load()
	return floorOf{members: m, phase: 1, depth: -float64(m) - 1}
}

// floorPer is the floor's spacing of one token, in nanoseconds.
func floorPer(lim Limit, members int64) float64 {
	return float64(lim.nanosPerToken) * float64(members) / (1 - floorMargin)
}

// advanceFloor notes an admission of cost on the tracked bucket at now:
// its floor moves on by cost tokens at (1 − floorMargin) × rate / members,
// but never more than one token ahead of now: admissions above the floor
// are not saved against later ones, so a node that won many tokens a
// moment ago still has its floor in the next (the floor holds over
// seconds, not only in the long run). The long-run total does not depend
// on it: floors admit only while the balance is near zero. The caller
// holds the shard's lock.
func (s *Store) advanceFloor(st *state, lim Limit, cost int64, f floorOf, now time.Time) {
	members, phase := f.members, f.phase
	floor := st.shareClock()
	if members <= 1 || lim.algo.Windowed() || floor < 0 {
		return // no floor: alone, windowed, or held to its first share
	}
	per := floorPer(lim, members)
	n := now.UnixNano()
	from := n - int64(floorSlack*per)
	if floor == 0 {
		from = n - int64((1-phase)*per) // the floor starts at this node's first use
	}
	st.setShareClock(min(max(floor, from)+int64(float64(cost)*per), n+int64(per)))
}
