package bucket

import (
	"math"
	"testing"
	"time"
)

var windowed = []Algorithm{AlgoFixedWindow, AlgoSlidingWindow, AlgoSlidingLog}

// windowSpan is the span of the windows gossip numbers for lim.
func windowSpan(lim Limit) int64 {
	if lim.algo == AlgoSlidingLog {
		return logSubWindow(lim)
	}
	return int64(lim.period)
}

// windowOf is the number gossip gives the window holding t0+d under lim.
func windowOf(lim Limit, d time.Duration) uint64 {
	return windowIndex(at(d).UnixNano(), windowSpan(lim))
}

// TestWindowBoundaryBurst: 4 requests just before a window boundary and 4
// just after. A fixed window admits all 8, twice the limit within 100ms;
// the sliding window and the log see the first 4 still in the rolling window.
func TestWindowBoundaryBurst(t *testing.T) {
	want := map[Algorithm]int{AlgoFixedWindow: 8, AlgoSlidingWindow: 4, AlgoSlidingLog: 4}
	for _, a := range windowed {
		t.Run(a.String(), func(t *testing.T) {
			lim := limitOf(a, 4, time.Second)
			s := NewStore(StoreConfig{})
			admitted := 0
			for _, d := range []time.Duration{900 * ms, time.Second} {
				for range 4 {
					if r, _ := s.Take(1, []byte("k"), lim, 1, at(d)); r.Allowed {
						admitted++
					}
				}
			}
			if admitted != want[a] {
				t.Fatalf("admitted %d of 8, want %d", admitted, want[a])
			}
		})
	}
}

// greedy runs a client that takes whenever it is admitted and otherwise comes
// back exactly at RetryAfter, from start for d, and returns when it was
// admitted.
func greedy(t *testing.T, lim Limit, start, d time.Duration) []time.Duration {
	s := NewStore(StoreConfig{})
	var admitted []time.Duration
	now := start
	for range 100_000 {
		if now >= start+d {
			return admitted
		}
		r, err := s.Take(1, []byte("greedy"), lim, 1, at(now))
		switch {
		case err != nil:
			t.Fatal(err)
		case r.Allowed:
			admitted = append(admitted, now)
		case r.RetryAfter <= 0:
			t.Fatalf("refused at %v with RetryAfter %v", now, r.RetryAfter)
		default:
			now += r.RetryAfter
		}
	}
	t.Fatalf("greedy client still running at %v", now)
	return nil
}

// maxInAnyWindow is the most instants of ts (sorted) within any span-long
// half-open window [t, t+span).
func maxInAnyWindow(ts []time.Duration, span time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for j < len(ts) && ts[j] < ts[i]+span {
			j++
		}
		best = max(best, j-i)
	}
	return best
}

// TestGreedyClientRollingMaximum measures the most requests a greedy client
// gets admitted within any rolling second, over 10 simulated seconds from a
// few starting offsets (0.9s: just before a window boundary).
//
// The bound for the sliding window: take a rolling window [t, t+P) across
// the boundary between fixed windows k and k+1, with a requests admitted in
// its part of window k and b in its part of window k+1. When the last of the
// b was admitted, e into window k+1 (e < t − start(k)), the estimate
// prev·(1 − e/P) + cur_before + 1 was within Count, with prev ≥ a and
// cur_before + 1 = b. So a + b ≤ Count + a·e/P < Count + Count: at most
// 2·Count − 1. (The log's bound is Count: it is exact.)
func TestGreedyClientRollingMaximum(t *testing.T) {
	const count = 4
	bound := map[Algorithm]int{
		AlgoFixedWindow:   2 * count,
		AlgoSlidingWindow: 2*count - 1,
		AlgoSlidingLog:    count,
	}
	for _, a := range windowed {
		t.Run(a.String(), func(t *testing.T) {
			lim := limitOf(a, count, time.Second)
			most, total := 0, 0
			for _, start := range []time.Duration{0, 900 * ms, 370 * ms} {
				ts := greedy(t, lim, start, 10*time.Second)
				most = max(most, maxInAnyWindow(ts, time.Second))
				total = max(total, len(ts))
			}
			t.Logf("%s: at most %d admitted in any rolling 1s; up to %d in 10s", lim, most, total)
			if most > bound[a] {
				t.Fatalf("%d admitted within one rolling second, bound %d", most, bound[a])
			}
			if a == AlgoFixedWindow && most != 2*count {
				t.Fatalf("fixed window: %d within one rolling second, want the boundary burst of %d", most, 2*count)
			}
			// The long run: Count per window, but Count − 1 for the sliding
			// window. Once a window admitted N, the next admits at e into it
			// while N·(1 − e) + cur + 1 ≤ Count: with N = Count nothing fits
			// at e = 0, and the greedy client settles at Count − 1 a window.
			floor := 10 * count
			if a == AlgoSlidingWindow {
				floor = 10 * (count - 1)
			}
			if total < floor {
				t.Fatalf("only %d admitted in 10s at %d/s, want at least %d", total, count, floor)
			}
		})
	}
}

// TestChargeWindowCountsPeersInTheirWindow: a peer's consumption counts in
// the window it happened in, if that window still matters here.
func TestChargeWindowCountsPeersInTheirWindow(t *testing.T) {
	type charge struct {
		window int64 // relative to the current window (as gossip numbers them)
		cost   int64
		wantBl float64 // balance right after
	}
	tests := []struct {
		algo    Algorithm
		now     time.Duration
		charges []charge
		later   time.Duration // then the balance at t0+later is
		laterBl float64
	}{
		{
			algo: AlgoFixedWindow, now: 500 * ms,
			charges: []charge{
				{window: -1, cost: 2, wantBl: 4}, // a past window: dropped
				{window: 0, cost: 1, wantBl: 3},
				{window: +1, cost: 1, wantBl: 2}, // ahead of this clock: the current one
			},
			later: time.Second, laterBl: 4,
		},
		{
			algo: AlgoSlidingWindow, now: 250 * ms,
			charges: []charge{
				{window: -1, cost: 2, wantBl: 2.5}, // the previous window: weighted by ¾
				{window: -2, cost: 3, wantBl: 2.5}, // older: dropped
				{window: 0, cost: 1, wantBl: 1.5},
				{window: +1, cost: 1, wantBl: 0.5}, // ahead: the current one
			},
			later: 500 * ms, laterBl: 1, // prev 2 weighted by ½, cur 2
		},
	}
	for _, tt := range tests {
		t.Run(tt.algo.String(), func(t *testing.T) {
			lim := limitOf(tt.algo, 4, time.Second)
			s := NewStore(StoreConfig{})
			cw := int64(windowOf(lim, tt.now))
			for i, c := range tt.charges {
				bl, err := s.ChargeWindow(1, []byte("k"), lim, c.cost, uint64(cw+c.window), at(tt.now))
				if err != nil || math.Abs(bl-c.wantBl) > 1e-9 {
					t.Fatalf("charge %d (window %+d): balance %v, %v; want %v", i, c.window, bl, err, c.wantBl)
				}
			}
			if bl, _ := s.Balance(1, []byte("k"), lim, at(tt.later)); math.Abs(bl-tt.laterBl) > 1e-9 {
				t.Fatalf("balance at %v = %v, want %v", tt.later, bl, tt.laterBl)
			}
		})
	}
}

// TestStoreTracksConsumptionPerWindow: local consumption is reported per
// window, and what an old window admitted is reported even when the entry
// has moved on to a new one before the drain.
func TestStoreTracksConsumptionPerWindow(t *testing.T) {
	for _, a := range windowed {
		t.Run(a.String(), func(t *testing.T) {
			lim := limitOf(a, 4, time.Second)
			span := time.Duration(windowSpan(lim)) // the sliding log tracks sub-windows of 62.5ms
			d0 := span / 10
			d1 := span + span/10 // the next window
			s := NewStore(StoreConfig{TrackConsumption: true})
			key := []byte("k")

			s.Take(1, key, lim, 1, at(d0))
			first := drain(s)["k"]
			w := windowOf(lim, d0)
			if first.Window != w || first.Used != 1 || first.Prev != 0 {
				t.Fatalf("first drain %+v, want window %d, used 1 from 0", first, w)
			}
			s.Take(1, key, lim, 2, at(d0))
			s.Take(1, key, lim, 1, at(d1)) // no drain in between

			var got []Consumption
			s.DrainDirty(func(c Consumption) { got = append(got, c) })
			want := []Consumption{
				{NS: 1, Key: "k", Epoch: first.Epoch, Window: w, Used: 3, Prev: 1},
				{NS: 1, Key: "k", Epoch: first.Epoch, Window: w + 1, Used: 1, Prev: 0},
			}
			if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("drained %+v, want %+v", got, want)
			}
			if again := drain(s); len(again) != 0 {
				t.Fatalf("second drain %+v, want nothing", again)
			}

			// A window with nothing undrained moves on without a leftover;
			// Record counts like Take.
			s.Charge(1, key, lim, 1, at(d1+span))
			s.Record(1, key, lim, 1, at(d1+span))
			got = got[:0]
			s.DrainDirty(func(c Consumption) { got = append(got, c) })
			if len(got) != 1 || got[0].Window != w+2 || got[0].Used != 1 || got[0].Prev != 0 {
				t.Fatalf("drained %+v, want window %d used 1 from 0 only", got, w+2)
			}
		})
	}
}

// TestWindowRescaleAcrossAPeriodChangeKeepsTheCount: a rule's period
// changing carries the window's count into the new period's current window.
func TestWindowRescaleAcrossAPeriodChangeKeepsTheCount(t *testing.T) {
	for _, a := range windowed {
		t.Run(a.String(), func(t *testing.T) {
			old, new := limitOf(a, 4, time.Second), limitOf(a, 8, 2*time.Second)
			s := NewStore(StoreConfig{})
			key := []byte("k")
			s.Take(1, key, old, 2, at(1200*ms))
			s.ChargeWindow(1, key, old, 1, windowOf(old, 1200*ms), at(1200*ms)) // a peer's, in this window
			s.Rescale(1, func(string) (Limit, Limit) { return old, new }, at(1500*ms))
			if bl, _ := s.Balance(1, key, new, at(1500*ms)); bl != 5 {
				t.Fatalf("balance after rescale = %v, want 8 − 3", bl)
			}
			// The count stays until the new period's window (the log: the new period) has passed.
			gone := 2 * time.Second // fixed, sliding: [0s, 2s) is the new current window
			if a == AlgoSlidingLog {
				gone = 3200 * ms // the local entry at 1.2s (the peer's was logged at 1.5s: 3.5s)
			}
			if bl, _ := s.Balance(1, key, new, at(gone-1)); bl != 5 {
				t.Fatalf("balance 1ns before %v = %v, want 5", gone, bl)
			}
			if a == AlgoSlidingWindow {
				return // the count then weighs as the previous window's
			}
			if bl, _ := s.Balance(1, key, new, at(gone)); bl <= 5 {
				t.Fatalf("balance at %v = %v, want some of the count gone", gone, bl)
			}
		})
	}
}

// TestAdoptTakesAPeersBalanceForTheCurrentWindowOnly: a balance a peer
// reports for another window says nothing about this one.
func TestAdoptTakesAPeersBalanceForTheCurrentWindowOnly(t *testing.T) {
	for _, a := range windowed {
		t.Run(a.String(), func(t *testing.T) {
			lim := limitOf(a, 4, time.Second)
			now := 10 * ms
			cw := windowOf(lim, now)
			s := NewStore(StoreConfig{})
			key := []byte("k")
			s.Take(1, key, lim, 1, at(now))
			for _, w := range []uint64{0, cw - 1, cw + 1} {
				if s.Adopt(1, key, lim, w, 1, at(now)) {
					t.Fatalf("adopted a balance for window %d in window %d", w, cw)
				}
			}
			if s.Adopt(1, key, lim, cw, 3.5, at(now)) {
				t.Fatal("adopted a higher balance than ours")
			}
			if bl, _ := s.Balance(1, key, lim, at(now)); bl != 3 {
				t.Fatalf("balance %v after refused adoptions, want 3", bl)
			}
			if !s.Adopt(1, key, lim, cw, 1, at(now)) {
				t.Fatal("did not adopt a lower balance for the current window")
			}
			if bl, _ := s.Balance(1, key, lim, at(now)); bl != 1 {
				t.Fatalf("balance %v after adopting 1, want 1", bl)
			}
			// A key this store does not hold takes the peer's balance as it is.
			if !s.Adopt(1, []byte("new"), lim, cw, -2, at(now)) {
				t.Fatal("did not adopt a balance for a missing key")
			}
			if bl, _ := s.Balance(1, []byte("new"), lim, at(now)); bl != -2 {
				t.Fatalf("adopted balance %v, want -2", bl)
			}
		})
	}
}
