package bucket

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Crowds: what a node has heard of how many nodes use the keys of a rule,
// for FirstContactAuto (firstshare.go).
//
// At first contact a node cannot tell a key every node meets at once (a
// herd: its share of the burst must be burst / members, or the cluster
// admits a token per node) from a key the cluster uses lightly that this
// node meets now and then (each call a first contact: its bucket was swept
// since; held to burst / members it is refused far below its limit). The
// key itself is unknown to it; its rule is not. So each store keeps, per
// rule, the largest count of users the keys' owners said at a first
// contact (the first view heard while a bucket is held: SetOwnerView),
// decaying by half every crowdHalfLife, and a new bucket of a rule heard
// of within crowdTTL is held to burst / that crowd instead of burst /
// members (rounded at random, and never more than FirstContactToken
// would). Users are counted over the time the rate takes to refill the
// burst (gossip's users window), so burst / users is about the rate over
// the key's demand: at least one token for a key offered below its limit,
// a share for a key crowded beyond it. A rule nobody spoke of lately is
// held to burst / members, as FirstContactShare.
//
// What it cannot do: a key of a rule known as light that every node meets
// at once is admitted up to a token per node, as FirstContactToken (its
// owner then tells every node a crowd of that size, and the rule's new keys
// are held to their share until it has decayed: log2(members / burst)
// half-lives). A rule whose keys are sometimes met by crowds (one key
// called by every node now and then, beside light ones) has its light keys
// held to that crowd's share too.
//
// The table is fixed: crowdSlots entries, a rule's at its namespace modulo
// crowdSlots (daemons number rules from 1, so up to crowdSlots rules never
// share one). An entry names its rule: a rule whose slot another rule took
// is not known (held to burst / members). Reading is two atomic loads, no
// allocation; notes (one per first contact's view, from gossip) take a
// mutex.

// crowdSlots is how many rules' crowds a store keeps.
const crowdSlots = 256

// crowdHalfLife is how fast a rule's crowd decays: a herd's crowd (every
// node) falls below a burst of a tenth of the members in 3.3 half-lives.
const crowdHalfLife = 10 * time.Second

// crowdTTL is how long a rule's crowd is believed after its last note.
const crowdTTL = usersTTL

// crowdTable is a store's crowds. The zero value knows no rule.
type crowdTable struct {
	mu    sync.Mutex // serialises notes
	slots [crowdSlots]crowdSlot
}

// crowdSlot is one rule's crowd: the rule's namespace and the crowd (as
// float32 bits) in one word, so that a reader sees them together, and the
// time of the last note (Unix ns; 0: never).
type crowdSlot struct {
	word atomic.Uint64
	at   atomic.Int64
}

// decayed is crowd c noted at at, as of now.
func decayed(c float64, at, now int64) float64 {
	if now <= at {
		return c
	}
	return c * math.Exp2(-float64(now-at)/float64(crowdHalfLife))
}

// crowd reports the crowd of ns's keys as of now, if ns was noted within
// crowdTTL.
func (ct *crowdTable) crowd(ns Namespace, now time.Time) (float64, bool) {
	sl := &ct.slots[uint32(ns)%crowdSlots]
	w := sl.word.Load()
	at := sl.at.Load()
	n := now.UnixNano()
	if at == 0 || Namespace(w>>32) != ns || n-at > int64(crowdTTL) {
		return 0, false
	}
	return decayed(float64(math.Float32frombits(uint32(w))), at, n), true
}

// note records that a key of ns had users users when this node first heard
// its owner's view (at first contact).
func (ct *crowdTable) note(ns Namespace, users uint64, now time.Time) {
	c := float64(max(users, 1))
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if old, ok := ct.crowd(ns, now); ok {
		c = max(c, old)
	}
	sl := &ct.slots[uint32(ns)%crowdSlots]
	sl.word.Store(uint64(ns)<<32 | uint64(math.Float32bits(float32(min(c, math.MaxFloat32)))))
	sl.at.Store(max(1, now.UnixNano()))
}

// Crowd reports the crowd FirstContactAuto holds a new key of ns to as of
// now (crowd.go), if ns was heard of lately.
func (s *Store) Crowd(ns Namespace, now time.Time) (float64, bool) { return s.crowds.crowd(ns, now) }
