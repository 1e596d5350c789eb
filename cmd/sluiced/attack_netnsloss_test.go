package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Issue 20's loss experiment, with real processes in network namespaces:
// with 10% and 30% of every packet into each member dropped (iptables
// statistic match), a key new to the cluster, hit at once on each of
// three members (160 calls from 8 callers each) and then under even load
// at twice the limit on each, is held within 5% of burst + rate × T
// over 10 s (the same scenario without loss runs for comparison). Before each counter was carried in several rounds, a member
// that lost a peer's first counters never charged them until a push-pull
// happened to explain them (6-11% over). SLUICE_SHARE_BINARY runs another
// sluiced build in the same scenario.
func TestNetnsLossFirstCountersArrive(t *testing.T) {
	if b := os.Getenv("SLUICE_SHARE_BINARY"); b != "" {
		saved := binary
		binary = b
		t.Cleanup(func() { binary = saved })
	}
	for _, loss := range []float64{0, 0.10, 0.30} {
		t.Run(fmt.Sprintf("%.0f%%", 100*loss), func(t *testing.T) {
			c := startNetnsCluster(t, false)
			netnsRequireIptables(t)
			for _, n := range c.nodes {
				if loss == 0 {
					break // the same scenario without loss, for comparison
				}
				if _, err := n.host.Exec("iptables", "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random",
					"--probability", fmt.Sprint(loss), "-j", "DROP"); err != nil {
					t.Fatal(err)
				}
			}
			const secs = 10
			start := time.Now()
			burst := netnsBurst(c, "api", "lossy-key", 160) // first contact: every member at once
			got, offered := netnsDrive(c, "api", "lossy-key", []int{200, 200, 200}, secs*time.Second)
			got, offered = got+burst, offered+160*len(c.nodes)
			elapsed := time.Since(start).Seconds()
			want := min(100+100*elapsed, float64(offered))
			t.Logf("%.0f%% loss: admitted %d over %.2fs, burst + rate × T = %.0f (%.1f%%), offered %d",
				100*loss, got, elapsed, want, 100*float64(got)/want, offered)
			var bytes, packets float64
			for _, n := range c.nodes {
				bytes += n.metric(t, "sluice_gossip_bytes_sent_total")
				packets += n.metric(t, "sluice_gossip_packets_sent_total")
			}
			t.Logf("gossip sent per member: %.0f bytes/s, %.0f packets/s (over the run and the cluster's forming)",
				bytes/float64(len(c.nodes))/elapsed, packets/float64(len(c.nodes))/elapsed)
			for i, n := range c.nodes {
				if loss == 0 {
					break
				}
				if netnsDropped(t, n.host) == 0 {
					t.Errorf("%s's iptables dropped nothing: the loss was not applied", c.nodes[i].name)
				}
			}
			if float64(got) > 1.05*want {
				t.Errorf("admitted %d, want at most %.0f + 5%%", got, want)
			}
			c.assertNoneClamped(t)
			// Below the limit, a loaded machine that made far fewer calls than
			// asked (gaps in which refill went unused) measures the machine.
			skipIfStarved(t, offered, 160*len(c.nodes)+600*secs)
			if float64(got) < 0.95*want {
				t.Errorf("admitted %d, want at least %.0f - 5%%", got, want)
			}
		})
	}
}

// netnsBurst makes calls calls on every member at once, from 8 callers
// each, and returns how many were admitted.
func netnsBurst(c *netnsCluster, rule, key string, calls int) int {
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for _, n := range c.nodes {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range calls / 8 {
					if d := n.c.Allow(context.Background(), rule, key); d.Allowed && !d.FailedOpen {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	return int(admitted.Load())
}
