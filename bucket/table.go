package bucket

import (
	"encoding/binary"
	"math/rand/v2"
	"time"
	"unsafe"
)

// A shard keeps its keys in an open-addressing hash table laid out for the
// decision's memory reads: a decision on a key held in a large store costs
// one cache miss (a 56-byte slot spans one line or two adjacent ones,
// fetched together), for the key's slot, which holds the key's hash tag,
// namespace, algorithm and whole state, and the key itself when it is at
// most 15 bytes long (a longer key's bytes live apart, compared only when
// the tags match). The map of pointers to entries it replaces chased map
// group, entry and key bytes one after another under the shard's lock, and
// was slower at 100k and 1M keys than a mutex-guarded map of x/time/rate
// limiters.
//
// Slots are found by linear probing from the key's home slot (its tag
// scaled to the table's length, which need not be a power of two), so a
// probe that misses its home reads the next slot, adjacent, which the CPU
// fetches ahead. A removal shifts the slots after it back (no tombstones),
// so a lookup stops at the first empty slot. The table grows by a quarter
// when it is over 85% full, so past its first few keys it is 68-85% full
// (less memory per key than the map it replaced, at 10k, 100k and 1M keys),
// never beyond what holds the shard's cap 80% full, and Sweep shrinks it
// when it holds far more room than keys.
//
// Slots move when the table grows, shrinks or a key is removed: a *slot is
// valid under the shard's lock until the next insert or removal, and
// nothing outside the shard's own methods keeps one.

// slot is one key's place in its shard's table: 56 bytes. A slot holds one
// pointer, p, to its key's block (see setKey), which holds a long key's
// bytes and, in a store that tracks consumption, the key's tracking: a
// string header (16 bytes) or a second pointer would leave no room for a
// short key in as few bytes.
type slot struct {
	w     uint32         // the hash's tag (bits 3-31) and the algorithm st belongs to (bits 0-2); 0: empty
	ns    Namespace      // the key's rule
	st    state          // the key's state under its algorithm
	p     unsafe.Pointer // the key's block (never written but for its tracking); nil for a short key in a store that does not track
	short [16]byte       // a short key, its length in short[15]; for a long key, its length in short[:4]
}

// A slot is at most 56 bytes (this fails to compile otherwise).
const _ = uint(56 - unsafe.Sizeof(slot{}))

// maxShortKey is the longest key a slot holds inline.
const maxShortKey = 15

// longKey marks a slot's key as long (in short[15]).
const longKey = 0xFF

// algoBits is how many low bits of slot.w hold the algorithm.
const algoBits = 3

// Every algorithm fits in algoBits (this fails to compile otherwise).
const _ = uint(1<<algoBits - numAlgorithms)

// tagOf is the tag a key of hash h is kept and found under: never 0.
func tagOf(h uint64) uint32 { return uint32(h)&^(1<<algoBits-1) | 1<<algoBits }

func (sl *slot) tag() uint32         { return sl.w &^ (1<<algoBits - 1) }
func (sl *slot) algo() Algorithm     { return Algorithm(sl.w & (1<<algoBits - 1)) }
func (sl *slot) setAlgo(a Algorithm) { sl.w = sl.tag() | uint32(a) }

// keyLen is the length of the slot's key.
func (sl *slot) keyLen() int {
	if n := sl.short[maxShortKey]; n != longKey {
		return int(n)
	}
	return int(binary.LittleEndian.Uint32(sl.short[:4]))
}

// holds reports whether the slot's key is key (its tag is already known to match).
func holds[K string | []byte](sl *slot, key K) bool {
	if len(key) <= maxShortKey {
		return sl.short[maxShortKey] == byte(len(key)) && string(sl.short[:len(key)]) == string(key)
	}
	return sl.short[maxShortKey] == longKey && int(binary.LittleEndian.Uint32(sl.short[:4])) == len(key) &&
		unsafe.String((*byte)(sl.p), len(key)) == string(key)
}

// A key's block is one allocation, free of pointers, laid out as the key's
// bytes, padded to 8, then (in a store that tracks consumption) its
// tracking. A long key's slot compares the key there; a tracked key's
// tracking and the key gossip reports share it, so the string drained is
// never copied, and a block is never reused for another key (a string
// handed out stays as it was). A short key in a store that does not track
// has none: the slot is all it needs.

// trackingWords is the 8-byte words a block's tracking takes.
const trackingWords = int(unsafe.Sizeof(tracking{}) / 8)

// keyWords is the 8-byte words a key of n bytes takes in its block.
func keyWords(n int) int { return (n + 7) / 8 }

// setKey copies key into the slot, and into a new block if the key is long
// or track is set (the one allocation a new key may make).
func (sl *slot) setKey(key []byte, track bool) {
	n := len(key)
	if n <= maxShortKey {
		copy(sl.short[:], key)
		sl.short[maxShortKey] = byte(n)
	} else {
		binary.LittleEndian.PutUint32(sl.short[:4], uint32(n))
		sl.short[maxShortKey] = longKey
	}
	if n > maxShortKey || track {
		words := keyWords(n)
		if track {
			words += trackingWords
		}
		b := make([]uint64, words)
		sl.p = unsafe.Pointer(&b[0])
		copy(unsafe.Slice((*byte)(sl.p), n), key)
	}
}

// key returns the slot's key as a string: a tracked or long key's shares its
// block; a short untracked key's is copied (an allocation, for the paths
// that walk the store, never for a decision).
func (sl *slot) key() string {
	if sl.p != nil {
		return unsafe.String((*byte)(sl.p), sl.keyLen())
	}
	return string(sl.short[:sl.short[maxShortKey]])
}

// tracked is the slot's tracking, in its block. Only for a slot of a store
// that tracks consumption.
func (sl *slot) tracked() *tracking { return trackingOf(sl.p, sl.keyLen()) }

// trackingOf is the tracking in the block p of a key of n bytes.
func trackingOf(p unsafe.Pointer, n int) *tracking {
	return (*tracking)(unsafe.Add(p, 8*keyWords(n)))
}

// sameKey reports whether two slots hold the same (namespace, key).
func sameKey(a, b *slot) bool {
	return a.tag() == b.tag() && a.ns == b.ns && a.short == b.short && a.p == b.p
}

// tracking is a key's consumption as gossip reports it. It lives in the key's
// block, apart from the slot, so that a store that does not track keeps its
// slots small, and so that the dirty list can point at it while slots move.
type tracking struct {
	epoch  uint64 // this bucket's incarnation
	window uint64 // the window used counts in (windowed algorithms; 0 for the buckets)
	used   uint64 // tokens admitted here (not charged by peers) in this epoch and window
	sent   uint64 // used, as of the last drain; used != sent means it is on the dirty list
}

// A tracking is 32 bytes: a first-share hold and a fair floor live in the
// slot (see shareclock.go). This fails to compile otherwise.
const _ = uint(32 - unsafe.Sizeof(tracking{}))

// dirtyKey is an entry of a shard's dirty list: a key whose local
// consumption changed since the last drain. It holds the key's block, so a
// key evicted before the drain is still reported.
type dirtyKey struct {
	p    unsafe.Pointer // the key's block
	ns   Namespace
	size uint32 // the key's length
}

// tracking is the entry's key's tracking.
func (d *dirtyKey) tracking() *tracking { return trackingOf(d.p, int(d.size)) }

// key is the entry's key, sharing its block.
func (d *dirtyKey) key() string { return unsafe.String((*byte)(d.p), d.size) }

// stateFor returns the slot's state for lim's algorithm, starting it afresh
// if it belonged to another (a rule whose algorithm changed).
func (sl *slot) stateFor(lim Limit) *state {
	if sl.algo() != lim.algo {
		sl.st.log.release()
		sl.st = state{}
		sl.setAlgo(lim.algo)
	}
	return &sl.st
}

// Table sizing: grow past maxLoadNum/maxLoadDen full to about growLoadDen
// / growLoadNum times the keys held, but no further than holds the shard's
// cap at capLoadNum/capLoadDen full (at the cap, where a flood of new keys
// probes for every key it cannot find, a table is no fuller than before
// 56-byte slots); shrink (in Sweep) below 1/shrinkBelow full.
const (
	minTable    = 8
	maxLoadNum  = 17 // grow past 85% full
	maxLoadDen  = 20
	growLoadNum = 17 // after growing, the table is about 68% full (grown by a quarter)
	growLoadDen = 25
	shrinkBelow = 8
	capLoadNum  = 4 // a shard at its cap is at most 80% full
	capLoadDen  = 5
)

// home is the slot where a probe for tag starts.
func home(tag uint32, n int) int { return int(uint64(tag) * uint64(n) >> 32) }

// find returns the index of the slot holding (ns, key), whose hash is h, or
// if there is none the index of the empty slot where it would go. The key is
// a request's bytes or a held key's string, compared without a copy.
func find[K string | []byte](sh *shard, h uint64, ns Namespace, key K) (i int, found bool) {
	t := sh.slots
	tag := tagOf(h)
	i = home(tag, len(t))
	for {
		sl := &t[i]
		if sl.tag() == tag && sl.ns == ns && holds(sl, key) {
			return i, true
		}
		if sl.w == 0 {
			return i, false
		}
		if i++; i == len(t) {
			i = 0
		}
	}
}

// get returns the slot of (ns, key), whose hash is h, or nil.
func (sh *shard) get(h uint64, ns Namespace, key []byte) *slot {
	if i, ok := find(sh, h, ns, key); ok {
		return &sh.slots[i]
	}
	return nil
}

// getOrInsert returns the slot of (ns, key), whose hash is h, adding a full
// bucket of algo for it if the shard holds none: the one way the store looks
// a key up to change it. Adding makes room first when the shard is at its
// cap (see makeRoom). The caller holds sh.mu.
func (sh *shard) getOrInsert(s *Store, h uint64, ns Namespace, key []byte, algo Algorithm, now time.Time) *slot {
	i, ok := find(sh, h, ns, key)
	if ok {
		return &sh.slots[i]
	}
	if sh.n >= s.shardCap || (sh.n+1)*maxLoadDen > len(sh.slots)*maxLoadNum {
		if sh.n >= s.shardCap {
			s.evictions.Add(uint64(sh.makeRoom(now)))
		}
		if (sh.n+1)*maxLoadDen > len(sh.slots)*maxLoadNum {
			sh.resize(sh.growTo(s.shardCap))
		}
		i, _ = find(sh, h, ns, key) // slots moved
	}
	sl := &sh.slots[i]
	*sl = slot{w: tagOf(h) | uint32(algo), ns: ns}
	sl.setKey(key, s.track)
	if s.track {
		sl.tracked().epoch = s.epochs.Add(1)
		if s.firstHold.Load() > 0 && !algo.Windowed() && now.UnixNano() > 0 {
			sl.st.setShareClock(-now.UnixNano()) // held to its first share (see firstshare.go)
		}
	}
	sh.n++
	return sl
}

// growTo is the length the table grows to: about growLoadDen/growLoadNum
// times the keys held, but no longer than a shard at its cap needs.
func (sh *shard) growTo(shardCap int) int {
	n := max(minTable, (sh.n+1)*growLoadDen/growLoadNum)
	most := (shardCap*capLoadDen+capLoadNum-1)/capLoadNum + 1 // holds shardCap within capLoad
	return max(min(n, most), (sh.n+1)*maxLoadDen/maxLoadNum+1)
}

// resize moves every slot into a table of length n.
func (sh *shard) resize(n int) {
	old := sh.slots
	sh.slots = make([]slot, n)
	for i := range old {
		if old[i].w == 0 {
			continue
		}
		j := home(old[i].tag(), n)
		for sh.slots[j].w != 0 {
			if j++; j == n {
				j = 0
			}
		}
		sh.slots[j] = old[i]
	}
}

// shrink gives back a table's room when it holds far more than its keys
// need (after a sweep evicted most of them).
func (sh *shard) shrink() {
	if len(sh.slots) > minTable && sh.n*shrinkBelow < len(sh.slots) {
		sh.resize(max(minTable, sh.n*growLoadDen/growLoadNum+1))
	}
}

// removeAt empties slot i, shifting back the slots after it that a probe
// would otherwise no longer reach, and releases its log. Slots before i (in
// probe order from the empty slot before i's run) do not move.
func (sh *shard) removeAt(i int) {
	t := sh.slots
	t[i].st.log.release()
	if len(sh.views.m) > 0 { // a store with views tracks: the slot has a block
		sh.views.forget(t[i].tracked().epoch)
	}
	n := len(t)
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		if t[j].w == 0 {
			break
		}
		// t[j] may fill the hole at i unless its home lies cyclically in (i, j].
		k := home(t[j].tag(), n)
		if (i < j && i < k && k <= j) || (j < i && (i < k || k <= j)) {
			continue
		}
		t[i] = t[j]
		i = j
	}
	t[i] = slot{}
	sh.n--
}

// each calls fn for every slot until it returns false. fn may remove the slot
// it is given (and no other) with removeAt; every slot is still visited once.
func (sh *shard) each(fn func(i int, sl *slot) bool) {
	t := sh.slots
	n := len(t)
	// Start after an empty slot: a removal only moves slots of its own run
	// back toward the run's start, never past an empty slot, so revisiting
	// the index just emptied sees each slot once.
	start := 0
	for start < n && t[start].w != 0 {
		start++
	}
	for k := 1; k <= n; k++ {
		i := (start + k) % n
		for t[i].w != 0 {
			was := t[i]
			if !fn(i, &t[i]) {
				return
			}
			if sameKey(&t[i], &was) {
				break // kept: move on
			}
		}
	}
}

// makeRoom evicts from a sample of the shard's keys every one that is full,
// or if none is, the one nearest to full. It returns how many it evicted.
func (sh *shard) makeRoom(now time.Time) (evicted int) {
	// The sample is the first evictSample keys from a random slot on: they
	// lie in a few consecutive cache lines, read together rather than one
	// miss after another, and are as random as keys as the hash is.
	t := sh.slots
	var idx [evictSample]int
	seen := 0
	i := rand.IntN(len(t))
	for range len(t) {
		if t[i].w != 0 {
			idx[seen] = i
			if seen++; seen == evictSample {
				break
			}
		}
		if i++; i == len(t) {
			i = 0
		}
	}
	n := now.UnixNano()
	nearest := -1
	var victims [evictSample]*slot
	for k := range seen {
		if sl := &t[idx[k]]; sl.st.full <= n {
			victims[evicted] = sl
			evicted++
		} else if nearest < 0 || sl.st.full < t[idx[nearest]].st.full {
			nearest = k
		}
	}
	if evicted == 0 && nearest >= 0 {
		victims[0] = &t[idx[nearest]]
		evicted = 1
	}
	// A removal moves the slots after it, so each victim is looked up again
	// (in lines just read) rather than removed by its index in the sample.
	var gone [evictSample]slot
	for k, sl := range victims[:evicted] {
		gone[k] = *sl
	}
	for k := range gone[:evicted] {
		sh.removeAt(sh.indexOf(&gone[k]))
	}
	return evicted
}

// indexOf returns the index of the slot holding the key v holds, which the
// shard holds.
func (sh *shard) indexOf(v *slot) int {
	t := sh.slots
	i := home(v.tag(), len(t))
	for !sameKey(&t[i], v) {
		if i++; i == len(t) {
			i = 0
		}
	}
	return i
}
