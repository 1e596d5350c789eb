package bucket

import (
	"fmt"
	"strings"
	"time"
)

// Algorithm names how a Limit admits requests. Every algorithm keeps its
// per-key state in the same small value (see Limiter), so one Store holds
// keys of any algorithm, and every decision takes the current time.
type Algorithm uint8

const (
	// AlgoTokenBucket refills Burst tokens at Count per Period; a request
	// spends its cost. Bursts up to Burst, exact long-run rate. The default.
	AlgoTokenBucket Algorithm = iota
	// AlgoLeakyBucket is a queue of capacity Burst draining at Count per
	// Period. As a meter it admits exactly what the token bucket admits;
	// callers that can wait (Reserve) are spaced out at the drain rate, so
	// what leaves is smooth however bursty what arrived.
	AlgoLeakyBucket
	// AlgoGCRA is the generic cell rate algorithm: one theoretical arrival
	// time, an emission interval Period/Count and a tolerance of Burst−1
	// intervals. It decides exactly as the token bucket does (the two are
	// the same algorithm, told differently), which the tests check.
	AlgoGCRA
	// AlgoFixedWindow admits Count per Period-long window aligned to the Unix
	// epoch (a day is a UTC day). Cheap and easy to explain; a client can
	// spend two windows' worth across one boundary.
	AlgoFixedWindow
	// AlgoSlidingWindow approximates a rolling window from two fixed-window
	// counts: the previous window's count weighted by how much of it still
	// overlaps the rolling window, plus the current one's.
	AlgoSlidingWindow
	// AlgoSlidingLog remembers when each admitted request happened and admits
	// while fewer than Count fall within the last Period: exact, at the cost
	// of memory that grows with the limit (see SlidingLog).
	AlgoSlidingLog

	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{
	AlgoTokenBucket:   "token_bucket",
	AlgoLeakyBucket:   "leaky_bucket",
	AlgoGCRA:          "gcra",
	AlgoFixedWindow:   "fixed_window",
	AlgoSlidingWindow: "sliding_window",
	AlgoSlidingLog:    "sliding_log",
}

// Algorithms lists every algorithm, the default first.
func Algorithms() []Algorithm {
	out := make([]Algorithm, numAlgorithms)
	for i := range out {
		out[i] = Algorithm(i)
	}
	return out
}

// String returns the algorithm's name as rules files spell it.
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the algorithm a rules file names.
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if s == n {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (known: %s)", s, strings.Join(algorithmNames[:], ", "))
}

// Windowed reports whether the algorithm counts requests per window of time
// rather than keeping a balance: its consumption is exchanged per window.
func (a Algorithm) Windowed() bool {
	return a == AlgoFixedWindow || a == AlgoSlidingWindow || a == AlgoSlidingLog
}

// Reserves reports whether a request the limit refuses now can be given a
// later turn by charging it now: the buckets can (the debt holds the turn);
// a window cannot (a charge now counts in the full window while the request
// goes ahead in the next). Store.Reserve and callers that check first and
// charge later both follow it.
func (a Algorithm) Reserves() bool { return !a.Windowed() }

// HasBurst reports whether the algorithm's capacity can differ from Count:
// the buckets hold Burst; a window admits Count per Period.
func (a Algorithm) HasBurst() bool { return !a.Windowed() }

// Limiter is what every algorithm's per-key state offers. Each method takes
// the limit (a state does not remember it) and the current time; none reads
// the clock. The implementations are Bucket, LeakyBucket, GCRA, FixedWindow,
// SlidingWindow and SlidingLog; their zero values hold no consumption. A
// Limiter is not safe for concurrent use.
type Limiter interface {
	// Take admits and charges a request of the given cost if the limit
	// allows it now; a refused request changes nothing.
	Take(lim Limit, cost int64, now time.Time) Result
	// Check reports what Take would decide, without charging.
	Check(lim Limit, cost int64, now time.Time) Result
	// Charge records cost tokens consumed now without asking, as when a peer
	// or an earlier check admitted them: the state may go past its limit.
	Charge(lim Limit, cost int64, now time.Time)
	// Balance is what is left of the limit at now: tokens for the buckets,
	// Count minus the requests the window holds for the windows. Negative
	// when consumption has run past the limit.
	Balance(lim Limit, now time.Time) float64
}

var (
	_ Limiter = (*Bucket)(nil)
	_ Limiter = (*LeakyBucket)(nil)
	_ Limiter = (*GCRA)(nil)
	_ Limiter = (*FixedWindow)(nil)
	_ Limiter = (*SlidingWindow)(nil)
	_ Limiter = (*SlidingLog)(nil)
)

// state is one key's state under any algorithm. Each algorithm's exported
// type is defined as a state, so a Store entry converts its state to the
// algorithm the key's limit names with no copy and no interface.
//
// full is shared by every algorithm: the instant from which the state holds
// no consumption at all (a bucket has refilled, every counted window has
// passed, every logged request has aged out). Eviction and sweeping read
// only full, whatever the algorithm.
type state struct {
	full      int64     // unix nanoseconds: from then on the state equals a fresh one
	cur, prev uint32    // fixed window: cur; sliding window: current and previous window; the buckets: a tracked key's share clock (shareclock.go)
	log       *logState // sliding log's requests; nil until the first is logged
}

// isFull reports whether the state holds no consumption at now, whatever its algorithm.
func (s *state) isFull(now time.Time) bool { return s.full <= now.UnixNano() }

// Decisions dispatched on the limit's algorithm. n is now in unix nanoseconds
// where a time is not needed as a time.Time.

// decide answers a request of cost with over tokens of soft margin beyond the
// limit, charging it if commit is set and it is admitted. soft reports that it
// needed the margin.
func (s *state) decide(lim Limit, cost, over int64, commit bool, now time.Time) (r Result, soft bool) {
	switch lim.algo {
	case AlgoTokenBucket, AlgoGCRA, AlgoLeakyBucket:
		// The three buckets decide alike (see AlgoGCRA and AlgoLeakyBucket);
		// they differ in how they answer a caller who can wait (reserve).
		b := (*Bucket)(s)
		if !commit {
			c := *b // a bucket is a plain value: deciding on a copy charges nothing
			b = &c
		}
		if over > 0 {
			return b.TakeOverdraft(lim, cost, over, now)
		}
		if lim.algo == AlgoGCRA {
			return (*GCRA)(b).Take(lim, cost, now), false
		}
		return b.Take(lim, cost, now), false
	case AlgoFixedWindow:
		return (*FixedWindow)(s).decide(lim, cost, over, commit, now.UnixNano())
	case AlgoSlidingWindow:
		return (*SlidingWindow)(s).decide(lim, cost, over, commit, now.UnixNano())
	case AlgoSlidingLog:
		return (*SlidingLog)(s).decide(lim, cost, over, commit, now.UnixNano())
	}
	panic("bucket: unknown algorithm " + lim.algo.String())
}

// reserve answers a caller willing to wait up to maxWait: the buckets reserve
// a later turn (the leaky bucket always spaces callers at its drain rate);
// the windows have no queue and decide as Take.
func (s *state) reserve(lim Limit, cost int64, maxWait time.Duration, now time.Time) Result {
	switch {
	case lim.algo == AlgoLeakyBucket:
		return (*LeakyBucket)(s).Reserve(lim, cost, maxWait, now)
	case lim.algo.Reserves():
		return (*Bucket)(s).Reserve(lim, cost, maxWait, now)
	}
	r, _ := s.decide(lim, cost, 0, true, now)
	return r
}

// charge records consumption in the given window (0: the current one, and
// always for the buckets).
func (s *state) charge(lim Limit, cost int64, window uint64, now time.Time) {
	switch lim.algo {
	case AlgoFixedWindow:
		(*FixedWindow)(s).charge(lim, cost, window, now.UnixNano())
	case AlgoSlidingWindow:
		(*SlidingWindow)(s).charge(lim, cost, window, now.UnixNano())
	case AlgoSlidingLog:
		(*SlidingLog)(s).charge(lim, cost, window, now.UnixNano())
	default:
		(*Bucket)(s).Charge(lim, cost, now)
	}
}

func (s *state) balance(lim Limit, now time.Time) float64 {
	switch lim.algo {
	case AlgoFixedWindow:
		return (*FixedWindow)(s).Balance(lim, now)
	case AlgoSlidingWindow:
		return (*SlidingWindow)(s).Balance(lim, now)
	case AlgoSlidingLog:
		return (*SlidingLog)(s).Balance(lim, now)
	}
	return (*Bucket)(s).Balance(lim, now)
}

// adopt lowers the balance to a peer's, as of the peer's window (ignored by
// the buckets), if the peer's is lower. It reports whether it changed anything.
func (s *state) adopt(lim Limit, window uint64, balance float64, now time.Time) bool {
	switch lim.algo {
	case AlgoFixedWindow:
		return (*FixedWindow)(s).adopt(lim, window, balance, now.UnixNano())
	case AlgoSlidingWindow:
		return (*SlidingWindow)(s).adopt(lim, window, balance, now.UnixNano())
	case AlgoSlidingLog:
		return (*SlidingLog)(s).adopt(lim, window, balance, now.UnixNano())
	}
	b := (*Bucket)(s)
	if b.Balance(lim, now) <= balance {
		return false
	}
	b.setBalance(lim, balance, now)
	return true
}

// rescale carries the state across a change of limit (see Bucket.Rescale).
// A change of algorithm starts the key afresh: one algorithm's state means
// nothing to another.
func (s *state) rescale(old, new Limit, now time.Time) {
	switch {
	case old.algo != new.algo:
		*s = state{}
	case new.algo == AlgoFixedWindow:
		(*FixedWindow)(s).rescale(old, new, now.UnixNano())
	case new.algo == AlgoSlidingWindow:
		(*SlidingWindow)(s).rescale(old, new, now.UnixNano())
	case new.algo == AlgoSlidingLog:
		(*SlidingLog)(s).rescale(old, new, now.UnixNano())
	default:
		(*Bucket)(s).Rescale(old, new, now)
	}
}

// window is the index, as gossip carries it, of the window that consumption
// at now falls in: 0 for the buckets, which have none.
func (s *state) window(lim Limit, now time.Time) uint64 {
	switch lim.algo {
	case AlgoFixedWindow, AlgoSlidingWindow:
		return windowIndex(now.UnixNano(), int64(lim.period))
	case AlgoSlidingLog:
		return windowIndex(now.UnixNano(), logSubWindow(lim))
	}
	return 0
}

// windowIndex numbers the window of length span holding the instant n, as
// carried in gossip: windows are aligned to the Unix epoch and numbered from
// 1, so 0 can mean "no window".
func windowIndex(n, span int64) uint64 { return uint64(floorDiv(n, span)) + 1 }

// floorDiv is n/d rounded toward minus infinity (d > 0).
func floorDiv(n, d int64) int64 {
	q := n / d
	if n%d < 0 {
		q--
	}
	return q
}
