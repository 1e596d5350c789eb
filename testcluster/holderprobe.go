package testcluster

import (
	"context"
	"slices"
	"time"
)

// Convergence in owner mode, on any Target (real processes included).
//
// In owner mode a node hears of a key only while it uses it: a probe's
// token taken on one node is reflected on the key's owner and on no other
// node, so ProbeLag (every other node's balance drops) never ends there.
// Issue 20 defines convergence as a consumption reflected on every node
// that holds the key, and the simulator measures it so (sim/holders.go):
// holders nodes, spread over the cluster, each take one token of a fresh
// key; settle later the first of them takes one more, and the lag runs
// until every other holder reflects that token and the other holders'
// first ones. HolderProbeLag does the same against real daemons, reading
// the holders' balances: a holder reflects them when its balance is down
// from the burst by its own token, the prober's two and the other holders'
// first ones (holders + 1 in all), less the refill since its own token and
// half a token of slack (as TestOwnerModeConverges allows). Before this, `sim --validate` did not measure real
// owner-mode convergence at all ("not measured" in docs/SCALING.md).

// HolderProbeLag has holders nodes (at most the cluster, the first being
// from, the others spread over the cluster as the simulator spreads them)
// take one token of key, waits settle, takes one more on from, and returns
// how long from then until every other holder's balance reflects every
// holder's tokens. The key must be fresh (a full burst everywhere); rate is
// the rule's refill in tokens per second, allowed for while waiting.
// started reports whether the measured token was taken (at least two
// holders took theirs, the prober first), ok whether the holders then
// reflected it within timeout.
func HolderProbeLag(ctx context.Context, t Target, from, holders int, rule, key string, rate float64, settle, timeout time.Duration) (lag time.Duration, started, ok bool) {
	n := t.Size()
	h := min(holders, n)
	// The key is fresh: the prober's balance before any take is the burst
	// (a later holder's could already be down by an earlier one's token).
	full, ok := t.Balance(from, rule, key)
	if !ok {
		return 0, false, false
	}
	var nodes []int
	var took []time.Time
	for j := range h {
		i := (from + j*n/h) % n
		at := time.Now()
		if d := t.Allow(i, rule, key, 1); !d.Allowed || d.FailedOpen {
			continue
		}
		nodes, took = append(nodes, i), append(took, at)
	}
	if len(nodes) < 2 || nodes[0] != from {
		return 0, false, false // no two holders, or the prober is not one of them
	}
	wait := time.NewTimer(settle) // the scenario's pacing, as the simulator's probeSettle
	select {
	case <-ctx.Done():
		wait.Stop()
		return 0, false, false
	case <-wait.C:
	}
	start := time.Now()
	if d := t.Allow(from, rule, key, 1); !d.Allowed || d.FailedOpen {
		return 0, false, false
	}
	tokens := float64(len(nodes) + 1) // every holder's first, and the measured one
	pending := make([]int, 0, len(nodes)-1)
	for j := 1; j < len(nodes); j++ {
		pending = append(pending, j)
	}
	poll := time.NewTicker(200 * time.Microsecond) // as ProbeLag's
	defer poll.Stop()
	for len(pending) > 0 {
		if time.Since(start) > timeout || ctx.Err() != nil {
			return 0, true, false
		}
		<-poll.C
		pending = slices.DeleteFunc(pending, func(j int) bool {
			b, ok := t.Balance(nodes[j], rule, key)
			return ok && b <= full-tokens+0.5+rate*time.Since(took[j]).Seconds()
		})
	}
	return time.Since(start), true, true
}
