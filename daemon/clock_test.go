package daemon

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testStepClock is a stepClock over a fake monotonic and wall clock.
type testStepClock struct {
	*stepClock
	mono time.Duration
	wall time.Time
}

func newTestStepClock() *testStepClock {
	t := &testStepClock{wall: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	t.stepClock = &stepClock{start: t.wall, elapsed: func() time.Duration { return t.mono }, wall: func() time.Time { return t.wall }}
	return t
}

// pass lets d go by on both clocks.
func (t *testStepClock) pass(d time.Duration) { t.mono += d; t.wall = t.wall.Add(d) }

func TestStepClockFollowsWallStepsOnly(t *testing.T) {
	tests := []struct {
		name     string
		step     time.Duration // applied to the wall only
		wantStep time.Duration // what resync reports (0: none)
	}{
		{"no step", 0, 0},
		{"drift under the threshold is not a step", clockStepThreshold - time.Millisecond, 0},
		{"a forward step", 90 * time.Second, 90 * time.Second},
		{"a backward step", -time.Hour, -time.Hour},
		{"just at the threshold", -clockStepThreshold, -clockStepThreshold},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestStepClock()
			c.pass(10 * time.Second)
			if got := c.Now(); !got.Equal(c.wall) {
				t.Fatalf("before any step: clock %v, wall %v", got, c.wall)
			}
			c.wall = c.wall.Add(tt.step)
			before := c.Now()
			step, stepped := c.resync()
			if stepped != (tt.wantStep != 0) || step != tt.wantStep {
				t.Fatalf("resync = %v, %v; want %v", step, stepped, tt.wantStep)
			}
			if !stepped {
				if !c.Now().Equal(before) {
					t.Fatalf("no step, yet the clock moved from %v to %v", before, c.Now())
				}
				return
			}
			if !c.Now().Equal(c.wall) || c.steps.Load() != 1 {
				t.Fatalf("after the step: clock %v, wall %v, steps %d", c.Now(), c.wall, c.steps.Load())
			}
			// Time then passes with the monotonic clock again.
			c.pass(3 * time.Second)
			if !c.Now().Equal(c.wall) {
				t.Fatalf("3 s after the step: clock %v, wall %v", c.Now(), c.wall)
			}
			if _, again := c.resync(); again {
				t.Fatal("a second resync with no new step stepped again")
			}
		})
	}
}

// A daemon whose wall clock steps an hour forward follows it within one
// check: the token bucket's balance is carried over (the step refills
// nothing), the fixed window is counted in the window the wall now says,
// and the step is counted.
func TestDaemonFollowsAWallClockStep(t *testing.T) {
	d, _, _ := newDaemon(t, "rules:\n  tb: {rate: 10/1m}\n  fw: {rate: 10/1m, algorithm: fixed_window}\n")
	clk := newTestStepClock()
	clk.wall = clk.wall.Add(10 * time.Second) // 10 s into a minute
	clk.start = clk.wall
	d.clock, d.now = clk.stepClock, clk.Now
	for range 7 {
		decide(t, d, checks("tb", "k", "fw", "k"))
	}
	tbBefore, _ := d.Balance("tb", "k")

	clk.wall = clk.wall.Add(time.Hour) // NTP steps the wall clock
	d.resyncClock()

	if got, _ := d.Balance("tb", "k"); got != tbBefore {
		t.Errorf("token bucket balance %v after the step, want %v (a step refills nothing)", got, tbBefore)
	}
	if got, _ := d.Balance("fw", "k"); got != 10 {
		t.Errorf("fixed window balance %v after the step, want 10 (a window the wall now says, with no count)", got)
	}
	if got := testutil.ToFloat64(d.metrics.clockSteps); got != 1 {
		t.Errorf("sluice_clock_steps_total %v, want 1", got)
	}
	if !d.now().Equal(clk.wall) {
		t.Errorf("daemon clock %v, wall %v", d.now(), clk.wall)
	}
}
