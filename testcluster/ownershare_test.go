package testcluster

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Owner mode's shares with real processes (gossip/ownershare.go,
// bucket/share.go). SLUICE_OWNERSHARE_BINARY runs another build of sluiced
// on every node (the "before" figures); SLUICE_OWNERSHARE_MIXED runs that
// build on node 1 only, beside this one (a rolling upgrade).

// ownerShareBinaries builds this sluiced and returns the options' binaries.
func ownerShareBinaries(t *testing.T, opts *ProcsOptions) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluiced")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/sluiced").CombinedOutput(); err != nil {
		t.Fatalf("build sluiced: %v\n%s", err, out)
	}
	opts.Sluiced = bin
	if other := os.Getenv("SLUICE_OWNERSHARE_BINARY"); other != "" {
		opts.Sluiced = other
		t.Logf("every node runs %s", other)
	}
	if old := os.Getenv("SLUICE_OWNERSHARE_MIXED"); old != "" {
		opts.NodeSluiced = make([]string, opts.N)
		opts.NodeSluiced[1] = old
		t.Logf("node 1 runs %s", old)
	}
}

// shareRules: rare is a limit whose burst is below the cluster's size;
// warm a key every node uses once to see that the cluster has formed.
const shareRules = "rules:\n  rare:\n    rate: 1/1s\n    burst: 4\n  warm:\n    rate: 1000/1h\n"

// Twenty sluiced processes in owner mode, each asked once for a key new to
// all of them, at about the same moment: the cluster admits about the
// burst (each node lends itself burst/20 of it, rounded up or down at
// random, until the key's owner answers), not one token per node.
func TestOwnerModeFirstContactProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs twenty sluiced processes")
	}
	const n = 20
	opts := ProcsOptions{N: n, Rules: shareRules, GossipInterval: 20 * time.Millisecond, GossipMode: "owner"}
	ownerShareBinaries(t, &opts)
	p, err := StartProcs(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	// The cluster has formed when every node hears every other's token on
	// a warm key within a few seconds: every node's ring names the same
	// owner (until then their counters go to different owners, and a key
	// used once is never reconciled). A new warm key each attempt.
	deadline := time.Now().Add(90 * time.Second)
	for attempt := 0; ; attempt++ {
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not form in 90 s (%d attempts)", attempt)
		}
		key := "warm-" + strconv.Itoa(attempt)
		for i := range n {
			p.Allow(i, "warm", key, 1)
		}
		if allHeard(p, n, key, time.Now().Add(3*time.Second)) {
			break
		}
	}
	for wave := range 3 {
		key := "first-" + strconv.Itoa(wave)
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted := 0
		start := time.Now()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if d := p.Allow(i, "rare", key, 1); d.Allowed && !d.FailedOpen {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		spread := time.Since(start)
		want := 4 + spread.Seconds()
		t.Logf("wave %d: %d of %d nodes admitted the new key's first request within %s; burst + rate × T = %.1f", wave, admitted, n, spread.Round(time.Millisecond), want)
		if float64(admitted) > math.Max(12, 2.5*want) {
			t.Fatalf("wave %d: %d admitted, want about %.1f (one per node would be %d)", wave, admitted, want, n)
		}
	}
}

// allHeard reports whether every one of the n nodes' balances of the warm
// key shows the n tokens taken before the deadline.
func allHeard(p *Procs, n int, key string, deadline time.Time) bool {
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for i := 0; i < n; {
		if b, ok := p.Balance(i, "warm", key); ok && b <= 1000-float64(n)+0.5 {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return false
		}
		<-poll.C
	}
	return true
}
