package testcluster

import (
	"fmt"
	"testing"
	"time"
)

// leaveRules: a limit that refills so slowly (10 an hour) that every
// token taken shows for the whole test.
const leaveRules = "rules:\n  ledger:\n    rate: 10/1h\n    burst: 100000\n"

// leaveBurst is leaveRules' burst.
const leaveBurst = 100000

// A key's owner stopped cleanly (Leave) right after it counted a
// consumption whose answer to another user of the key was lost: the owner
// acknowledged the consumer's counter, so the consumer never sends it
// again and the key's next owner never learns it; only the owner's repeat
// (gossip/ownerrepeat.go) can still tell the other user, and only while
// the owner is a member there. Here the owner's packets to that user are
// lost from just before the consumption until healAfter into the stop.
func TestOwnerStoppedRightAfterALostAnswer(t *testing.T) {
	for _, healAfter := range []time.Duration{150 * time.Millisecond, 300 * time.Millisecond} {
		t.Run(fmt.Sprint("healed after ", healAfter), func(t *testing.T) {
			c := start(t, Options{N: 3, Rules: leaveRules, GossipInterval: 20 * time.Millisecond, GossipMode: "owner"})
			owner := c.Node(0).Name
			key := ""
			for i := 0; key == "" && i < 1000; i++ {
				k := fmt.Sprint("leave-", i)
				if o, _ := c.Node(1).Daemon().Syncer().OwnerOf("ledger", k); o == owner {
					key = k
				}
			}
			for i := range 3 {
				if d := c.Allow(i, "ledger", key, 1); !d.Allowed || d.FailedOpen {
					t.Fatalf("node %d refused its first token: %+v", i, d)
				}
			}
			if err := c.WaitBalances("ledger", key, 15*time.Second, func(_ int, b float64) bool { return b <= leaveBurst-3+0.5 }); err != nil {
				t.Fatal(err)
			}
			c.Partition([]int{0}, []int{2}) // the owner's answers to node 2 are lost
			sent := c.Node(0).Daemon().Syncer().OwnerStats().AnswersSent
			if d := c.Allow(1, "ledger", key, 1); !d.Allowed || d.FailedOpen {
				t.Fatalf("node 1 refused: %+v", d)
			}
			if err := poll(15*time.Second, func() bool {
				b, _ := c.Node(0).Daemon().Balance("ledger", key)
				return b <= leaveBurst-4+0.5 && c.Node(0).Daemon().Syncer().OwnerStats().AnswersSent >= sent+2
			}, func() string { return "the owner counts node 1's token and answers both users" }); err != nil {
				t.Fatal(err)
			}
			stopped := make(chan error, 1)
			began := time.Now()
			go func() { stopped <- c.Stop(0) }()
			heal := time.NewTimer(healAfter)
			<-heal.C // the loss lasts this long into the stop (the scenario, not a wait for an outcome)
			c.Heal()
			if err := <-stopped; err != nil {
				t.Logf("stop: %v", err)
			}
			t.Logf("the owner's stop took %s", time.Since(began).Round(time.Millisecond))
			err := poll(10*time.Second, func() bool {
				b, _ := c.Node(2).Daemon().Balance("ledger", key)
				return b <= leaveBurst-4+0.5
			}, func() string {
				b, _ := c.Node(2).Daemon().Balance("ledger", key)
				return fmt.Sprintf("node 2 shows node 1's token (balance %.2f, want %d)", b, leaveBurst-4)
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A node stopped cleanly right after admitting, its counters to the key's
// owner lost until 450 ms into the stop (longer than a leave without
// settling takes here, shorter than the settle's bound): the owner counts
// them before it takes the node's departure, and every other user shows
// the token.
func TestHolderStoppedWhileItsCountersAreLost(t *testing.T) {
	c := start(t, Options{N: 3, Rules: leaveRules, GossipInterval: 20 * time.Millisecond, GossipMode: "owner"})
	owner := c.Node(0).Name
	key := ""
	for i := 0; key == "" && i < 1000; i++ {
		k := fmt.Sprint("holder-", i)
		if o, _ := c.Node(1).Daemon().Syncer().OwnerOf("ledger", k); o == owner {
			key = k
		}
	}
	for i := range 3 {
		if d := c.Allow(i, "ledger", key, 1); !d.Allowed || d.FailedOpen {
			t.Fatalf("node %d refused its first token: %+v", i, d)
		}
	}
	if err := c.WaitBalances("ledger", key, 15*time.Second, func(_ int, b float64) bool { return b <= leaveBurst-3+0.5 }); err != nil {
		t.Fatal(err)
	}
	c.Partition([]int{1}, []int{0}) // node 1's counters to the owner are lost
	if d := c.Allow(1, "ledger", key, 1); !d.Allowed || d.FailedOpen {
		t.Fatalf("node 1 refused: %+v", d)
	}
	stopped := make(chan error, 1)
	began := time.Now()
	go func() { stopped <- c.Stop(1) }()
	heal := time.NewTimer(450 * time.Millisecond)
	<-heal.C // the loss lasts this long into the stop (the scenario, not a wait for an outcome)
	c.Heal()
	if err := <-stopped; err != nil {
		t.Logf("stop: %v", err)
	}
	t.Logf("node 1's stop took %s", time.Since(began).Round(time.Millisecond))
	for _, i := range []int{0, 2} {
		if err := poll(10*time.Second, func() bool {
			b, _ := c.Node(i).Daemon().Balance("ledger", key)
			return b <= leaveBurst-4+0.5
		}, func() string {
			b, _ := c.Node(i).Daemon().Balance("ledger", key)
			return fmt.Sprintf("node %d shows node 1's last token (balance %.2f, want %d)", i, b, leaveBurst-4)
		}); err != nil {
			t.Error(err)
		}
	}
}
