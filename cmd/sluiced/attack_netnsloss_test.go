package main

import (
	"fmt"
	"math"
	"os"
	"testing"
	"time"
)

// Issue 20's loss experiment, with real processes in network namespaces:
// with 10% and 30% of every packet into each member dropped (iptables
// statistic match), a key new to the cluster under even load at twice the
// limit on each of three members is held within 5% of burst + rate × T
// over 10 s. Before each counter was carried in several rounds, a member
// that lost a peer's first counters never charged them until a push-pull
// happened to explain them (6-11% over). SLUICE_SHARE_BINARY runs another
// sluiced build in the same scenario.
func TestNetnsLossFirstCountersArrive(t *testing.T) {
	if b := os.Getenv("SLUICE_SHARE_BINARY"); b != "" {
		saved := binary
		binary = b
		t.Cleanup(func() { binary = saved })
	}
	for _, loss := range []float64{0.10, 0.30} {
		t.Run(fmt.Sprintf("%.0f%%", 100*loss), func(t *testing.T) {
			c := startNetnsCluster(t, false)
			netnsRequireIptables(t)
			for _, n := range c.nodes {
				if _, err := n.host.Exec("iptables", "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random",
					"--probability", fmt.Sprint(loss), "-j", "DROP"); err != nil {
					t.Fatal(err)
				}
			}
			const secs = 10
			start := time.Now()
			got, offered := netnsDrive(c, "api", "lossy-key", []int{200, 200, 200}, secs*time.Second)
			elapsed := time.Since(start).Seconds()
			want := min(100+100*elapsed, float64(offered))
			t.Logf("%.0f%% loss: admitted %d over %.2fs, burst + rate × T = %.0f (%.1f%%), offered %d",
				100*loss, got, elapsed, want, 100*float64(got)/want, offered)
			for i, n := range c.nodes {
				if netnsDropped(t, n.host) == 0 {
					t.Errorf("%s's iptables dropped nothing: the loss was not applied", c.nodes[i].name)
				}
			}
			if math.Abs(float64(got)-want) > 0.05*want {
				t.Errorf("admitted %d, want %.0f ± 5%%", got, want)
			}
			c.assertNoneClamped(t)
		})
	}
}
