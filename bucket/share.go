package bucket

import "time"

// A node's share of a key's balance (issue 20, owner mode at large N).
//
// In owner mode (gossip/owner.go) every node that uses a key hears the
// cluster's view of it from the key's owner, a gossip delay late, and
// decides on that view. When the view turns positive (a refill after a
// debt, or at first) every node using the key sees it at about the same
// moment and each would admit: the overshoot per refill grows with the
// number of nodes. So the owner also tells each node how many nodes use the
// key now (SetUsers), and a node admits from a positive balance b only its
// share of it, b/users: a take whose cost is beyond that share is admitted
// with probability share/cost (a coin of the store's seeded generator),
// so the cluster admits about b, whatever the number of nodes, and each
// node's admissions follow its own demand. A node that has not heard the
// count lately (SetUsers' word goes stale after usersTTL) decides on its
// balance alone: what it does not know errs toward admitting more.
//
// A node that is refused a key, or held to its first share, asks to hear
// of it: the take puts the key on the dirty list with nothing new admitted
// (a touch), and gossip, in owner mode, sends such a counter to the key's
// owner at most every so often (gossip/ownershare.go), so the node is told
// the key's debt before its hold ends and keeps hearing of the key while
// it is refused. Other modes ignore touches.

// touchQueued marks tracking.users while a touch of the key is on the
// dirty list (so a key refused many times between drains is listed once).
const touchQueued = 1 << 31

// usersTTL is how long a count of users from the owner holds, in seconds:
// the owner answers a node that uses a key at least once a second.
const usersTTL = 3

// maxUsers caps the count a store holds.
const maxUsers = touchQueued - 1

// SetUsers notes that users nodes of the cluster use the key now, as the
// key's owner says (see above), and ends the key's first-contact hold:
// this node has heard the cluster's view of it. A key the store holds no
// bucket for is left alone. Safe to call concurrently with everything
// else.
func (s *Store) SetUsers(ns Namespace, key []byte, users uint64, now time.Time) {
	if !s.track || s.validateKey(key) != nil {
		return
	}
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	if sl := sh.get(h, ns, key); sl != nil {
		t := sl.tracked()
		t.users = t.users&touchQueued | uint32(min(users, maxUsers))
		t.until = uint32(now.Unix() + usersTTL)
		t.born = 0
	}
	sh.mu.Unlock()
}

// beyondShare reports whether a take of cost, on a key whose owner said
// how many nodes use it, goes beyond this node's share of a balance that
// would admit it (and lost the coin). The caller holds the shard's lock.
func (sh *shard) beyondShare(t *tracking, st *state, lim Limit, cost int64, now time.Time) bool {
	users := t.users &^ touchQueued
	if users <= 1 || int64(t.until) <= now.Unix() || lim.algo.Windowed() {
		return false
	}
	b := st.balance(lim, now)
	if b < float64(cost) {
		return false // the balance refuses it anyway
	}
	share := b / float64(users)
	if share >= float64(cost) {
		return false
	}
	return sh.coin() >= share/float64(cost)
}

// touch puts the slot's key on the dirty list with nothing new admitted,
// unless it is there already. Windowed algorithms are not touched. The
// store tracks consumption, and the caller holds sh.mu.
func (sh *shard) touch(sl *slot, lim Limit) {
	t := sl.tracked()
	if t.users&touchQueued != 0 || t.used != t.sent || lim.algo.Windowed() {
		return
	}
	t.users |= touchQueued
	sh.dirty = append(sh.dirty, dirtyKey{p: sl.p, ns: sl.ns, size: uint32(sl.keyLen())})
}

// coin draws a uniform number in [0, 1) from the shard's generator. The
// caller holds sh.mu.
func (sh *shard) coin() float64 {
	sh.rnd += 0x9e3779b97f4a7c15
	return unit(mix64(sh.rnd))
}

// offset is a bucket's fixed rounding of its first share (firstshare.go),
// uniform in [0, 1) and drawn once per bucket (from its epoch), so that a
// bucket asked many times is not given a new chance each time.
func (s *Store) offset(epoch uint64) float64 { return unit(mix64(s.coinSeed ^ epoch)) }

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
