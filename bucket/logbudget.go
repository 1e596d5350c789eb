package bucket

import "sync/atomic"

// A Store bounds the bytes its sliding logs hold. Every log has a baseline,
// counted with its key (its logState and room for one entry: about 160
// bytes, so MaxKeys bounds them); room for more entries is taken from the
// store's log budget (StoreConfig.MaxLogBytes) when a log grows and given
// back when its key is evicted or swept, when the log is shrunk by Sweep,
// or when the key's rule stops being a sliding log.
//
// A log that needs room the budget cannot give first reuses what has aged
// out at its head; failing that it does not grow: the request is still
// admitted and counted, but its cost joins the newest entry the log holds,
// with that entry's time. Every admission stays counted; the joined cost
// leaves the rolling window with the entry it joined, early by at most the
// time between them, so a log at the budget errs toward admitting: at worst
// it admits like a fixed window anchored at its entries (up to 2 × Count
// in a rolling Period), never less than Count. Refusals are counted
// (Store.LogStats).

// logEntrySize is the bytes one logEntry takes.
const logEntrySize = 16

// DefaultMaxLogBytes is StoreConfig.MaxLogBytes's default: 64 MiB, room
// for 4M logged requests beyond each log's first.
const DefaultMaxLogBytes = 64 << 20

// logBudget is a store's allowance of sliding-log bytes, shared by its shards.
type logBudget struct {
	max     int64
	used    atomic.Int64
	refused atomic.Uint64
}

// reserve takes n bytes if they fit.
func (b *logBudget) reserve(n int64) bool {
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		b.refused.Add(1)
		return false
	}
	return true
}

// release gives a log's bytes back and detaches it from the budget.
func (ls *logState) release() {
	if ls == nil || ls.budget == nil {
		return
	}
	ls.budget.used.Add(-ls.charged)
	ls.charged = 0
}

// grow makes room for one more entry in a log that is full to its capacity:
// by sliding its live entries down over aged-out ones, or by doubling its
// capacity (up to most entries) if its budget allows. It reports whether
// there is room.
func (ls *logState) grow(most int64) bool {
	if ls.head > 0 {
		ls.entries, ls.head = ls.entries[:copy(ls.entries, ls.entries[ls.head:])], 0
		return true
	}
	c := int64(cap(ls.entries))
	if c == 0 {
		ls.entries = make([]logEntry, 0, 1) // the baseline, counted with the key
		return true
	}
	next := min(2*c, max(most, c+1))
	if ls.budget != nil && !ls.budget.reserve((next-c)*logEntrySize) {
		return false
	}
	if ls.budget != nil {
		ls.charged += (next - c) * logEntrySize
	}
	grown := make([]logEntry, len(ls.entries), next)
	copy(grown, ls.entries)
	ls.entries = grown
	return true
}

// shrink gives back room a log no longer uses: when fewer than a quarter of
// its capacity holds live entries, the log moves to twice their number.
func (ls *logState) shrink() {
	live := len(ls.entries) - ls.head
	c := cap(ls.entries)
	if ls.budget == nil || c <= 8 || 4*live >= c {
		return
	}
	next := max(2*live, 1)
	small := make([]logEntry, live, next)
	copy(small, ls.entries[ls.head:])
	ls.entries, ls.head = small, 0
	freed := min(int64(c-next)*logEntrySize, ls.charged)
	ls.charged -= freed
	ls.budget.used.Add(-freed)
}

// LogStats reports the sliding-log bytes held beyond each log's baseline,
// the budget they are held to, and how many times a log could not grow
// because the budget was spent.
func (s *Store) LogStats() (used, budget int64, refused uint64) {
	return s.logs.used.Load(), s.logs.max, s.logs.refused.Load()
}

// attachLog puts sl's sliding log, if it has one not yet counted, on the
// store's budget. The caller holds the shard's lock.
func (s *Store) attachLog(sl *slot) {
	if ls := sl.st.log; ls != nil && ls.budget == nil {
		ls.budget = &s.logs
	}
}
