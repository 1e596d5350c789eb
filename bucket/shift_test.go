package bucket

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// A clock step moved into the store with Shift leaves every elapsed-time
// state's balance as it was (no refill from a forward step, no freeze or
// drain from a backward one), and leaves window counts on the wall clock.
func TestShiftCarriesBalancesAcrossAClockStep(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 400_000_000, time.UTC)
	steps := []time.Duration{time.Hour, -time.Hour, 90 * time.Second, -700 * time.Millisecond}
	for _, algo := range []Algorithm{AlgoTokenBucket, AlgoGCRA, AlgoLeakyBucket, AlgoSlidingLog} {
		for _, step := range steps {
			t.Run(fmt.Sprintf("%v/%v", algo, step), func(t *testing.T) {
				lim, err := NewLimitOf(algo, 10, time.Second, 10)
				if err != nil {
					t.Fatal(err)
				}
				s := NewStore(StoreConfig{})
				key := []byte("k")
				if _, err := s.Take(1, key, lim, 7, t0); err != nil {
					t.Fatal(err)
				}
				t1 := t0.Add(300 * time.Millisecond)
				before, _ := s.Balance(1, key, lim, t1)
				if before >= 10 {
					t.Fatalf("balance %v before the step: the take did not land", before)
				}
				s.Shift(step)
				after, _ := s.Balance(1, key, lim, t1.Add(step))
				if math.Abs(after-before) > 1e-6 {
					t.Fatalf("balance %v after a %v step, want %v (as before it)", after, step, before)
				}
				// And time goes on from there: 0.5 s later the state is what
				// 0.5 s later would have been without any step.
				s2 := NewStore(StoreConfig{})
				s2.Take(1, key, lim, 7, t0)
				want, _ := s2.Balance(1, key, lim, t1.Add(500*time.Millisecond))
				got, _ := s.Balance(1, key, lim, t1.Add(step+500*time.Millisecond))
				if math.Abs(got-want) > 1e-6 {
					t.Fatalf("0.5 s after the step: balance %v, want %v", got, want)
				}
			})
		}
	}
}

// Windows follow the wall clock: Shift leaves their counts where they are,
// so a step into another window finds that window's count (none), and a
// step within the window keeps it.
func TestShiftLeavesWindowsOnTheWallClock(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 10, 0, time.UTC) // 10 s into a minute
	for _, algo := range []Algorithm{AlgoFixedWindow, AlgoSlidingWindow} {
		for _, tt := range []struct {
			step time.Duration
			want float64 // balance right after the step
		}{
			{time.Hour, 10},       // another window, no count there
			{-time.Hour, 10},      // likewise, earlier
			{20 * time.Second, 4}, // the same minute: its count stays
		} {
			t.Run(fmt.Sprintf("%v/%v", algo, tt.step), func(t *testing.T) {
				lim, err := NewLimitOf(algo, 10, time.Minute, 10)
				if err != nil {
					t.Fatal(err)
				}
				s := NewStore(StoreConfig{})
				key := []byte("k")
				if _, err := s.Take(1, key, lim, 6, t0); err != nil {
					t.Fatal(err)
				}
				s.Shift(tt.step)
				got, _ := s.Balance(1, key, lim, t0.Add(tt.step))
				if math.Abs(got-tt.want) > 1e-6 {
					t.Fatalf("balance %v right after a %v step, want %v", got, tt.step, tt.want)
				}
			})
		}
	}
}
