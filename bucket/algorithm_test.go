package bucket

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// limitOf is count/period for algorithm a, with burst count (which every
// algorithm accepts).
func limitOf(a Algorithm, count int64, period time.Duration) Limit {
	return MustLimitOf(a, count, period, count)
}

// limiter views s as algorithm a's exported type.
func limiter(a Algorithm, s *state) Limiter {
	switch a {
	case AlgoTokenBucket:
		return (*Bucket)(s)
	case AlgoLeakyBucket:
		return (*LeakyBucket)(s)
	case AlgoGCRA:
		return (*GCRA)(s)
	case AlgoFixedWindow:
		return (*FixedWindow)(s)
	case AlgoSlidingWindow:
		return (*SlidingWindow)(s)
	case AlgoSlidingLog:
		return (*SlidingLog)(s)
	}
	panic("unknown algorithm")
}

// cloneState is a deep copy of s: deciding on it leaves s untouched.
func cloneState(s *state) *state {
	c := *s
	if s.log != nil {
		ls := *s.log
		ls.entries = append([]logEntry(nil), s.log.entries...)
		c.log = &ls
	}
	return &c
}

// allowed and refused build the Results of a 4-per-period limit.
func allowed(remaining int64, reset time.Duration) Result {
	return Result{Allowed: true, Limit: 4, Remaining: remaining, ResetAfter: reset}
}

func refused(remaining int64, retry, reset time.Duration) Result {
	return Result{Limit: 4, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// algoStep is one call in a scripted scenario: op at t0+at, then the balance.
type algoStep struct {
	at     time.Duration
	op     string // "take", "check" or "charge"
	cost   int64
	want   Result // for take and check
	wantBl float64
}

const ms = time.Millisecond

// bucketSteps script 4/1s burst 4 for the three buckets, which decide alike.
var bucketSteps = []algoStep{
	{at: 0, op: "take", cost: 1, want: allowed(3, 250*ms), wantBl: 3},
	{at: 0, op: "take", cost: 2, want: allowed(1, 750*ms), wantBl: 1},
	{at: 0, op: "check", cost: 1, want: allowed(0, time.Second), wantBl: 1}, // check charges nothing
	{at: 0, op: "take", cost: 1, want: allowed(0, time.Second), wantBl: 0},
	{at: 0, op: "take", cost: 1, want: refused(0, 250*ms, time.Second), wantBl: 0}, // changes nothing
	{at: 0, op: "check", cost: 1, want: refused(0, 250*ms, time.Second), wantBl: 0},
	{at: 250*ms - 1, op: "take", cost: 1, want: refused(0, 1, 750*ms+1), wantBl: 0.999999996},
	{at: 250 * ms, op: "take", cost: 1, want: allowed(0, time.Second), wantBl: 0}, // exactly at RetryAfter
	{at: 250 * ms, op: "charge", cost: 2, wantBl: -2},                             // past the limit
	{at: 250 * ms, op: "take", cost: 1, want: refused(0, 750*ms, 1500*ms), wantBl: -2},
	{at: time.Second - 1, op: "take", cost: 1, want: refused(0, 1, 750*ms+1), wantBl: 0.999999996},
	{at: time.Second, op: "take", cost: 2, want: refused(1, 250*ms, 750*ms), wantBl: 1},
	{at: 1250 * ms, op: "take", cost: 2, want: allowed(0, time.Second), wantBl: 0},
	{at: 5 * time.Second, op: "take", cost: 4, want: allowed(0, time.Second), wantBl: 0},
}

var algoScenarios = map[Algorithm][]algoStep{
	AlgoTokenBucket: bucketSteps,
	AlgoLeakyBucket: bucketSteps,
	AlgoGCRA:        bucketSteps,
	// Windows [0s, 1s), [1s, 2s), ...
	AlgoFixedWindow: {
		{at: 0, op: "take", cost: 1, want: allowed(3, time.Second), wantBl: 3},
		{at: 0, op: "take", cost: 2, want: allowed(1, time.Second), wantBl: 1},
		{at: 0, op: "check", cost: 1, want: allowed(0, time.Second), wantBl: 1},
		{at: 500 * ms, op: "take", cost: 1, want: allowed(0, 500*ms), wantBl: 0},
		{at: 500 * ms, op: "take", cost: 1, want: refused(0, 500*ms, 500*ms), wantBl: 0},
		{at: 500 * ms, op: "check", cost: 1, want: refused(0, 500*ms, 500*ms), wantBl: 0},
		{at: time.Second - 1, op: "take", cost: 1, want: refused(0, 1, 1), wantBl: 0},
		{at: time.Second, op: "take", cost: 1, want: allowed(3, time.Second), wantBl: 3},
		{at: time.Second, op: "charge", cost: 5, wantBl: -2},
		{at: 1500 * ms, op: "take", cost: 1, want: refused(0, 500*ms, 500*ms), wantBl: -2},
		{at: 2 * time.Second, op: "take", cost: 4, want: allowed(0, time.Second), wantBl: 0},
		{at: 2 * time.Second, op: "take", cost: 1, want: refused(0, time.Second, time.Second), wantBl: 0},
	},
	// The estimate is prev × (1 − elapsed/1s) + cur. ResetAfter runs to
	// the end of the window after the newest one counted.
	AlgoSlidingWindow: {
		{at: 0, op: "take", cost: 1, want: allowed(3, 2*time.Second), wantBl: 3},
		{at: 0, op: "take", cost: 2, want: allowed(1, 2*time.Second), wantBl: 1},
		{at: 0, op: "check", cost: 1, want: allowed(0, 2*time.Second), wantBl: 1},
		{at: 500 * ms, op: "take", cost: 1, want: allowed(0, 1500*ms), wantBl: 0},
		// cur 4: room for 1 once 4 × (1 − e) ≤ 3, at e = ¼ into the next window.
		{at: 500 * ms, op: "take", cost: 1, want: refused(0, 750*ms, 1500*ms), wantBl: 0},
		{at: 500 * ms, op: "check", cost: 1, want: refused(0, 750*ms, 1500*ms), wantBl: 0},
		{at: 1250*ms - 1, op: "take", cost: 1, want: refused(0, 1, 750*ms+1), wantBl: 0.999999996},
		{at: 1250 * ms, op: "take", cost: 1, want: allowed(0, 1750*ms), wantBl: 0},
		{at: 1250 * ms, op: "charge", cost: 2, wantBl: -2},
		// prev 4, cur 3: the estimate falls to 3 at the end of this window.
		{at: 1500 * ms, op: "take", cost: 1, want: refused(0, 500*ms, 1500*ms), wantBl: -1},
		{at: 2*time.Second - 1, op: "take", cost: 1, want: refused(0, 1, time.Second+1), wantBl: 0.999999996},
		{at: 2 * time.Second, op: "take", cost: 1, want: allowed(0, 2*time.Second), wantBl: 0},
		// prev 3, cur 1, estimate 2.5: room for 2 once 3 × (1 − e) ≤ 1, e = ⅔.
		{at: 2500 * ms, op: "take", cost: 2, want: refused(1, 166666667, 1500*ms), wantBl: 1.5},
		{at: 2500*ms + 166666666, op: "take", cost: 2, want: refused(1, 1, 1333333334), wantBl: 1.999999998},
		{at: 2500*ms + 166666667, op: "take", cost: 2, want: allowed(0, 1333333333), wantBl: 0.000000001},
	},
	// Each request leaves the rolling window exactly 1s after it was admitted.
	AlgoSlidingLog: {
		{at: 0, op: "take", cost: 1, want: allowed(3, time.Second), wantBl: 3},
		{at: 0, op: "take", cost: 2, want: allowed(1, time.Second), wantBl: 1},
		{at: 0, op: "check", cost: 1, want: allowed(0, time.Second), wantBl: 1},
		{at: 500 * ms, op: "take", cost: 1, want: allowed(0, time.Second), wantBl: 0},
		{at: 500 * ms, op: "take", cost: 1, want: refused(0, 500*ms, time.Second), wantBl: 0},
		{at: 500 * ms, op: "check", cost: 1, want: refused(0, 500*ms, time.Second), wantBl: 0},
		{at: time.Second - 1, op: "take", cost: 1, want: refused(0, 1, 500*ms+1), wantBl: 0},
		{at: time.Second, op: "take", cost: 2, want: allowed(1, time.Second), wantBl: 1},
		{at: time.Second, op: "charge", cost: 3, wantBl: -2},
		// 6 in the window (1 from 0.5s, 5 from 1s): 3 must leave, so both.
		{at: 1200 * ms, op: "take", cost: 1, want: refused(0, 800*ms, 800*ms), wantBl: -2},
		{at: 1500 * ms, op: "take", cost: 1, want: refused(0, 500*ms, 500*ms), wantBl: -1},
		{at: 2*time.Second - 1, op: "check", cost: 1, want: refused(0, 1, 1), wantBl: -1},
		{at: 2 * time.Second, op: "take", cost: 4, want: allowed(0, time.Second), wantBl: 0},
	},
}

func TestAlgorithmScenarios(t *testing.T) {
	for _, a := range Algorithms() {
		steps, ok := algoScenarios[a]
		if !ok {
			t.Fatalf("no scenario for %s", a)
		}
		lim := limitOf(a, 4, time.Second)
		t.Run(a.String()+"/direct", func(t *testing.T) {
			var s state
			l := limiter(a, &s)
			for i, st := range steps {
				now := at(st.at)
				var got Result
				switch st.op {
				case "take":
					got = l.Take(lim, st.cost, now)
				case "check":
					got = l.Check(lim, st.cost, now)
				case "charge":
					l.Charge(lim, st.cost, now)
				}
				if st.op != "charge" && got != st.want {
					t.Errorf("step %d %s(%d) at %v = %+v, want %+v", i, st.op, st.cost, st.at, got, st.want)
				}
				if bl := l.Balance(lim, now); math.Abs(bl-st.wantBl) > 1e-6 {
					t.Errorf("step %d: balance %.9f, want %.9f", i, bl, st.wantBl)
				}
			}
		})
		t.Run(a.String()+"/store", func(t *testing.T) {
			s := NewStore(StoreConfig{})
			key := []byte("k")
			for i, st := range steps {
				now := at(st.at)
				var got Result
				var err error
				switch st.op {
				case "take":
					got, err = s.Take(1, key, lim, st.cost, now)
				case "check":
					got, err = s.Check(1, key, lim, st.cost, now)
				case "charge":
					_, err = s.Charge(1, key, lim, st.cost, now)
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if st.op != "charge" && got != st.want {
					t.Errorf("step %d %s(%d) at %v = %+v, want %+v", i, st.op, st.cost, st.at, got, st.want)
				}
				if bl, _ := s.Balance(1, key, lim, now); math.Abs(bl-st.wantBl) > 1e-6 {
					t.Errorf("step %d: balance %.9f, want %.9f", i, bl, st.wantBl)
				}
			}
		})
	}
}

// randomLimit draws a limit for a: odd periods and rates whose per-token
// interval is not a whole number of nanoseconds, and for the buckets a burst
// that may differ from the count.
func randomLimit(r *rand.Rand, a Algorithm) Limit {
	periods := []time.Duration{
		time.Second, 3 * time.Second, 100 * ms, time.Minute,
		time.Second + 5, // not a multiple of 16 sub-windows
		time.Duration(1 + r.Int64N(int64(10*time.Second))), // anything
	}
	period := periods[r.IntN(len(periods))]
	count := 1 + r.Int64N(20)
	burst := count
	if a.HasBurst() && r.IntN(2) == 0 {
		burst = 1 + r.Int64N(40)
	}
	if a == AlgoSlidingLog && period < logSubWindows {
		period = logSubWindows
	}
	lim, err := NewLimitOf(a, count, period, burst)
	if err != nil {
		panic(err)
	}
	return lim
}

// randomGap is 0 a quarter of the time, else up to twice lim's per-token
// interval, and now and then beyond the period.
func randomGap(r *rand.Rand, lim Limit) time.Duration {
	switch r.IntN(8) {
	case 0, 1:
		return 0
	case 2:
		return lim.period + time.Duration(r.Int64N(int64(2*lim.period)))
	}
	return time.Duration(r.Int64N(int64(2*lim.nanosPerToken) + 1))
}

func TestGCRAAndLeakyBucketDecideAsTokenBucket(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	// Two fixed cases besides the random ones: 7 per 3s, and burst ≠ count.
	fixed := []struct{ count, burst int64 }{{7, 7}, {7, 3}}
	for seq := range 500 {
		var lim Limit
		switch {
		case seq < len(fixed):
			lim = MustLimit(fixed[seq].count, 3*time.Second, fixed[seq].burst)
		default:
			lim = randomLimit(r, AlgoTokenBucket)
		}
		gl, _ := NewLimitOf(AlgoGCRA, lim.count, lim.period, lim.burst)
		var b Bucket
		var g GCRA
		var q LeakyBucket
		var bs, gs, qs state // the same through the Store's dispatch
		now := t0
		for i := range 200 {
			now = now.Add(randomGap(r, lim))
			cost := 1 + r.Int64N(lim.burst)
			var want, got, leaky Result
			var viaG, viaQ, viaB Result
			op := r.IntN(3)
			switch op {
			case 0:
				want, got, leaky = b.Take(lim, cost, now), g.Take(gl, cost, now), q.Take(lim, cost, now)
				viaB, _ = bs.decide(lim, cost, 0, true, now)
				viaG, _ = gs.decide(gl, cost, 0, true, now)
				viaQ, _ = qs.decide(MustLimitOf(AlgoLeakyBucket, lim.count, lim.period, lim.burst), cost, 0, true, now)
			case 1:
				want, got, leaky = b.Check(lim, cost, now), g.Check(gl, cost, now), q.Check(lim, cost, now)
				viaB, _ = bs.decide(lim, cost, 0, false, now)
				viaG, _ = gs.decide(gl, cost, 0, false, now)
				viaQ, _ = qs.decide(MustLimitOf(AlgoLeakyBucket, lim.count, lim.period, lim.burst), cost, 0, false, now)
			case 2:
				cost = 1 + r.Int64N(3*lim.burst)
				b.Charge(lim, cost, now)
				g.Charge(gl, cost, now)
				q.Charge(lim, cost, now)
				bs.charge(lim, cost, 0, now)
				gs.charge(gl, cost, 0, now)
				qs.charge(lim, cost, 0, now)
			}
			if got != want || leaky != want || viaB != want || viaG != want || viaQ != want {
				t.Fatalf("seq %d (%s) step %d op %d cost %d: bucket %+v, gcra %+v, leaky %+v, dispatched %+v %+v %+v",
					seq, lim, i, op, cost, want, got, leaky, viaB, viaG, viaQ)
			}
			bb := b.Balance(lim, now)
			if g.Balance(gl, now) != bb || q.Balance(lim, now) != bb || gs.balance(gl, now) != bb || bs.balance(lim, now) != bb {
				t.Fatalf("seq %d (%s) step %d: balances bucket %v, gcra %v, leaky %v", seq, lim, i, bb, g.Balance(gl, now), q.Balance(lim, now))
			}
		}
	}
}

// TestRetryAfterAndRemainingAreExact replays random traffic, peers' charges
// included, through every algorithm. At every refusal the same request must
// be refused 1ns before the RetryAfter it was given and admitted at it; and
// after every decision a request of cost Remaining must be admitted at once
// and one of Remaining+1 refused.
func TestRetryAfterAndRemainingAreExact(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, uint64(a)))
			refusals := 0
			for seq := range 300 {
				lim := randomLimit(r, a)
				var s state
				now := t0.Add(time.Duration(r.Int64N(int64(time.Second))))
				for i := range 100 {
					now = now.Add(randomGap(r, lim))
					cost := 1 + r.Int64N(lim.burst)
					if r.IntN(4) == 0 {
						// A peer's consumption, in this window, the one before, or the one after.
						w := s.window(lim, now)
						if w != 0 {
							w = uint64(int64(w) + r.Int64N(3) - 1)
						}
						s.charge(lim, 1+r.Int64N(lim.burst), w, now)
						continue
					}
					commit := r.IntN(2) == 0
					res, _ := s.decide(lim, cost, 0, commit, now)
					if res.Allowed && !commit {
						continue // Remaining is what the request would leave
					}
					if rem := res.Remaining; rem >= 1 {
						if more, _ := cloneState(&s).decide(lim, rem, 0, false, now); !more.Allowed {
							t.Fatalf("seq %d (%s) step %d: Remaining %d, but a request of %d is refused: %+v", seq, lim, i, rem, rem, more)
						}
					}
					if rem := res.Remaining; rem+1 <= lim.burst {
						if more, _ := cloneState(&s).decide(lim, rem+1, 0, false, now); more.Allowed {
							t.Fatalf("seq %d (%s) step %d: Remaining %d, but a request of %d is admitted", seq, lim, i, rem, rem+1)
						}
					}
					if res.Allowed {
						continue
					}
					refusals++
					if res.RetryAfter <= 0 {
						t.Fatalf("seq %d (%s) step %d: refused with RetryAfter %v", seq, lim, i, res.RetryAfter)
					}
					if early, _ := cloneState(&s).decide(lim, cost, 0, false, now.Add(res.RetryAfter-1)); early.Allowed {
						t.Fatalf("seq %d (%s) step %d cost %d: admitted 1ns before RetryAfter %v", seq, lim, i, cost, res.RetryAfter)
					}
					if then, _ := cloneState(&s).decide(lim, cost, 0, false, now.Add(res.RetryAfter)); !then.Allowed {
						t.Fatalf("seq %d (%s) step %d cost %d: refused at RetryAfter %v: %+v", seq, lim, i, cost, res.RetryAfter, then)
					}
				}
			}
			if refusals < 1000 {
				t.Fatalf("only %d refusals: the traffic is too light to test anything", refusals)
			}
		})
	}
}

func TestLeakyBucketReserveSpacesCallersAtTheDrainRate(t *testing.T) {
	for _, a := range []Algorithm{AlgoLeakyBucket, AlgoTokenBucket} {
		t.Run(a.String(), func(t *testing.T) {
			lim := limitOf(a, 4, time.Second)
			s := NewStore(StoreConfig{})
			key := []byte("k")
			var waits []time.Duration
			for range 4 {
				r, err := s.Reserve(1, key, lim, 1, time.Second, t0)
				if err != nil || !r.Allowed {
					t.Fatalf("Reserve = %+v, %v; want allowed", r, err)
				}
				waits = append(waits, r.RetryAfter)
			}
			want := []time.Duration{0, 0, 0, 0} // a token bucket lets the burst through at once
			if a == AlgoLeakyBucket {
				want = []time.Duration{0, 250 * ms, 500 * ms, 750 * ms}
			}
			if fmt.Sprint(waits) != fmt.Sprint(want) {
				t.Fatalf("waits %v, want %v", waits, want)
			}
			// A fifth finds the queue full and is refused, however long it
			// would wait; a token bucket reserves it a token 250ms on.
			r, _ := s.Reserve(1, key, lim, 1, time.Hour, t0)
			want5 := Result{Allowed: true, Limit: 4, RetryAfter: 250 * ms, ResetAfter: 1250 * ms}
			if a == AlgoLeakyBucket {
				want5 = Result{Limit: 4, RetryAfter: 250 * ms, ResetAfter: time.Second}
			}
			if r != want5 {
				t.Fatalf("fifth Reserve = %+v, want %+v", r, want5)
			}
		})
	}

	t.Run("maxWait", func(t *testing.T) {
		lim := limitOf(AlgoLeakyBucket, 4, time.Second)
		var q LeakyBucket
		q.Reserve(lim, 1, time.Second, t0)
		q.Reserve(lim, 1, time.Second, t0) // a queue of 2: the next leaves in 500ms
		before := q
		r := q.Reserve(lim, 1, 300*ms, t0)
		if want := (Result{Limit: 4, Remaining: 2, RetryAfter: 200 * ms, ResetAfter: 500 * ms}); r != want {
			t.Fatalf("Reserve behind a queue of 2 with maxWait 300ms = %+v, want %+v", r, want)
		}
		if q != before {
			t.Fatal("a refused Reserve changed the queue")
		}
		if r := q.Reserve(lim, 1, 300*ms, at(200*ms-1)); r.Allowed {
			t.Fatalf("Reserve 1ns before RetryAfter = %+v, want refused", r)
		}
		if r := q.Reserve(lim, 1, 300*ms, at(200*ms)); !r.Allowed || r.RetryAfter != 300*ms {
			t.Fatalf("Reserve at RetryAfter = %+v, want allowed after waiting 300ms", r)
		}
	})
}

// TestAlgorithmChangeStartsAfresh: a key's state means nothing to another
// algorithm, whether the rule's algorithm changed by Rescale or the key is
// simply decided under a limit of another algorithm.
func TestAlgorithmChangeStartsAfresh(t *testing.T) {
	for _, from := range Algorithms() {
		for _, to := range Algorithms() {
			if from == to {
				continue
			}
			t.Run(from.String()+"→"+to.String(), func(t *testing.T) {
				a, b := limitOf(from, 4, time.Second), limitOf(to, 4, time.Second)
				s := NewStore(StoreConfig{})
				s.Take(1, []byte("rescaled"), a, 4, at(500*ms))
				s.Charge(1, []byte("rescaled"), a, 8, at(500*ms))
				s.Take(1, []byte("switched"), a, 4, at(500*ms))
				s.Charge(1, []byte("switched"), a, 8, at(500*ms))

				s.Rescale(1, func(string) (Limit, Limit) { return a, b }, at(500*ms))
				if bl, _ := s.Balance(1, []byte("rescaled"), b, at(500*ms)); bl != 4 {
					t.Fatalf("balance after Rescale to %s = %v, want 4 (fresh)", to, bl)
				}
				if r, _ := s.Take(1, []byte("switched"), b, 1, at(500*ms)); !r.Allowed || r.Remaining != 3 {
					t.Fatalf("Take under %s after use under %s = %+v, want allowed with 3 left", to, from, r)
				}
				// And back: the second algorithm's state means nothing to the first either.
				if r, _ := s.Take(1, []byte("switched"), a, 4, at(500*ms)); !r.Allowed {
					t.Fatalf("Take under %s again = %+v, want a fresh state", from, r)
				}
			})
		}
	}
}

func TestStoreTakeAllocatesNothingForAnyAlgorithm(t *testing.T) {
	for _, a := range Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			s := NewStore(StoreConfig{})
			lim := limitOf(a, 100, time.Second)
			key := []byte("warm-key")
			now := t0
			step := func() {
				now = now.Add(3 * ms) // 1000 runs cross several windows, and log entries age out
				s.Take(1, key, lim, 1, now)
				s.Check(1, key, lim, 1, now)
			}
			for range 2000 { // six periods: the log's slice has reached its size
				step()
			}
			if allocs := testing.AllocsPerRun(1000, step); allocs != 0 {
				t.Fatalf("Take+Check on a warm %s key: %v allocs, want 0", a, allocs)
			}
		})
	}
}
