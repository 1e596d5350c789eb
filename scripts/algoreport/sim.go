package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluicelabs/sluice/bucket"
)

// The limit every scenario runs against: 10 per second, with a burst of 10
// for the buckets.
const (
	limitCount  = 10
	limitPeriod = time.Second
)

// base is the fake clock's zero: a whole second, so that the windows' epoch-
// aligned boundaries fall on whole seconds of scenario time.
var base = time.Unix(1_700_000_000, 0)

// scenario is a load: when each request arrives, from the scenario's start.
type scenario struct {
	name     string
	about    string          // one line, for the chart's title
	arrivals []time.Duration // in order
	horizon  time.Duration   // how much time the charts show
}

// scenarios returns the loads every algorithm is driven through. They are
// the same on every run: the overload's jitter comes from a fixed seed.
func scenarios() []scenario {
	var edge []time.Duration
	for _, at := range []time.Duration{950 * time.Millisecond, time.Second, 2950 * time.Millisecond, 3 * time.Second} {
		for range 10 {
			edge = append(edge, at)
		}
	}

	// Poisson arrivals at 25 a second: exponential gaps with a mean of 40 ms,
	// rounded to the microsecond so the CSV states them exactly.
	rng := rand.New(rand.NewPCG(2024, 11))
	var overload []time.Duration
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() / 25 * float64(time.Second)).Round(time.Microsecond)
		if t >= 5*time.Second {
			break
		}
		overload = append(overload, t)
	}

	var burst []time.Duration
	for range 30 {
		burst = append(burst, 0)
	}
	for t := 125 * time.Millisecond; t < 5*time.Second; t += 125 * time.Millisecond {
		burst = append(burst, t)
	}

	return []scenario{
		{"edge", "10 requests at 0.95 s and 10 at 1.0 s, again at 2.95 s and 3.0 s", edge, 4 * time.Second},
		{"overload", "Poisson arrivals at 25 per second for 5 s", overload, 5 * time.Second},
		{"burst-then-steady", "30 requests at 0 s, then 8 per second", burst, 5 * time.Second},
	}
}

// outcome is what one request got.
type outcome struct {
	at      time.Duration // when it arrived
	allowed bool
	wait    time.Duration // reservations: how long it waits before going ahead
}

// limitOf is the scenarios' limit under algorithm a.
func limitOf(a bucket.Algorithm) (bucket.Limit, error) {
	burst := int64(limitCount)
	if a.Windowed() {
		burst = 0
	}
	return bucket.NewLimitOf(a, limitCount, limitPeriod, burst)
}

// simulate runs the arrivals through a Store holding one key limited by
// algorithm a, on a fake clock, and returns each request's outcome. maxWait
// 0 asks with Take; otherwise with Reserve, willing to wait that long.
func simulate(a bucket.Algorithm, arrivals []time.Duration, maxWait time.Duration) ([]outcome, error) {
	lim, err := limitOf(a)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a, err)
	}
	s := bucket.NewStore(bucket.StoreConfig{MaxKeys: 16})
	key := []byte("client")
	out := make([]outcome, len(arrivals))
	for i, at := range arrivals {
		var r bucket.Result
		if maxWait > 0 {
			r, err = s.Reserve(1, key, lim, 1, maxWait, base.Add(at))
		} else {
			r, err = s.Take(1, key, lim, 1, base.Add(at))
		}
		if err != nil {
			return nil, fmt.Errorf("%s: request %d: %w", a, i, err)
		}
		out[i] = outcome{at: at, allowed: r.Allowed}
		if r.Allowed && maxWait > 0 {
			out[i].wait = r.RetryAfter
		}
	}
	return out, nil
}

// admittedAt returns when the admitted requests arrived, in order.
func admittedAt(outs []outcome) []time.Duration {
	var ts []time.Duration
	for _, o := range outs {
		if o.allowed {
			ts = append(ts, o.at)
		}
	}
	return ts
}

// step is a value of a step function: n from at until the next step.
type step struct {
	at time.Duration
	n  int
}

// rolling returns, as a step function starting at 0, how many of the sorted
// times ts fall within the window of length w ending at each instant t: in
// (t−w, t]. A time counts from itself until w later, exclusive.
func rolling(ts []time.Duration, w time.Duration) []step {
	steps := []step{{0, 0}}
	n, in, out := 0, 0, 0 // in: next time to enter; out: next time to leave
	for out < len(ts) {
		next := ts[out] + w
		if in < len(ts) && ts[in] < next {
			next = ts[in]
		}
		for in < len(ts) && ts[in] == next {
			n, in = n+1, in+1
		}
		for out < len(ts) && ts[out]+w == next {
			n, out = n-1, out+1
		}
		if last := &steps[len(steps)-1]; last.at == next {
			last.n = n
		} else {
			steps = append(steps, step{next, n})
		}
	}
	return steps
}

// maxIn is the most of the sorted times ts that fall within any window of
// length w.
func maxIn(ts []time.Duration, w time.Duration) int {
	m := 0
	for _, s := range rolling(ts, w) {
		m = max(m, s.n)
	}
	return m
}

// longestGap is the longest time between consecutive sorted times ts; 0 for
// fewer than two.
func longestGap(ts []time.Duration) time.Duration {
	var g time.Duration
	for i := 1; i < len(ts); i++ {
		g = max(g, ts[i]-ts[i-1])
	}
	return g
}

// perBin counts the times ts in each bin of width w from 0 to horizon.
func perBin(ts []time.Duration, w, horizon time.Duration) []int {
	bins := make([]int, (horizon+w-1)/w)
	for _, t := range ts {
		if i := int(t / w); i >= 0 && i < len(bins) {
			bins[i]++
		}
	}
	return bins
}

// summary is a scenario's row for one algorithm.
type summary struct {
	algo              bucket.Algorithm
	admitted, refused int
	maxPerPeriod      int           // most admitted within any one period
	longestGap        time.Duration // between admissions
}

func summarise(a bucket.Algorithm, outs []outcome) summary {
	ts := admittedAt(outs)
	if !slices.IsSorted(ts) {
		panic("arrivals out of order")
	}
	return summary{algo: a, admitted: len(ts), refused: len(outs) - len(ts), maxPerPeriod: maxIn(ts, limitPeriod), longestGap: longestGap(ts)}
}
