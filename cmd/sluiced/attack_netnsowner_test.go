package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/gossip"
	"github.com/sluicelabs/sluice/internal/stallwatch"
)

// Issue 20's goal 4 for owner mode, with real processes in network
// namespaces (as TestNetnsLossFirstCountersArrive for direct fan-out): five
// keyed members started with --gossip-mode owner, a share of every packet
// into each member's eth0 dropped by iptables (statistic match: this
// kernel has no netem), and the key's owner killed -9 mid-run. Counters
// are repeated until the owner acknowledges them and answers are
// cumulative; a node whose counters go unanswered sends them to the key's
// replica. The cluster holds burst + rate × T within 5%.

// netnsOwnerNodes is the owner-mode namespace cluster's size.
const netnsOwnerNodes = 5

// startNetnsOwnerCluster starts n keyed members in namespaces of their own,
// in owner mode, and waits until every one sees all n alive.
func startNetnsOwnerCluster(t *testing.T, n int) *netnsCluster {
	t.Helper()
	lab := netnsLab(t)
	c := &netnsCluster{dir: tempDir(t)}
	c.security = []string{"--gossip-key-file", secureKeyFile(t, c.dir, secureKey), "--gossip-mode", gossip.ModeOwner}
	for i := range n {
		join := ""
		if i > 0 {
			join = c.nodes[0].gossip
		}
		c.nodes = append(c.nodes, netnsStartNode(t, lab.Add(), c.dir, fmt.Sprintf("n%d", i+1), c.security, join))
	}
	for _, nd := range c.nodes {
		netnsWithin(t, 30*time.Second, fmt.Sprintf("%s sees %d members alive", nd.name, n), func() bool { return nd.alive(t) == n })
	}
	return c
}

// netnsLose makes each node's namespace drop share of the packets into its
// eth0.
func netnsLose(t *testing.T, c *netnsCluster, share float64) {
	t.Helper()
	for _, nd := range c.nodes {
		if _, err := nd.host.Exec("iptables", "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random",
			"--probability", fmt.Sprint(share), "-j", "DROP"); err != nil {
			t.Fatal(err)
		}
	}
}

// Five members in owner mode, each losing 10% or 30% of the packets into
// it, and in two cases the owner of the key killed -9 three seconds in:
// after first contact (160 calls at once per member) and 9 s of five times
// the limit, the cluster admitted burst + rate × T within 5%, and no
// member clamped another's honest report. Before a subscription's first
// answers carried its first prev (gossip/ownerfirst.go), a member that lost
// the replica's first answer after the kill was never charged the others'
// consumption while the owner was dead: 106-109%. With only the first four
// answers carrying it, a member that lost all four still was (under 30%
// loss, 105.8%, 109.4% and 110.2% in about one run of ten, the kill's
// excess never repaid); now an owner tells the first prev until the member
// confirms it (gossip/ownerrepeat.go).
func TestNetnsOwnerModeUnderLossAndOwnerKilled(t *testing.T) {
	tests := []struct {
		name string
		loss float64
		kill bool // the key's owner is killed -9 a third of the way in
	}{
		{"10% loss", 0.10, false},
		{"30% loss", 0.30, false},
		{"owner killed, 10% loss", 0.10, true},
		{"owner killed, 30% loss", 0.30, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			useShareBinary(t)
			c := startNetnsOwnerCluster(t, netnsOwnerNodes)
			netnsRequireIptables(t)
			if tt.loss > 0 {
				netnsLose(t, c, tt.loss)
			}
			const key, secs = "owner-lossy-key", 9
			var names []string
			for _, nd := range c.nodes {
				names = append(names, nd.name)
			}
			owner, replica := gossip.RingOwners(names, "api", key)
			var victim *netnsNode
			for _, nd := range c.nodes {
				if nd.name == owner {
					victim = nd
				}
			}
			var wg sync.WaitGroup
			if tt.kill {
				wg.Add(1)
				go func() {
					defer wg.Done()
					at := time.NewTimer(secs * time.Second / 3) // the scenario's timing, not waiting for an outcome
					defer at.Stop()
					<-at.C
					victim.p.cmd.Process.Kill()
				}()
			}
			start, stalls := time.Now(), stallWatch()
			burst := netnsBurst(c, "api", key, 160) // first contact: every member at once
			perNode := make([]int, len(c.nodes))
			for i := range perNode {
				perNode[i] = 100 // five times the limit
			}
			perSec, offered := netnsDriveSeconds(c, "api", key, perNode, secs*time.Second)
			got := burst
			for _, v := range perSec {
				got += v
			}
			wg.Wait()
			stalled := stalls()
			offered += 160 * len(c.nodes)
			elapsed := time.Since(start).Seconds()
			want := min(100+100*elapsed, float64(offered))
			killed := ""
			if tt.kill {
				killed = fmt.Sprintf("; owner %s killed -9 at %ds (replica %s)", owner, secs/3, replica)
			}
			t.Logf("%d members, owner mode, %.0f%% loss%s: admitted %d over %.2fs, burst + rate × T = %.0f (%.1f%%), offered %d; first contact %d, then per second %v",
				len(c.nodes), 100*tt.loss, killed, got, elapsed, want, 100*float64(got)/want, offered, burst, perSec)
			var bytes, packets float64
			live := 0
			for _, nd := range c.nodes {
				if nd == victim && tt.kill {
					continue
				}
				live++
				bytes += nd.metric(t, "sluice_gossip_bytes_sent_total")
				packets += nd.metric(t, "sluice_gossip_packets_sent_total")
				if tt.loss > 0 && netnsDropped(t, nd.host) == 0 {
					t.Errorf("%s's iptables dropped nothing: the loss was not applied", nd.name)
				}
				for _, member := range c.nodes {
					if v := nd.metric(t, `sluice_gossip_suspicious_reports_total{origin="`+member.name+`"}`); v != 0 {
						t.Errorf("%s clamped %v honest reports from %s", nd.name, v, member.name)
					}
				}
			}
			t.Logf("gossip sent per live member: %.0f bytes/s, %.0f packets/s (over the run and the cluster's forming)",
				bytes/float64(live)/elapsed, packets/float64(live)/elapsed)
			flaps := 0 // members declared dead (or left) that were not killed: a partition, as the cluster saw it
			for _, nd := range c.nodes {
				for _, line := range strings.Split(nd.p.stderr.String(), "\n") {
					if strings.Contains(line, "member left or died") && !(tt.kill && strings.Contains(line, "name="+owner+" ")) {
						flaps++
					}
				}
			}
			t.Logf("the test process went unscheduled for %s at worst; members declared dead that were alive: %d", stalled.Round(time.Millisecond), flaps)
			skipIfStarved(t, offered, 160*len(c.nodes)+100*len(c.nodes)*secs)
			skipIfStalled(t, stalled)
			if flaps > 0 {
				t.Skipf("members declared %d live members dead: a partition as the cluster saw it, where each side limits alone (not what this test measures)", flaps)
			}
			if math.Abs(float64(got)-want) > 0.05*want {
				t.Errorf("admitted %d, want %.0f ± 5%%", got, want)
			}
		})
	}
}

// netnsDriveSeconds is netnsDrive, counting admissions per second of the
// run.
func netnsDriveSeconds(c *netnsCluster, rule, key string, perNode []int, d time.Duration) (perSec []int, offered int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	secs := int((d + time.Second - 1) / time.Second)
	perSec = make([]int, secs)
	start := time.Now()
	for i, rate := range perNode {
		if rate == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for sent := 0; sent < rate*(secs+1); sent++ {
				<-tick.C
				at := time.Since(start)
				if at >= d {
					return
				}
				dec := c.nodes[i].c.Allow(context.Background(), rule, key)
				mu.Lock()
				offered++
				if dec.Allowed && !dec.FailedOpen {
					perSec[int(at/time.Second)]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return perSec, offered
}

// useShareBinary runs the sluiced SLUICE_SHARE_BINARY names, if set,
// instead of the one TestMain built, for the rest of the test (to run an
// older build in the same scenario, as TestNetnsLossFirstCountersArrive
// does).
func useShareBinary(t *testing.T) {
	if b := os.Getenv("SLUICE_SHARE_BINARY"); b != "" {
		saved := binary
		binary = b
		t.Cleanup(func() { binary = saved })
	}
}

// stallWatch measures how late a 10 ms ticker in the test process runs
// until stop is called, which returns the worst lateness: a machine
// that leaves a process unscheduled for a quarter of a second leaves the
// daemons so too, and a decentralised limit then admits on views that
// old (each node refills its view for that long before it hears the
// others), which no gossip change can prevent.
func stallWatch() (stop func() time.Duration) { return stallwatch.Start(10 * time.Millisecond) }

// skipIfStalled skips the rest of a test during which the test process
// went unscheduled for more than 250 ms (stallWatch), saying so; the
// figures are logged before.
func skipIfStalled(t *testing.T, worst time.Duration) {
	t.Helper()
	if worst > 250*time.Millisecond {
		t.Skipf("the test process went unscheduled for %s at worst: the machine is too loaded to measure accuracy", worst.Round(time.Millisecond))
	}
}

// assertNearLimit checks what a drive admitted against want: never more
// than tol above it, and no more than tol below it unless the callers made
// less than 70% of the calls asked (see skipIfStarved: a caller that is
// not scheduled leaves refill unused, so the count then measures the
// machine, and the lower bound is only logged).
func assertNearLimit(t *testing.T, what string, got, offered, asked int, want, tol float64) {
	t.Helper()
	if float64(got) > (1+tol)*want {
		t.Errorf("%s: admitted %d, want at most %.0f + %.0f%%", what, got, want, 100*tol)
	}
	if float64(got) < (1-tol)*want {
		if float64(offered) >= 0.7*float64(asked) {
			t.Errorf("%s: admitted %d, want at least %.0f - %.0f%%", what, got, want, 100*tol)
		} else {
			t.Logf("%s: admitted %d, under %.0f - %.0f%%, but the callers made only %d of the %d calls asked: the lower bound is not asserted",
				what, got, want, 100*tol, offered, asked)
		}
	}
}

// skipIfStarved skips the rest of a test whose callers made less than 70%
// of the calls asked of them: the machine (2 cores shared with other test
// runs) did not run the scenario, and processes that are not scheduled for
// whole seconds neither gossip nor decide on time, so what they admitted
// says nothing of the limiter. The figures are logged before.
func skipIfStarved(t *testing.T, offered, asked int) {
	t.Helper()
	if float64(offered) < 0.7*float64(asked) {
		t.Skipf("the callers made only %d of the %d calls asked (%.0f%%): the machine is too loaded to measure accuracy",
			offered, asked, 100*float64(offered)/float64(asked))
	}
}
