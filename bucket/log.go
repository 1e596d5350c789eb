package bucket

import (
	"math"
	"time"
)

// SlidingLog remembers the time and cost of every request it admitted in the
// last Period and admits while their total plus the new request's cost stays
// within Count: an exact rolling window, with no boundary to game and no
// approximation, for the requests this node admitted.
//
// Memory is the price: a key logs up to Count live entries of 16 bytes (a
// cost of c is one entry) in a slice that may hold as many again that have
// aged out and await compaction, plus 64 bytes of peers' counts; so a
// sliding log's Count is capped at MaxLogLimit. In a Store, room beyond a
// log's first entry comes out of the store's byte budget
// (StoreConfig.MaxLogBytes; see logbudget.go), past which a log counts new
// requests in its newest entry. A key's log grows (allocating) while it is
// busy; a key in steady use allocates nothing more. Requests charged after
// the fact past the limit are folded into the newest entry once the log
// holds 2 × Count.
//
// Peers' requests arrive as counts per sub-window of Period/16 (gossip does
// not carry every timestamp). They are counted as if they had happened at the
// start of their sub-window, so each leaves the rolling window up to one
// sub-window early: in a cluster the log errs toward admitting, by at most
// what peers admitted in one sub-window. (A sub-window is Period/16 rounded
// down to the nanosecond, and a count leaves when the sub-window 16 after its
// own begins: at its start + Period when 16 divides Period, up to 15ns
// earlier otherwise.)
//
// State: full is when the newest request leaves the rolling window; log holds
// the requests, allocated with the first. Its zero value is an empty log.
type SlidingLog state

// logSubWindows is how many sub-windows a Period is cut into for peers' counts.
const logSubWindows = 16

// logSubWindow is the length of a sub-window of lim's period.
func logSubWindow(lim Limit) int64 { return int64(lim.period) / logSubWindows }

type logState struct {
	entries []logEntry // requests admitted here, oldest first from head
	head    int
	local   int64 // total cost of entries[head:]

	peer    [logSubWindows]uint32 // peers' consumption by sub-window, slot = index mod logSubWindows
	peerTop int64                 // newest sub-window index the slots cover
	peers   int64                 // total of peer

	budget  *logBudget // the store's, which room beyond the first entry is taken from; nil outside a store
	charged int64      // bytes taken from budget
}

type logEntry struct {
	at   int64 // unix nanoseconds
	cost int64
}

// Take admits and charges a request if the rolling window has room for its cost.
func (l *SlidingLog) Take(lim Limit, cost int64, now time.Time) Result {
	r, _ := l.decide(lim, cost, 0, true, now.UnixNano())
	return r
}

// Check reports what Take would decide, without charging.
func (l *SlidingLog) Check(lim Limit, cost int64, now time.Time) Result {
	r, _ := l.decide(lim, cost, 0, false, now.UnixNano())
	return r
}

// Charge logs cost at now unconditionally.
func (l *SlidingLog) Charge(lim Limit, cost int64, now time.Time) {
	l.charge(lim, cost, 0, now.UnixNano())
}

// Balance is Count less the requests in the rolling window.
func (l *SlidingLog) Balance(lim Limit, now time.Time) float64 {
	return float64(lim.count - l.used(lim, now.UnixNano()))
}

// used ages out what has left the rolling window at n and returns what is left.
func (l *SlidingLog) used(lim Limit, n int64) int64 {
	ls := l.log
	if ls == nil {
		return 0
	}
	span := int64(lim.period)
	e := ls.entries
	for ls.head < len(e) && e[ls.head].at <= n-span {
		ls.local -= e[ls.head].cost
		ls.head++
	}
	switch {
	case ls.head == len(e):
		ls.entries, ls.head = e[:0], 0
	case ls.head >= 8 && 2*ls.head >= len(e):
		// Slide the live part down so the slice stops growing.
		ls.entries, ls.head = e[:copy(e, e[ls.head:])], 0
	}
	ls.advance(floorDiv(n, logSubWindow(lim)))
	return ls.local + ls.peers
}

// advance moves the peers' slots on to sub-window top, clearing those that
// left the rolling window.
func (ls *logState) advance(top int64) {
	if top <= ls.peerTop {
		return
	}
	if top-ls.peerTop >= logSubWindows {
		ls.peer, ls.peers = [logSubWindows]uint32{}, 0
	} else {
		for i := ls.peerTop + 1; i <= top; i++ {
			slot := &ls.peer[i%logSubWindows]
			ls.peers -= int64(*slot)
			*slot = 0
		}
	}
	ls.peerTop = top
}

func (l *SlidingLog) decide(lim Limit, cost, over int64, commit bool, n int64) (Result, bool) {
	used := l.used(lim, n)
	if used+cost <= lim.count+over {
		if commit {
			l.append(lim, cost, n)
		}
		full := max(l.full, n+int64(lim.period))
		return Result{Allowed: true, Limit: lim.count, Remaining: max(0, lim.count-used-cost), ResetAfter: time.Duration(full - n)}, used+cost > lim.count
	}
	r := Result{Limit: lim.count, Remaining: max(0, lim.count-used), ResetAfter: time.Duration(max(l.full-n, 0))}
	r.RetryAfter = time.Duration(l.log.agedOut(lim, used+cost-lim.count-over, n) - n)
	return r, false
}

// agedOut returns the instant by which requests of total cost excess will
// have left the rolling window, taking local entries and peers' sub-windows
// in the order they leave.
func (ls *logState) agedOut(lim Limit, excess, n int64) int64 {
	if ls == nil {
		// Nothing logged, yet refused: the cost exceeds the count and never fits.
		return n + int64(lim.period)
	}
	span, sub := int64(lim.period), logSubWindow(lim)
	i := ls.head
	j := ls.peerTop - logSubWindows + 1 // the oldest sub-window still counted
	freed := int64(0)
	last := n
	for freed < excess {
		localAt, peerAt := int64(math.MaxInt64), int64(math.MaxInt64)
		if i < len(ls.entries) {
			localAt = ls.entries[i].at + span
		}
		for j <= ls.peerTop && ls.peer[mod(j, logSubWindows)] == 0 {
			j++
		}
		if j <= ls.peerTop {
			peerAt = (j + logSubWindows) * sub // when advance clears it
		}
		switch {
		case localAt == math.MaxInt64 && peerAt == math.MaxInt64:
			return max(last, n+1) // cannot happen while cost ≤ Count
		case localAt <= peerAt:
			freed += ls.entries[i].cost
			last = localAt
			i++
		default:
			freed += int64(ls.peer[mod(j, logSubWindows)])
			last = peerAt
			j++
		}
	}
	return max(last, n+1)
}

func mod(i, m int64) int64 { return ((i % m) + m) % m }

// append logs a request of cost at n, which must not be before the newest entry.
func (l *SlidingLog) append(lim Limit, cost, n int64) {
	ls := l.log
	if ls == nil {
		ls = &logState{peerTop: floorDiv(n, logSubWindow(lim))}
		l.log = ls
	}
	live := ls.entries[ls.head:]
	switch {
	case len(live) > 0 && live[len(live)-1].at >= n:
		live[len(live)-1].cost += cost // same instant (or a clock step back): one entry
	case int64(len(live)) >= 2*lim.count:
		live[len(live)-1].cost += cost // bounded: fold into the newest entry
		live[len(live)-1].at = n
	case len(ls.entries) == cap(ls.entries) && !ls.grow(2*lim.count):
		// The store's log budget is spent (see logbudget.go): join the
		// newest entry, keeping its time, so the cost is counted and leaves
		// the window early rather than late.
		live[len(live)-1].cost += cost
	default:
		ls.entries = append(ls.entries, logEntry{at: n, cost: cost})
	}
	ls.local += cost
	l.full = max(l.full, n+int64(lim.period))
}

// charge logs cost: local consumption (window 0) at n, a peer's in its
// sub-window (as windowIndex numbers them). Sub-windows that have left the
// rolling window are dropped; one ahead of this node's clock counts in the
// current one.
func (l *SlidingLog) charge(lim Limit, cost int64, window uint64, n int64) {
	l.used(lim, n)
	if window == 0 {
		l.append(lim, cost, n)
		return
	}
	sub := logSubWindow(lim)
	top := floorDiv(n, sub)
	j := min(int64(window-1), top)
	if j <= top-logSubWindows {
		return
	}
	ls := l.log
	if ls == nil {
		ls = &logState{peerTop: top}
		l.log = ls
	}
	slot := &ls.peer[mod(j, logSubWindows)]
	was := *slot
	*slot = addSat32(was, cost)
	ls.peers += int64(*slot - was)
	l.full = max(l.full, j*sub+int64(lim.period))
}

// adopt raises the count to a peer's, if the peer's is higher as of the same
// sub-window; the difference is counted as peers' consumption in it.
func (l *SlidingLog) adopt(lim Limit, window uint64, balance float64, n int64) bool {
	used := l.used(lim, n)
	peer := int64(math.Ceil(float64(lim.count) - balance))
	if window == 0 || int64(window-1) != floorDiv(n, logSubWindow(lim)) || peer <= used {
		return false
	}
	l.charge(lim, peer-used, window, n)
	return true
}

// rescale keeps the log across a limit change; when the period changes the
// peers' counts, cut by the old period's sub-windows, are logged as local
// requests at n (later than they happened: the log errs toward refusing
// until they age out).
func (l *SlidingLog) rescale(old, new Limit, n int64) {
	if old.period == new.period || l.log == nil {
		return
	}
	l.used(old, n)
	peers := l.log.peers
	l.log.peer, l.log.peers, l.log.peerTop = [logSubWindows]uint32{}, 0, floorDiv(n, logSubWindow(new))
	if peers > 0 {
		l.append(new, peers, n)
	}
	if l.log.head < len(l.log.entries) {
		newest := l.log.entries[len(l.log.entries)-1].at
		l.full = newest + int64(new.period)
	}
}
