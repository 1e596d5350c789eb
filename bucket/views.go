package bucket

import "time"

// The owner's views (share.go) live beside a shard's table, not in every
// key's tracking: only keys that several nodes use, in owner mode, have
// one, and issue 16 keeps a tracked key's block at 32 bytes of tracking.
// A shard's views are a map from the bucket's epoch (unique in the store,
// and new for a key evicted and created again, so a view never outlives
// its bucket's incarnation) to the view. A decision on a key of a shard
// that holds no view checks the map's length and nothing more; a shard
// with views looks the key's epoch up (no allocation either way).
//
// The table is bounded: at most maxViews per shard (an eighth of the
// shard's keys, at least minViews). A view older than usersTTL is stale
// and dropped when met, by Sweep, or when a full table needs room; if
// none is stale the new view is not kept and the key is decided on its
// balance alone, as without an owner's view (erring toward admitting). A
// key's view goes with its bucket (removeAt).

// view is an owner's last view of a key, as this node keeps it.
type view struct {
	users  uint32  // nodes using the key lately (2 and up: fewer are not kept)
	heard  int64   // when it was heard, plus one gossip interval (Unix ns)
	ans    float64 // the key's balance then, less this node's admissions the owner had not counted, plus one interval's refill, at most the burst
	usedAt uint64  // this node's admissions (tracking.used) then
}

// minViews is the fewest views a shard may hold, whatever its keys.
const minViews = 64

// viewsPerKey is the share of a shard's keys that may have a view.
const viewsPerKey = 8

// maxViewsFor is a shard's view cap for a shard cap of keys.
func maxViewsFor(shardCap int) int { return max(minViews, shardCap/viewsPerKey) }

// viewTable is a shard's views. The zero value is empty and holds no map.
type viewTable struct {
	m map[uint64]view
}

// fresh returns the key of epoch's view if it holds one heard within
// usersTTL of now (a stale one is dropped).
func (vt *viewTable) fresh(epoch uint64, now time.Time) (view, bool) {
	if len(vt.m) == 0 {
		return view{}, false
	}
	v, ok := vt.m[epoch]
	if !ok {
		return view{}, false
	}
	if time.Duration(now.UnixNano()-v.heard) > usersTTL {
		delete(vt.m, epoch)
		return view{}, false
	}
	return v, true
}

// put keeps v as the key of epoch's view, making room from stale views
// when the table holds limit; if none is stale, v is not kept.
func (vt *viewTable) put(epoch uint64, v view, limit int, now time.Time) {
	if vt.m == nil {
		vt.m = make(map[uint64]view)
	}
	if _, ok := vt.m[epoch]; !ok && len(vt.m) >= limit {
		if vt.expire(now); len(vt.m) >= limit {
			return
		}
		if vt.m == nil {
			vt.m = make(map[uint64]view)
		}
	}
	vt.m[epoch] = v
}

// forget drops the key of epoch's view, if any.
func (vt *viewTable) forget(epoch uint64) {
	if len(vt.m) > 0 {
		delete(vt.m, epoch)
	}
}

// expire drops every view older than usersTTL at now, and the map itself
// once empty. The order of the walk does not matter (each view is judged
// alone), so a simulation stays repeatable.
func (vt *viewTable) expire(now time.Time) {
	n := now.UnixNano()
	for e, v := range vt.m {
		if time.Duration(n-v.heard) > usersTTL {
			delete(vt.m, e)
		}
	}
	if len(vt.m) == 0 {
		vt.m = nil
	}
}

// Views returns how many keys hold an owner's view (share.go), stale ones
// not yet dropped included.
func (s *Store) Views() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.views.m)
		sh.mu.Unlock()
	}
	return n
}
