package bucket

import (
	"math"
	"time"
)

// A node's share of a key's balance (issue 20, owner mode at large N).
//
// In owner mode (gossip/owner.go) every node that uses a key hears the
// cluster's view of it from the key's owner, a gossip delay late (an idle
// node up to a second late), and decides on that view. When the view
// turns positive (a refill after a debt, or at first) every node using
// the key sees it at about the same moment and each would admit: the
// overshoot per refill grows with the number of nodes; and a node whose
// view is stale sees its bucket refilled by the rate while the others
// spent the refill. So the owner also tells each node how many nodes use
// the key now (SetOwnerView), and a node admits, between two answers, only
// its share of what the cluster may admit: (the balance at the answer +
// the rate since, at most the burst) / users, less what it admitted
// since (the refill of one gossip interval granted at the answer, so that
// the share does not depend on when the node calls between two answers of
// an active key); a share below one token is rounded up or down at random,
// once per answer (so calling many times is no more chances). The cluster then
// admits about its balance plus the refill whatever its size, and each
// node admits as it calls. This is the first-contact hold's rule
// (firstshare.go) with the owner's count of users for the members, and
// the key's balance at the last answer for the burst. A node that has not
// heard the count for long (usersTTL), or whose counters of the key went
// unanswered (gossip tells it: SetOwnerView with 0), decides on its balance
// alone: what it does not know errs toward admitting more.
//
// A node that is refused a key, or held to its first share, asks to hear
// of it: the take puts the key on the dirty list with nothing new admitted
// (a touch), and gossip, in owner mode, sends such a counter to the key's
// owner at most every so often (gossip/ownershare.go), so the node is told
// the key's debt before its hold ends and keeps hearing of the key while
// it is refused. Other modes ignore touches.
//
// Shares rounded at random are fair in expectation only: at a few tokens
// per node per window (50 nodes sharing 100/s) one node takes twice
// another's. So the fair floor (floor.go) stays beside the share, shared
// by the key's users rather than the cluster's members, while the burst
// holds a token per user (viewFloor): 40% → 96% of 2 s shares within ±25%
// at 50 simulated nodes.
//
// Memory: the owner's views live in a side table per shard (views.go),
// keyed by the bucket's epoch, for the keys with a fresh view of more than
// one user only; every other key's tracking stays 32 bytes (issue 16), and
// a decision on a key of a shard that holds no view reads nothing more.

// touchQueued marks tracking.sent while a touch of the key is on the dirty
// list with nothing new admitted since the last drain (so a key refused
// many times between drains is listed once). used, below 2^63, then
// differs from sent, which is what "on the dirty list" means; the drain
// reports sent without the mark.
const touchQueued = 1 << 63

// sentOf is a tracking's sent count without the touch mark.
func sentOf(t *tracking) uint64 { return t.sent &^ touchQueued }

// usersTTL is how long a count of users from the owner holds. A node that
// calls a key rarely hears of it only while it calls: between its calls
// it keeps its last view, and its share refills up to burst/users (what a
// node calling once in a while may take, whatever the cluster's size). A
// view that is wrong by then (the key's users changed) costs at most a
// refusal: the refusal touches the key, and the owner's answer brings a
// new view two intervals later. A node that loses the key's owner is told
// so (SetOwnerView with 0 users) and decides on its balance alone.
const usersTTL = 5 * time.Minute

// maxUsers caps the count a store holds.
const maxUsers = math.MaxUint32

// OwnerView is what a key's owner says of it (gossip's owner mode): how
// many nodes use it (0: the owner is lost, decide on the balance alone),
// and its balance as the owner sees it (NaN: not said), having counted this
// node's own admissions up to Counted in the bucket epoch Epoch.
type OwnerView struct {
	Users          uint64
	Balance        float64
	Epoch, Counted uint64
	// Interval is about how often the owner answers a node that uses the
	// key (the gossip interval): the refill of one interval is granted
	// at once, so that a node's share does not depend on when it calls
	// between two answers.
	Interval time.Duration
}

// SetOwnerView notes what the key's owner says of it (see above) and ends
// the key's first-contact hold: this node has heard the cluster's view of
// it. The balance a share is taken of is the owner's, less this node's
// admissions it has not counted yet, or, when the owner did not say, the
// key's balance here under lim. A key the store holds no bucket for is
// left alone; a view of one user or fewer is not kept (the balance alone
// decides). Safe to call concurrently with everything else.
func (s *Store) SetOwnerView(ns Namespace, key []byte, lim Limit, v OwnerView, now time.Time) {
	if !s.track || s.validateKey(key) != nil || lim.algo.Windowed() {
		return
	}
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sl := sh.get(h, ns, key)
	if sl == nil {
		return
	}
	t, st := sl.tracked(), sl.stateFor(lim)
	if _, held := st.heldSince(); held && v.Users > 0 {
		st.setShareClock(0) // the cluster's view heard: the hold is over (a lost owner leaves it to its time)
		if s.firstContact == FirstContactAuto {
			s.crowds.note(ns, v.Users, now) // the crowd at a first contact (crowd.go)
		}
	}
	if v.Users <= 1 {
		sh.views.forget(t.epoch)
		return
	}
	b := v.Balance + float64(v.Interval)/lim.nanosPerToken
	switch {
	case math.IsNaN(b):
		b = st.balance(lim, now) + float64(v.Interval)/lim.nanosPerToken
	case v.Epoch == t.epoch && v.Counted <= t.used:
		b -= float64(t.used - v.Counted)
	case v.Epoch != t.epoch:
		b -= float64(t.used)
	}
	sh.views.put(t.epoch, view{
		users:  uint32(min(v.Users, maxUsers)),
		heard:  now.Add(v.Interval).UnixNano(),
		ans:    min(b, float64(lim.burst)),
		usedAt: t.used,
	}, s.maxViews, now)
}

// shareDecides reports whether a take of cost is decided by this node's
// share of a key whose owner said lately how many nodes use it (v, see
// above), and if so whether the share admits it. It does, the key's
// balance here aside: the owner's balance is the cluster's, this node's
// lags it (a node that hears of the key a second late has its bucket
// refilled to the burst meanwhile, then charged all the others spent: its
// view ends below the cluster's, and under contention the nodes whose
// views lag most would get least). The caller holds the shard's lock.
func (s *Store) shareDecides(v view, t *tracking, lim Limit, cost int64, now time.Time) (admit bool) {
	age := max(0, now.UnixNano()-v.heard)
	pool := min(float64(lim.burst), v.ans+float64(age)/lim.nanosPerToken)
	share := pool/float64(v.users) - float64(t.used-v.usedAt)
	return float64(cost) <= math.Floor(share+s.offset(t.epoch^uint64(v.heard)<<17))
}

// viewFloor is the fair floor (floor.go) of a key with an owner's view v:
// shared by its users, its first token due at random in its first spacing
// (per bucket), so that the floors of nodes that met the key at the same
// moment do not come due together. Only while the burst holds a token per
// user (as main's floor: down to a token per user below zero): beyond,
// floors that come due while a debt is paid back come due together once
// it is, a token on every node at once, more than the burst (simulated,
// 3,000 nodes at 20 req/s each: 153% of the limit over 5 s), and a node's
// share of a refill is below a token anyway. ok is false then: no floor,
// and it earns nothing meanwhile (floorAside).
func (s *Store) viewFloor(v view, t *tracking, lim Limit) (f floorOf, ok bool) {
	if int64(v.users) > lim.burst {
		return floorOf{}, false
	}
	return floorOf{members: int64(v.users), phase: 1 - s.offset(t.epoch^0x5bd1e995), depth: -float64(v.users) - 1}, true
}

// floorBalance is the balance the fair floor judges a debt by: with an
// owner's view, the owner's balance at the answer plus the refill since,
// less this node's admissions since (its own lags the cluster's); without,
// the key's balance here.
func (s *Store) floorBalance(v view, viewed bool, st *state, t *tracking, lim Limit, now time.Time) float64 {
	if !viewed {
		return st.balance(lim, now)
	}
	age := max(0, now.UnixNano()-v.heard)
	return v.ans + float64(age)/lim.nanosPerToken - float64(t.used-v.usedAt)
}

// touch puts the slot's key on the dirty list with nothing new admitted,
// unless it is there already. Windowed algorithms are not touched. The
// store tracks consumption, and the caller holds sh.mu.
func (sh *shard) touch(sl *slot, lim Limit) {
	t := sl.tracked()
	if t.used != t.sent || lim.algo.Windowed() {
		return // on the list already (or touched)
	}
	t.sent |= touchQueued
	sh.dirty = append(sh.dirty, dirtyKey{p: sl.p, ns: sl.ns, size: uint32(sl.keyLen())})
}

// offset is the fixed rounding of a share (firstshare.go, above), uniform
// in [0, 1) and drawn once per bucket and answer (from its epoch and the
// answer's time: x), so that a bucket asked many times is not given a new
// chance each time.
func (s *Store) offset(x uint64) float64 { return unit(mix64(s.coinSeed ^ x)) }

// unit maps 64 random bits to [0, 1).
func unit(x uint64) float64 { return float64(x>>11) / (1 << 53) }

// mix64 is splitmix64's finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
