package testcluster

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// forgedCounter is a raw memberlist UDP packet (testcluster's label, user message)
// carrying a stamped counters packet from sender about origin's counter.
func forgedCounter(sender, origin, rule, key string, epoch, used uint64) []byte {
	b := []byte{8} // memberlist's userMsg
	b = mp.AppendArrayHeader(b, 5)
	b = mp.AppendUint(b, 1)
	b = mp.AppendStr(b, sender)
	b = mp.AppendArrayHeader(b, 1)
	b = mp.AppendStr(b, origin)
	b = mp.AppendArrayHeader(b, 1)
	b = mp.AppendArrayHeader(b, 6)
	b = mp.AppendUint(b, 0)
	b = mp.AppendStr(b, rule)
	b = mp.AppendStr(b, key)
	b = mp.AppendUint(b, epoch)
	b = mp.AppendUint(b, 0)
	b = mp.AppendUint(b, used)
	b = mp.AppendUint(b, uint64(time.Now().UnixNano()))
	p, err := memberlist.AddLabelHeaderToPacket(b, "testcluster")
	if err != nil {
		panic(err)
	}
	return p
}

// A forged counter in a real origin's name, of an epoch newer than the
// origin's (plausible: half an hour ahead), does not make a node ignore
// the origin's real consumption: before, the receiver took the forged
// epoch as the origin's newest and dropped every later real counter as
// stale, so the key admitted its limit on each node (N× in all). Senders
// are checked now (a packet in node-1's name from another address is
// refused, and in a cluster small enough for direct fan-out so is a
// counter of node-1's from another sender), so the cluster here relays
// (fan-out limit 1) and the forger sends as a relay it made up.
func TestForgedEpochDoesNotShadowARealOrigin(t *testing.T) {
	// No periodic push-pull: it would repair the loss (before, within one
	// interval), hiding what the counters alone do.
	c := start(t, Options{N: 2, GossipInterval: 20 * time.Millisecond, PushPullInterval: time.Hour, FanoutLimit: 1, GossipMode: "relay",
		Rules: "rules:\n  slow:\n    rate: 100/1h\n"})
	conn, err := net.Dial("udp", c.Node(0).Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ahead := uint64(time.Now().Add(30 * time.Minute).UnixNano())
	if _, err := conn.Write(forgedCounter("relay", "node-1", "slow", "shadowed", ahead, 1)); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitBalances("slow", "shadowed", 15*time.Second, func(node int, b float64) bool { return node != 0 || b < 99.9 }); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if d := c.Allow(1, "slow", "shadowed", 1); !d.Allowed {
			t.Fatalf("node 1 refused a request of a fresh key: %+v", d)
		}
	}
	// Node 0 is charged node 1's 50 real tokens on top of the forged one.
	if err := c.WaitBalances("slow", "shadowed", 15*time.Second, func(node int, b float64) bool { return node != 0 || b < 51 }); err != nil {
		t.Fatalf("node 0 ignored node 1's real consumption after a forged newer epoch: %v (balances %v)", err, c.Balances("slow", "shadowed"))
	}
	t.Logf("balances after the forged epoch and 50 real admissions on node 1: %v", c.Balances("slow", "shadowed"))
}
