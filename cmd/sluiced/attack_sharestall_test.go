package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Which 2 s windows of a share run (attack_share_test.go) measure fairness.
//
// Fairness is claimed for even demand on daemons that run: every node
// offers about as much, and every daemon decides and gossips on time. On a
// loaded two-core machine neither holds all the time. A node's caller can
// stall for part of a window (it then asks, and is admitted, less: see
// evenDemand), and a daemon can be starved of the CPU itself: its gossip
// rounds and answers run late, the others' consumption reaches it in
// lumps, and its share of the window falls with no stall of its caller.
// TestProcsEvenDemandIsShared/3 failed that way once with a share of 0.48
// of 1/N at a load average of 16, and passed on the rerun.
//
// A daemon's starvation is measured from outside, by the driver: the time
// each paced call took, from the call to its answer. Over a unix socket on
// a machine that runs the daemons, an answer takes tens to hundreds of
// microseconds; one that took stalledAnswer (five of the test's 20 ms
// gossip intervals) means the daemon (or the driver waiting on it) went
// without the CPU for that long, and its gossip rounds with it; a call the
// daemon did not decide at all (the client failed it open) says the same.
// Such a window is logged with the node and the answer's time, and not
// asserted. A failed run logs every node's balance of the key.
//
// Skipping windows must not let the test pass on nothing: a run with fewer
// than minAssertedWindows asserted windows (of the four after first
// contact) is run again once, and the test fails if the rerun is no
// better. A fairness fault in the daemons makes no answer slow, so on an
// idle or moderately loaded machine every window is asserted and the test
// still fails when fairness breaks (with the fair floor disabled, see the
// notes of s11-validate).

// stalledAnswer is the answer time from which a window is taken for one in
// which a daemon was starved of the CPU: five gossip intervals of the share
// tests (20 ms).
const stalledAnswer = 100 * time.Millisecond

// minAssertedWindows is how many of a run's 2 s windows after the first
// must be asserted for the run to count.
const minAssertedWindows = 2

// shareBalances is each node's balance of key, for the log of a failure.
func shareBalances(nodes []*shareNode, key string) []string {
	var out []string
	for _, sn := range nodes {
		in, err := sn.c.Inspect(context.Background(), "api", key)
		if err != nil {
			out = append(out, sn.name+": "+err.Error())
			continue
		}
		out = append(out, fmt.Sprintf("%s: %.1f", sn.name, in.Balance))
	}
	return out
}

// windows is how many 2 s windows follow the first.
func (r shareRun) windows() int { return len(r.admitted[0])/2 - 1 }

// assertedWindows counts the windows after the first that unasserted
// leaves in.
func (r shareRun) assertedWindows() int {
	n := 0
	for w := 2; w+2 <= len(r.admitted[0]); w += 2 {
		if r.unasserted(w) == "" {
			n++
		}
	}
	return n
}

// unasserted says why the 2 s window from second w does not measure
// fairness ("" if it does): a caller stalled (uneven demand) or a daemon
// answered as late as stalledAnswer or did not decide a call (the client
// failed it open).
func (r shareRun) unasserted(w int) string {
	if !evenDemand(r.offeredSec, w) {
		return "demand uneven: the machine stalled some callers"
	}
	for i, f := range r.failedOpen {
		if f[w]+f[w+1] > 0 {
			return fmt.Sprintf("daemon starved: s%d did not decide %d calls (failed open)", i, f[w]+f[w+1])
		}
	}
	node, slowest := -1, time.Duration(0)
	for i, s := range r.slowest {
		if late := max(s[w], s[w+1]); late > slowest {
			node, slowest = i, late
		}
	}
	if slowest >= stalledAnswer {
		return fmt.Sprintf("daemon starved: s%d answered in %s", node, slowest.Round(time.Millisecond))
	}
	return ""
}

// evenDemand reports whether every node offered, in the 2 s window from
// second w, at least 80% of what the busiest node offered (random arrivals
// alone spread ten nodes' counts by about 10%; a caller stalled for a fifth
// of the window falls below).
func evenDemand(offeredSec [][]int, w int) bool {
	least, most := math.MaxInt, 0
	for _, o := range offeredSec {
		n := o[w] + o[w+1]
		least, most = min(least, n), max(most, n)
	}
	return float64(least) >= 0.8*float64(most)
}

// slowestPerWindow is the slowest answer of any daemon in each 2 s window,
// for the log.
func (r shareRun) slowestPerWindow() []time.Duration {
	var out []time.Duration
	for w := 0; w+2 <= len(r.admitted[0]); w += 2 {
		slowest := time.Duration(0)
		for _, s := range r.slowest {
			slowest = max(slowest, s[w], s[w+1])
		}
		out = append(out, slowest.Round(10*time.Microsecond))
	}
	return out
}
