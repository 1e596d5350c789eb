package gossip

import (
	"cmp"
	"slices"
)

// Owner rings updated in place of rebuilt. A ring holds ringVnodes points
// per member, sorted: built whole it costs a sort of 64·N points (at 10,000
// members 640,000, hundreds of milliseconds: BenchmarkOwnerRingBuild), and
// a node rebuilt it at every membership change, which a cluster sees N
// times as often as it has members (1% of 10,000 nodes replaced per minute
// is over 3 changes a second): a cost per node growing as N² log N. A
// member joining or going changes only its own points, so the new ring is
// the old one with those points merged in or filtered out, in one pass
// over the points (the members' indices shifted past the one added or
// removed). The result is the very ring newOwnerRing builds from the new
// member list (TestOwnerRingDeltaIsTheRebuiltRing).

// ringDeltaMax is how many members may have changed since the last ring
// for an update member by member; beyond, the ring is rebuilt whole (each
// update is a pass over every point).
const ringDeltaMax = 16

// with returns the ring with member name added (or removed, if !add): r
// itself when it already holds (or lacks) it. r is not changed.
func (r *ownerRing) with(name string, add bool) *ownerRing {
	pos, found := slices.BinarySearch(r.names, name)
	if found == add {
		return r
	}
	out := &ownerRing{}
	if !add {
		out.names = slices.Delete(slices.Clone(r.names), pos, pos+1)
		out.points = make([]ringPoint, 0, len(r.points)-ringVnodes)
		for _, p := range r.points {
			switch {
			case p.node == int32(pos):
				continue
			case p.node > int32(pos):
				p.node--
			}
			out.points = append(out.points, p)
		}
		out.indexPoints()
		out.nameHashes = slices.Delete(slices.Clone(r.nameHashes), pos, pos+1)
		return out
	}
	out.names = slices.Insert(slices.Clone(r.names), pos, name)
	mine := make([]ringPoint, ringVnodes)
	for i := range mine {
		mine[i] = ringPoint{pointHash(name, i), int32(pos)}
	}
	slices.SortFunc(mine, compareRingPoints)
	shifted := func(p ringPoint) ringPoint { // its index among the new names
		if p.node >= int32(pos) {
			p.node++
		}
		return p
	}
	out.points = make([]ringPoint, 0, len(r.points)+ringVnodes)
	from := 0
	for _, m := range mine { // each at its place: a binary search, then a copy of the points before it
		at, _ := slices.BinarySearchFunc(r.points[from:], m, func(p, m ringPoint) int { return compareRingPoints(shifted(p), m) })
		for _, p := range r.points[from : from+at] {
			out.points = append(out.points, shifted(p))
		}
		out.points = append(out.points, m)
		from += at
	}
	for _, p := range r.points[from:] {
		out.points = append(out.points, shifted(p))
	}
	out.indexPoints()
	out.nameHashes = slices.Insert(slices.Clone(r.nameHashes), pos, fnvAdd(fnvOffset, name))
	return out
}

// compareRingPoints is the ring's order: by hash, then by member (the
// index into the sorted names, so by name).
func compareRingPoints(a, b ringPoint) int {
	if c := cmp.Compare(a.hash, b.hash); c != 0 {
		return c
	}
	return cmp.Compare(a.node, b.node)
}

// ringChangedLocked records that member name joined or went since the
// ring was last built: the next ring is the last one updated for it.
// Caller holds s.mu.
func (s *Syncer) ringChangedLocked(name string) {
	if s.owner.ring != nil {
		s.owner.last, s.owner.changed = s.owner.ring, s.owner.changed[:0]
	}
	if len(s.owner.changed) <= ringDeltaMax {
		s.owner.changed = append(s.owner.changed, name)
	}
}

// ringFromLastLocked returns the ring of the members now, updated from the
// last ring built for the members that changed since; nil when there is
// none or too many changed (the caller builds it whole). Caller holds
// s.mu.
func (s *Syncer) ringFromLastLocked() *ownerRing {
	r := s.owner.last
	if r == nil || len(s.owner.changed) > ringDeltaMax {
		return nil
	}
	for _, name := range s.owner.changed {
		_, member := s.peers[name]
		r = r.with(name, member || name == s.self)
	}
	if r.size() != s.othersLocked()+1 {
		return nil // a change it was not told of: build it whole
	}
	return r
}
