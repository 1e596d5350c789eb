package testcluster

import (
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Two process clusters run at once on one host, each on ports, sockets and
// a label of its own: both start, each limits on its own, and neither hears
// the other's consumption.
func TestTwoProcessClustersAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sluiced processes")
	}
	bin := filepath.Join(t.TempDir(), "sluiced")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/sluiced").CombinedOutput(); err != nil {
		t.Fatalf("build sluiced: %v\n%s", err, out)
	}
	opts := ProcsOptions{N: 3, Sluiced: bin, Rules: "rules:\n  hot:\n    rate: 10/1h\n    burst: 10\n", GossipInterval: 20 * time.Millisecond}
	var clusters [2]*Procs
	var errs [2]error
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Add(1)
		go func() { defer wg.Done(); clusters[i], errs[i] = StartProcs(opts) }()
	}
	wg.Wait()
	for i, p := range clusters {
		if p != nil {
			t.Cleanup(func() { p.Close() })
		}
		if errs[i] != nil {
			t.Fatalf("cluster %d: %v", i, errs[i])
		}
	}
	a, b := clusters[0], clusters[1]
	if a.label == b.label {
		t.Fatalf("both clusters labelled %q", a.label)
	}
	// Each cluster spreads its own consumption: a's node 0 spends the key's
	// burst, b's node 1 half of it. A node lends itself only its share of a
	// new key's burst for one propagation delay (the first-contact hold), so
	// a request refused with a short retry-after is asked again.
	spend := func(p *Procs, node, n int) {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		deadline := time.Now().Add(30 * time.Second)
		for range n {
			for {
				d := p.Allow(node, "hot", "k", 1)
				if d.Allowed && !d.FailedOpen {
					break
				}
				if d.FailedOpen || d.RetryAfter > time.Second || time.Now().After(deadline) {
					t.Fatalf("a request within the burst was refused or failed open: %+v", d)
				}
				<-tick.C
			}
		}
	}
	spend(a, 0, 10)
	spend(b, 1, 5)
	seen := func(p *Procs, node int, atMost float64) bool {
		bal, ok := p.Balance(node, "hot", "k")
		return ok && bal <= atMost
	}
	deadline := time.Now().Add(60 * time.Second) // generous: a shared 2-core machine
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for !(seen(a, 2, 0.5) && seen(b, 2, 5.5)) {
		if time.Now().After(deadline) {
			ba, _ := a.Balance(2, "hot", "k")
			bb, _ := b.Balance(2, "hot", "k")
			t.Fatalf("consumption did not spread within each cluster: a's node 2 %.1f (want ≤ 0.5), b's node 2 %.1f (want ≤ 5.5)", ba, bb)
		}
		<-poll.C
	}
	// Neither heard the other: b's balance is its own 5 spent, not 15.
	for i := range b.Size() {
		if bal, ok := b.Balance(i, "hot", "k"); ok && bal < 4.5 {
			t.Fatalf("b's node %d has %.1f left: it was charged a's consumption", i, bal)
		}
	}
}
