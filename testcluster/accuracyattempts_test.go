package testcluster

import (
	"math"
	"testing"
	"time"
)

// Attempts of a real-time accuracy test on a loaded machine.
//
// TestEveryAlgorithmHeldToClusterLimit measures three in-process daemons
// in real time against one limiter given the same requests at the same
// instants. It failed once (sliding_window at 114%) during a full
// `go test ./...` at load average 10-14 on two cores, and passes alone.
// Cause (stallwatch.go): the process went unscheduled, its callers then
// sent the requests they had missed at once while every node decided on
// views a stall old, and the run ended before the nodes paid the
// overshoot back. That is DESIGN.md's bound (overshoot: what is admitted
// during one propagation delay, repaid afterwards), not a defect of the
// windowed algorithms: balances spread by 29 tokens in such a stall where
// a 20 ms round spreads them by 6, and the following 0.75 s admitted that
// much less than the reference.
//
// So an attempt that misses the bound is believed only if the process ran
// it: missed while the process stalled longer than five gossip rounds
// (starved), it is run again, up to accuracyAttempts in all, and the test
// fails if every one missed. A miss without such a stall fails at once;
// so does a cluster whose gossip does not carry consumption, starved or
// not, since every attempt then misses (see TestJudgeAttempt).

// accuracyAttempts is how many times an accuracy test may run a scenario
// that a starved machine made miss.
const accuracyAttempts = 3

// attemptVerdict is what one attempt of an accuracy test showed.
type attemptVerdict int

const (
	attemptHeld    attemptVerdict = iota // within the bound, nothing failed open
	attemptBroken                        // missed, and the process ran the scenario
	attemptStarved                       // missed while the process stalled past the limit
)

func (v attemptVerdict) String() string {
	return [...]string{"held", "broken", "starved"}[v]
}

// judgeAttempt judges r against one limiter: held if the cluster admitted
// within tol of it and nothing failed open; otherwise starved if the
// process stalled longer than stallLimit during the run, else broken.
func judgeAttempt(r AccuracyResult, tol float64, stallLimit time.Duration) attemptVerdict {
	switch {
	case r.FailedOpen == 0 && math.Abs(r.Accuracy()-1) <= tol:
		return attemptHeld
	case r.Stall > stallLimit:
		return attemptStarved
	default:
		return attemptBroken
	}
}

// holdAccuracy runs attempt until one is held, up to accuracyAttempts
// times; it fails t on a broken attempt, or when every attempt was
// starved. Each attempt is logged.
func holdAccuracy(t *testing.T, tol float64, stallLimit time.Duration, attempt func() AccuracyResult) {
	t.Helper()
	for i := range accuracyAttempts {
		r := attempt()
		v := judgeAttempt(r, tol, stallLimit)
		t.Logf("attempt %d: offered %d, cluster admitted %d (%d failed open), one limiter %d: %.1f%%; the process stalled %s at worst: %s",
			i+1, r.Offered, r.Admitted, r.FailedOpen, r.Ideal, 100*r.Accuracy(), r.Stall.Round(time.Millisecond), v)
		switch v {
		case attemptHeld:
			return
		case attemptBroken:
			t.Fatalf("admitted %d (%d failed open), a single limiter %d: beyond %.0f%% with the process stalled at most %s (under %s)",
				r.Admitted, r.FailedOpen, r.Ideal, 100*tol, r.Stall.Round(time.Millisecond), stallLimit)
		}
	}
	t.Fatalf("all %d attempts missed the bound (%.0f%%) with the process stalled over %s: the machine never ran the scenario",
		accuracyAttempts, 100*tol, stallLimit)
}

// TestJudgeAttempt: a miss is excused only by a stall past the limit, and
// failing open is a miss.
func TestJudgeAttempt(t *testing.T) {
	const tol, limit = 0.10, 100 * time.Millisecond
	for _, tc := range []struct {
		name string
		r    AccuracyResult
		want attemptVerdict
	}{
		{"within, no stall", AccuracyResult{Admitted: 352, Ideal: 348}, attemptHeld},
		{"within, stalled", AccuracyResult{Admitted: 352, Ideal: 348, Stall: 400 * time.Millisecond}, attemptHeld},
		{"just within", AccuracyResult{Admitted: 382, Ideal: 348}, attemptHeld},
		{"just over", AccuracyResult{Admitted: 383, Ideal: 348}, attemptBroken},
		{"over, no stall", AccuracyResult{Admitted: 397, Ideal: 348}, attemptBroken},
		{"over, stalled under the limit", AccuracyResult{Admitted: 397, Ideal: 348, Stall: limit}, attemptBroken},
		{"over, stalled past the limit", AccuracyResult{Admitted: 397, Ideal: 348, Stall: limit + time.Millisecond}, attemptStarved},
		{"under, no stall", AccuracyResult{Admitted: 300, Ideal: 348}, attemptBroken},
		{"under, stalled", AccuracyResult{Admitted: 300, Ideal: 348, Stall: 300 * time.Millisecond}, attemptStarved},
		{"failed open, no stall", AccuracyResult{Admitted: 348, Ideal: 348, FailedOpen: 1}, attemptBroken},
		{"failed open, stalled", AccuracyResult{Admitted: 348, Ideal: 348, FailedOpen: 1, Stall: time.Second}, attemptStarved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeAttempt(tc.r, tol, limit); got != tc.want {
				t.Errorf("judgeAttempt(%+v) = %s, want %s", tc.r, got, tc.want)
			}
		})
	}
}
