package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// aggProcsRules is ownerRules with a warm key to see the cluster formed.
const aggProcsRules = ownerRules + "  warm:\n    rate: 1000/1h\n"

// TestOwnerAggregationProcesses: real sluiced processes as they ship (owner
// mode's shares on), in owner mode with --aggregate-above 4, in both
// first-contact modes. Saturating load on one key over every node: the
// key's owner has its users go through aggregators (it logs so), the
// owner's view reaches them through their aggregators, and the cluster
// holds burst + rate × T within 5% (the lower bound only when the load
// was offered).
func TestOwnerAggregationProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sluiced processes")
	}
	const n = 10
	bin := filepath.Join(t.TempDir(), "sluiced")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/sluiced").CombinedOutput(); err != nil {
		t.Fatalf("build sluiced: %v\n%s", err, out)
	}
	for _, contact := range []string{"token", "share"} {
		t.Run(contact, func(t *testing.T) {
			logs, err := os.Create(filepath.Join(t.TempDir(), "sluiced.log"))
			if err != nil {
				t.Fatal(err)
			}
			defer logs.Close()
			p, err := StartProcs(ProcsOptions{N: n, Sluiced: bin, Rules: aggProcsRules, GossipInterval: 20 * time.Millisecond,
				GossipMode: "owner", FirstContact: contact, AggregateAbove: aggAbove, Stderr: logs, LogLevel: "info"})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			// The cluster has formed when every node hears every other's
			// token on a warm key (every ring names the same owner).
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
			const secs, perNode = 6, 50 // 500/s over the 10 nodes: five times the limit
			var admitted, offered atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tick := time.NewTicker(time.Second / perNode)
					defer tick.Stop()
					for sent := 0; sent < perNode*secs && time.Since(start) < secs*time.Second; sent++ {
						<-tick.C
						offered.Add(1)
						if d := p.Allow(i, "api", "agg-proc-key", 1); d.Allowed && !d.FailedOpen {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			want := 100 + 100*time.Since(start).Seconds()
			got := int(admitted.Load())
			asked := n * perNode * secs
			t.Logf("%d processes, --first-contact %s, --aggregate-above %d: admitted %d; burst + rate × T = %.0f (%.1f%%); offered %d of %d asked",
				n, contact, aggAbove, got, want, 100*float64(got)/want, offered.Load(), asked)
			if err := logs.Sync(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(logs.Name())
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), "a key's users go through aggregators") {
				t.Errorf("no daemon logged that a key's users go through aggregators:\n%s", tail(string(b), 2000))
			}
			withinShare(t, got, int(offered.Load()), asked, want, 0.05) // the lower bound only when the load was offered
		})
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("...%s", s[len(s)-n:])
}
