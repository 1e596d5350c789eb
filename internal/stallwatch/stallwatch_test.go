package stallwatch

import (
	"testing"
	"testing/synctest"
	"time"
)

// In a bubble time moves only when every goroutine waits, so every tick
// comes on time: a process that was never held reports no stall, however
// long it was watched (a watch that measured from its start, or counted
// the tick itself as lateness, would report one).
func TestStartReportsNothingWhenEveryTickIsOnTime(t *testing.T) {
	for _, watched := range []time.Duration{0, 3 * time.Millisecond, time.Second, time.Hour} {
		synctest.Test(t, func(t *testing.T) {
			stop := Start(5 * time.Millisecond)
			time.Sleep(watched) // fake time: the bubble advances the clock, no wall-clock wait
			if worst := stop(); worst != 0 {
				t.Errorf("watched %v with every tick on time: worst lateness %v, want 0", watched, worst)
			}
		})
	}
}
