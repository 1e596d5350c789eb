package gossip

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// captureTransport records every packet it sends, so a test can replay the
// very bytes later, as an attacker on the wire would.
type captureTransport struct {
	memberlist.Transport
	mu   sync.Mutex
	sent []capturedPacket
}

type capturedPacket struct {
	b    []byte
	addr string
}

func (c *captureTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	c.mu.Lock()
	c.sent = append(c.sent, capturedPacket{bytes.Clone(b), addr})
	c.mu.Unlock()
	return c.Transport.WriteTo(b, addr)
}

func (c *captureTransport) captured() []capturedPacket {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]capturedPacket(nil), c.sent...)
}

// A real, encrypted counters packet, captured on the wire and replayed to
// its receiver after the seen table's prune has forgotten the counter
// (two minutes later on the nodes' clock), charges nothing: its stamp is
// too old. Counters sent afresh are charged as usual.
func TestReplayedCapturedPacketChargesNothing(t *testing.T) {
	key := []byte("0123456789abcdef")
	clk := &fakeClock{t: time.Now()}
	var capture *captureTransport
	start := func(name string, l Ledger, wrap bool) *Syncer {
		cfg := Config{NodeName: name, BindAddr: "127.0.0.1", GossipInterval: 5 * time.Millisecond, SecretKey: key, Label: "test"}
		if wrap {
			cfg.WrapTransport = func(t memberlist.Transport) memberlist.Transport {
				capture = &captureTransport{Transport: t}
				return capture
			}
		}
		s, err := New(cfg, l)
		if err != nil {
			t.Fatal(err)
		}
		s.now = clk.now // before Start: nothing reads it concurrently yet
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Shutdown() })
		return s
	}
	la, lb := newMemLedger(), newMemLedger()
	a := start("a", la, true)
	b := start("b", lb, false)
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a sees b", func() bool { return a.NumAlive() == 2 })
	la.add(Counter{Rule: "r", Key: "k", Epoch: 1, Used: 5})
	waitFor(t, "b charges a's counter", func() bool { return lb.get("r/k") == 5 })
	// a sends its counter in redundancy rounds (redundancy.go), all within a
	// few intervals of real time, long before any prune: let them go out
	// before the clock jumps past two prunes.
	waitFor(t, "a has sent its counter redundancy times", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.pending) == 0
	})
	packets := capture.captured()

	clk.add(time.Minute + time.Second) // the default SeenTTL, and a second
	b.pruneSeen()
	clk.add(time.Minute + time.Second) // the default SeenTTL, and a second
	b.pruneSeen()
	b.mu.Lock()
	left := len(b.seen)
	b.mu.Unlock()
	if left != 0 {
		t.Fatalf("b still remembers %d counters after two idle prunes", left)
	}
	bad := b.stats.BadPackets.Load()
	for _, p := range packets {
		if _, err := capture.Transport.WriteTo(p.b, p.addr); err != nil {
			t.Fatal(err)
		}
	}
	la.add(Counter{Rule: "r", Key: "marker", Epoch: 1, Used: 1})
	waitFor(t, "b charges a fresh counter sent after the replay", func() bool { return lb.get("r/marker") == 1 })
	if got := lb.get("r/k"); got != 5 {
		t.Fatalf("the replayed packets charged %d more", got-5)
	}
	if b.stats.BadPackets.Load() == bad {
		t.Fatal("no replayed packet was counted as refused")
	}
	t.Logf("replayed %d captured packets; b refused %d as stale", len(packets), b.stats.BadPackets.Load()-bad)
}

// A stamped packet is the unstamped one with a fifth field: it decodes to
// the same counters, and the unstamped form an older member receives is
// byte for byte what that version sent.
func TestStampedPacketDecodesToTheSameCounters(t *testing.T) {
	w := newPacketWriter("a", 1300)
	w.add("a", Counter{Rule: "r", Key: "k", Epoch: 3, Prev: 1, Used: 9})
	w.add("a", Counter{Rule: "r", Key: "w", Epoch: 3, Window: 7, Used: 2})
	plain := first(w.packets())
	if plain[0] != 0x94 {
		t.Fatalf("unstamped packet starts with %#x, want a 4-field array", plain[0])
	}
	var got, want []Counter
	if _, err := decodeCounters(plain, func(_ string, c Counter) { want = append(want, c) }); err != nil {
		t.Fatal(err)
	}
	var stamp uint64
	var stamped bool
	_, err := decodeCountersChecked(stampPacket(plain, 12345), func(_ string, at uint64, ok bool) error {
		stamp, stamped = at, ok
		return nil
	}, func(_ string, c Counter) { got = append(got, c) })
	if err != nil || !stamped || stamp != 12345 || len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("stamped: %v %v %d %v, want %v", err, stamped, stamp, got, want)
	}
}

// userPayload returns the user message inside a raw memberlist packet
// (label header and checksum removed), or nil.
func userPayload(b []byte) []byte {
	b, _, err := memberlist.RemoveLabelHeaderFromPacket(b)
	if err != nil {
		return nil
	}
	if len(b) >= 5 && b[0] == 12 { // hasCrcMsg
		b = b[5:]
	}
	if len(b) < 2 || b[0] != 8 { // userMsg
		return nil
	}
	return b[1:]
}

// Rolling upgrade: a member that does not advertise stamps (an older
// version) is sent the unstamped four-field packet it reads; one that does
// gets the stamped packet.
func TestOlderMembersGetUnstampedPackets(t *testing.T) {
	var capture *captureTransport
	a, err := New(Config{NodeName: "a", BindAddr: "127.0.0.1", GossipInterval: 5 * time.Millisecond, Label: "test",
		WrapTransport: func(t memberlist.Transport) memberlist.Transport {
			capture = &captureTransport{Transport: t}
			return capture
		}}, newMemLedger())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Shutdown() })
	lo, ln := newMemLedger(), newMemLedger()
	old, err := New(Config{NodeName: "old", BindAddr: "127.0.0.1", GossipInterval: 5 * time.Millisecond, Label: "test",
		MemberlistConfig: func(c *memberlist.Config) { c.DelegateProtocolMax = 0 }}, lo)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { old.Shutdown() })
	nw := newTestSyncer(t, "new", nil, ln)
	for _, s := range []*Syncer{old, nw} {
		if _, err := s.Join([]string{a.Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a sees both", func() bool { return a.NumAlive() == 3 })
	a.ledger.(*memLedger).add(Counter{Rule: "r", Key: "k", Epoch: 1, Used: 5})
	waitFor(t, "the new member charges a's counter", func() bool { return ln.get("r/k") == 5 })
	heads := map[string]byte{}
	waitFor(t, "a's packets to both are captured", func() bool {
		for _, p := range capture.captured() {
			if u := userPayload(p.b); u != nil {
				heads[p.addr] = u[0]
			}
		}
		return len(heads) == 2
	})
	if h := heads[old.Addr()]; h != 0x94 {
		t.Errorf("the older member was sent a packet starting %#x, want the unstamped 4-field array", h)
	}
	if h := heads[nw.Addr()]; h != 0x95 {
		t.Errorf("the newer member was sent a packet starting %#x, want the stamped 5-field array", h)
	}
}
