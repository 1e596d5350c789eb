package gossip

import (
	"cmp"
	"slices"
	"sync"
)

// The owner ring. In owner mode (owner.go) each (rule, key) has an owner,
// chosen by consistent hashing over the members that speak the owner
// protocol: every member sits on a ring of 64-bit hashes at ringVnodes
// points, and a key's owner is the member at the first point at or after
// the key's hash, its replica the next distinct member after it. Every node
// builds the ring from its own member list, so two nodes agree on a key's
// owner exactly when they agree on the membership; when a member joins or
// goes, only the keys on the arcs it gains or loses move (about 1/N of
// them).
//
// The hash is FNV-1a (a fixed function: every node must compute the same
// one, so no per-process seed) finished with splitmix64's mixer, which
// spreads names that differ in one character over the whole ring.

// ringVnodes is how many points each member takes on the ring: with 64 the
// most loaded of 100 members owns about 1.3 times the average share of keys
// (measured in TestRingBalance).
const ringVnodes = 64

// ownerRing is an immutable ring; a new one is built on membership changes.
type ownerRing struct {
	points []ringPoint
	names  []string // distinct members, for counting
	// nameHashes are the names' FNV-1a hashes, as aggSlot hashes them.
	nameHashes []uint64
	index      []uint32 // the first point of each slice of the hash space (ownerringindex.go)
	shift      uint     // a hash's slice is hash >> shift
}

type ringPoint struct {
	hash uint64
	node int32 // index into names
}

// mix64 is splitmix64's finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// FNV-1a's parameters (hash/fnv's, written out so hashing allocates nothing).
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvAdd(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

// pointHash is the hash of member name's i-th point.
func pointHash(name string, i int) uint64 {
	h := fnvAdd(fnvOffset, name)
	h = fnvByte(fnvByte(fnvByte(h, 0), byte(i)), byte(i>>8))
	return mix64(h)
}

// keyHash is the hash of a (rule, key) on the ring. The window is not part
// of it: a windowed key keeps its owner from one window to the next.
func keyHash(rule, key string) uint64 {
	return mix64(fnvAdd(fnvByte(fnvAdd(fnvOffset, rule), 0), key))
}

// newOwnerRing builds the ring of the given members (duplicates ignored).
func newOwnerRing(names []string) *ownerRing {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	r := &ownerRing{names: names, points: make([]ringPoint, 0, len(names)*ringVnodes)}
	for n, name := range names {
		for i := range ringVnodes {
			r.points = append(r.points, ringPoint{pointHash(name, i), int32(n)})
		}
	}
	slices.SortFunc(r.points, func(a, b ringPoint) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return cmp.Compare(a.node, b.node)
	})
	r.indexPoints()
	r.hashNames()
	return r
}

// hashNames sets r.nameHashes from r.names.
func (r *ownerRing) hashNames() {
	r.nameHashes = make([]uint64, len(r.names))
	for i, name := range r.names {
		r.nameHashes[i] = fnvAdd(fnvOffset, name)
	}
}

// size is the number of members on the ring.
func (r *ownerRing) size() int {
	if r == nil {
		return 0
	}
	return len(r.names)
}

// owners returns the owner of (rule, key) and its replica ("" when the ring
// has one member); both "" on an empty ring.
func (r *ownerRing) owners(rule, key string) (owner, replica string) {
	if r.size() == 0 {
		return "", ""
	}
	h := keyHash(rule, key)
	i := r.search(h) // ownerringindex.go
	first := r.points[i%len(r.points)].node
	owner = r.names[first]
	for j := 1; j < len(r.points) && len(r.names) > 1; j++ {
		if n := r.points[(i+j)%len(r.points)].node; n != first {
			return owner, r.names[n]
		}
	}
	return owner, ""
}

// third returns the third distinct member after (rule, key)'s hash in ring
// order, after its owner and replica ("" when the ring has fewer than
// three members): where a key's counters go when both its owner and its
// replica are silent (ownerchain.go). It is the key's owner on the ring
// without those two, as the cluster's ring becomes once it declares both
// dead.
func (r *ownerRing) third(rule, key string) string {
	if r.size() < 3 {
		return ""
	}
	i := r.search(keyHash(rule, key))
	first := r.points[i%len(r.points)].node
	second := int32(-1)
	for j := 1; j < len(r.points); j++ {
		n := r.points[(i+j)%len(r.points)].node
		switch {
		case n == first || n == second:
		case second < 0:
			second = n
		default:
			return r.names[n]
		}
	}
	return ""
}

// memberHash is a member's part of a membership's fingerprint (XORed).
func memberHash(name string) uint64 { return mix64(fnvAdd(fnvOffset, name) ^ 0x6f776e6572) }

// RingCache shares owner rings between the syncers of one process that see
// the same members: a simulation's thousands of syncers would otherwise
// each hold a ring of every member (at 10,000 members, 640,000 points and
// 10 MB each). Rings are keyed by a fingerprint of the member set (the XOR
// of a hash of each name, and the count); the most recent ringCacheSize
// are kept. A daemon has one syncer and needs none. Safe for concurrent
// use.
type RingCache struct {
	mu    sync.Mutex
	rings map[uint64]*ownerRing
	order []uint64 // oldest first
}

const ringCacheSize = 16

// NewRingCache returns an empty cache.
func NewRingCache() *RingCache { return &RingCache{rings: map[uint64]*ownerRing{}} }

// get returns the ring of fingerprint fp, building it if need be.
func (c *RingCache) get(fp uint64, build func() *ownerRing) *ownerRing {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.rings[fp]; ok {
		return r
	}
	r := build()
	if len(c.order) >= ringCacheSize {
		delete(c.rings, c.order[0])
		c.order = c.order[1:]
	}
	c.rings[fp] = r
	c.order = append(c.order, fp)
	return r
}
