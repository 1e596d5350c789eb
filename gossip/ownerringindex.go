package gossip

import "math/bits"

// The owner ring's index. Finding a hash's place on the ring by binary
// search over its points costs a step per doubling of the membership, and
// at 10,000 members the points are 10 MB: most of the search's 20 steps
// miss the CPU's caches. Each lookup of a key's owner (several per packet
// sent or answered) then costs about three times what it costs at 50
// members (BenchmarkOwnerRingLookup). So a ring also keeps, for each of 2^b
// equal slices of the hash space (about one point each), the first point
// in it: a lookup reads one index entry and scans the points of one slice,
// whatever the membership. The answers are the binary search's
// (TestOwnerRingIndexIsTheSearch).

// indexPoints builds r's index over its points (sorted). Call it once the
// points are final.
func (r *ownerRing) indexPoints() {
	r.index, r.shift = nil, 0
	if len(r.points) == 0 {
		return
	}
	b := max(1, bits.Len(uint(len(r.points)))-1) // 2^b slices: one to two points each on average
	r.shift = uint(64 - b)
	r.index = make([]uint32, 1<<b+1)
	i := 0
	for s := range r.index[:1<<b] {
		for i < len(r.points) && r.points[i].hash>>r.shift < uint64(s) {
			i++
		}
		r.index[s] = uint32(i)
	}
	r.index[1<<b] = uint32(len(r.points))
}

// search returns the index of the first point at or after hash h (its
// hash >= h), len(r.points) if there is none: slices.BinarySearchFunc's
// answer over the points' hashes.
func (r *ownerRing) search(h uint64) int {
	s := h >> r.shift
	i, end := int(r.index[s]), int(r.index[s+1])
	for i < end && r.points[i].hash < h {
		i++
	}
	return i
}
