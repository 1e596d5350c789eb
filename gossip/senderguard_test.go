package gossip

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

var (
	senderA = netip.MustParseAddrPort("127.0.0.1:7001")
	senderB = netip.MustParseAddrPort("127.0.0.1:7002")
	nobody  = netip.MustParseAddrPort("127.0.0.1:7999")
)

func testBook() *senderBook {
	return &senderBook{
		byAddr: map[netip.AddrPort]string{senderA: "a", senderB: "b"},
		byName: map[string]netip.AddrPort{"a": senderA, "b": senderB},
	}
}

func TestSenderBookAllows(t *testing.T) {
	tests := []struct {
		name   string
		book   *senderBook
		src    netip.AddrPort
		sender string
		want   bool
	}{
		{"a member in its own name", testBook(), senderA, "a", true},
		{"a member in another member's name", testBook(), senderA, "b", false},
		{"a member in a made-up name", testBook(), senderA, "ghost", false},
		{"no member's address, a member's name", testBook(), nobody, "a", false},
		{"no member's address, a name not yet heard of (a joiner)", testBook(), nobody, "joiner", true},
		{"another port of a member's host", testBook(), netip.MustParseAddrPort("127.0.0.1:7003"), "b", false},
		{"no book yet", nil, nobody, "a", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.book.allows(tt.src, []byte(tt.sender)); got != tt.want {
				t.Errorf("allows(%v, %q) = %v, want %v", tt.src, tt.sender, got, tt.want)
			}
		})
	}
}

// fixedBook returns one book, as the syncer's atomic load does.
func fixedBook() *senderBook { return theBook }

var theBook = testBook()

var (
	testKey  = []byte("0123456789abcdef")
	testRing = [][]byte{testKey}
)

func testKeys() [][]byte { return testRing }

// sealTest encrypts msg as memberlist does (security.go: version byte,
// 12-byte nonce, AES-GCM with the label as additional data; version 0 pads
// PKCS#7 first), written from the format's description.
func sealTest(t *testing.T, vsn byte, msg []byte, label string, pad byte) []byte {
	t.Helper()
	blk, _ := aes.NewCipher(testKey)
	gcm, _ := cipher.NewGCM(blk)
	nonce := make([]byte, 12)
	rand.Read(nonce)
	if vsn == 0 {
		n := pad
		if n == 0 {
			n = byte(aes.BlockSize - len(msg)%aes.BlockSize)
		}
		for range aes.BlockSize - len(msg)%aes.BlockSize {
			msg = append(msg, n)
		}
	}
	out := append([]byte{vsn}, nonce...)
	return gcm.Seal(out, nonce, msg, []byte(label))
}

func userMsg(b []byte) []byte { return append([]byte{mlUser}, b...) }

func compound(parts ...[]byte) []byte {
	b := []byte{mlCompound, byte(len(parts))}
	for _, p := range parts {
		b = append(b, byte(len(p)>>8), byte(len(p)))
	}
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func labelled(b []byte, label string) []byte {
	p, err := memberlist.AddLabelHeaderToPacket(b, label)
	if err != nil {
		panic(err)
	}
	return p
}

func withCRC(b []byte) []byte { return append([]byte{mlHasCrc, 0, 0, 0, 0}, b...) }

// The guard finds every counters message memberlist would hand the
// delegate (plain, labelled, with a CRC header, in compound messages,
// encrypted in either of memberlist's versions) and refuses the packet when
// one names a sender other than the member at the source address; what it
// lets through it vouches for, exactly.
func TestSenderGuardReadsPacketsAsMemberlistDoes(t *testing.T) {
	honest := first(func() ([][]byte, []int) {
		w := newPacketWriter("a", 1<<16)
		w.add("a", Counter{Rule: "r", Key: "k", Epoch: 1, Used: 3})
		return w.packets()
	}())
	forged := first(func() ([][]byte, []int) {
		w := newPacketWriter("b", 1<<16)
		w.add("b", Counter{Rule: "r", Key: "k", Epoch: 1, Used: 3})
		return w.packets()
	}())
	ping := []byte{mlPing, 0x80}
	tests := []struct {
		name      string
		encrypted bool
		packet    func(t *testing.T, body []byte) []byte
		want      string // for the forged body; the honest one always passes
	}{
		{"plain", false, func(t *testing.T, b []byte) []byte { return userMsg(b) }, PacketRefusedSender},
		{"labelled", false, func(t *testing.T, b []byte) []byte { return labelled(userMsg(b), "test") }, PacketRefusedSender},
		{"crc", false, func(t *testing.T, b []byte) []byte { return labelled(withCRC(userMsg(b)), "test") }, PacketRefusedSender},
		{"compound, last part", false, func(t *testing.T, b []byte) []byte {
			return labelled(compound(ping, userMsg(b)), "test")
		}, PacketRefusedSender},
		{"compound in compound", false, func(t *testing.T, b []byte) []byte {
			return labelled(compound(ping, compound(userMsg(b))), "test")
		}, PacketRefusedSender},
		{"encrypted v1", true, func(t *testing.T, b []byte) []byte {
			return labelled(sealTest(t, 1, userMsg(b), "test", 0), "test")
		}, PacketRefusedSender},
		{"encrypted v0", true, func(t *testing.T, b []byte) []byte {
			return labelled(sealTest(t, 0, withCRC(compound(userMsg(b))), "test", 0), "test")
		}, PacketRefusedSender},
		{"encrypted, another key", true, func(t *testing.T, b []byte) []byte {
			p := sealTest(t, 1, userMsg(b), "test", 0)
			p[len(p)-1] ^= 1 // memberlist drops it: nothing to check, nothing vouched
			return labelled(p, "test")
		}, ""},
		{"encrypted v0, padding longer than the message", true, func(t *testing.T, b []byte) []byte {
			return labelled(sealTest(t, 0, userMsg(b), "test", 200), "test")
		}, PacketRefusedMalformed},
		{"encrypted, compressed inside", true, func(t *testing.T, b []byte) []byte {
			return labelled(sealTest(t, 1, append([]byte{mlCompress}, userMsg(b)...), "test", 0), "test")
		}, PacketRefusedCompressed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &senderGuard{label: []byte("test"), encryption: tt.encrypted, verify: tt.encrypted,
				keys: testKeys, book: fixedBook, vouch: newVouches()}
			p := tt.packet(t, forged)
			if r := g.check(p, senderA); r.reason != tt.want {
				t.Fatalf("forged: refused for %q, want %q", r.reason, tt.want)
			}
			if g.vouch.take(forged) {
				t.Fatal("a forged message was vouched for")
			}
			if tt.want == "" || tt.want == PacketRefusedMalformed || tt.want == PacketRefusedCompressed {
				return // shapes the honest never send
			}
			if r := g.check(tt.packet(t, honest), senderA); r.reason != "" {
				t.Fatalf("honest: refused for %q", r.reason)
			}
			if !g.vouch.take(honest) {
				t.Fatal("an honest message was not vouched for")
			}
			if g.vouch.take(honest) {
				t.Fatal("a vouch was used twice")
			}
		})
	}
}

// Vouches turn over: a flood of vouched messages that never reach the
// delegate costs bounded memory, and a vouch lives at least vouchTTL.
func TestVouchesAreBounded(t *testing.T) {
	v := newVouches()
	for i := range 3 * maxVouches {
		v.add([]uint64{uint64(i)})
	}
	if n := len(v.cur) + len(v.old); n > 2*maxVouches {
		t.Fatalf("%d vouches held, bound %d", n, 2*maxVouches)
	}
	v.add([]uint64{v.sum([]byte("x"))})
	if !v.take([]byte("x")) {
		t.Fatal("a fresh vouch was lost")
	}
}

// Checking an honest encrypted packet allocates nothing.
func TestSenderGuardAllocatesNothing(t *testing.T) {
	w := newPacketWriter("a", 1<<16)
	w.add("a", Counter{Rule: "r", Key: "k", Epoch: 1, Used: 3})
	body := first(w.packets())
	p := labelled(sealTest(t, 1, userMsg(body), "test", 0), "test")
	g := &senderGuard{label: []byte("test"), encryption: true, verify: true,
		keys: testKeys, book: fixedBook, vouch: newVouches()}
	g.check(p, senderA)
	allocs := testing.AllocsPerRun(1000, func() {
		if r := g.check(p, senderA); r.reason != "" {
			t.Fatal(r.reason)
		}
		g.vouch.take(body)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet", allocs)
	}
}

func BenchmarkSenderGuard(b *testing.B) {
	w := newPacketWriter("a", 1<<16)
	for i := range 20 {
		w.add("a", Counter{Rule: "rule", Key: "key-" + string(rune('a'+i)), Epoch: 1, Used: 3})
	}
	body := first(w.packets())
	for _, enc := range []bool{false, true} {
		name := "plain"
		p := labelled(userMsg(body), "test")
		if enc {
			name = "encrypted"
			p = labelled(sealTest(&testing.T{}, 1, userMsg(body), "test", 0), "test")
		}
		b.Run(name, func(b *testing.B) {
			g := &senderGuard{label: []byte("test"), encryption: enc, verify: enc,
				keys: testKeys, book: fixedBook, vouch: newVouches()}
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				g.check(p, senderA)
				g.vouch.take(body)
			}
		})
	}
}

// Between real syncers: a keyed member's counters in another member's name,
// in a made-up name, or of another origin (the cluster is small enough that
// each node sends its own), and counters sent over a stream, are refused and
// counted; its own counters are charged.
//
// In a relayed cluster (more members than FanoutLimit) the same counter of
// another origin, from an authenticated sender, is taken: origins are not
// authenticated there, only senders (their allowances bound them).
func TestForgedSendersAreRefusedBetweenSyncers(t *testing.T) {
	for _, tt := range []struct {
		name    string
		key     []byte
		fanout  int
		relayed bool
	}{{"plain", nil, 0, false}, {"encrypted", testKey, 0, false}, {"encrypted, relayed cluster", testKey, 2, true}} {
		t.Run(tt.name, func(t *testing.T) {
			la := newMemLedger()
			a := newFanoutSyncer(t, "a", tt.key, tt.fanout, la)
			b := newFanoutSyncer(t, "b", tt.key, tt.fanout, newMemLedger())
			rogue := newFanoutSyncer(t, "rogue", tt.key, tt.fanout, newMemLedger())
			for _, s := range []*Syncer{b, rogue} {
				if _, err := s.Join([]string{a.Addr()}); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "a knows both", func() bool { return a.members.Load() == 3 })
			aNode := a.list().LocalNode()
			send := func(sender, origin, key string, used uint64) []byte {
				w := newPacketWriter(sender, 1<<16)
				w.add(origin, Counter{Rule: "r", Key: key, Epoch: 1, Used: used})
				p := stampPacket(first(w.packets()), uint64(a.clock().UnixNano()))
				if err := rogue.list().SendBestEffort(aNode, p); err != nil {
					t.Fatal(err)
				}
				return p
			}
			send("b", "b", "k", 5)
			send("ghost", "ghost", "k", 7)
			send("rogue", "b", "k", 11)
			reliable := send("rogue", "rogue", "own", 2)
			if err := rogue.list().SendReliable(aNode, reliable); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the rogue's own counter is charged, the forged ones refused", func() bool {
				ts := a.Transport()
				origin := ts.PacketsRefused(PacketRefusedOrigin) >= 1
				if tt.relayed {
					origin = la.get("r/k") == 11 // relayed: b's counter from the rogue is taken
				}
				return la.get("r/own") == 2 && ts.PacketsRefused(PacketRefusedSender) >= 2 &&
					origin && ts.PacketsRefused(PacketRefusedUnchecked) >= 1
			})
			if got := la.get("r/k"); !tt.relayed && got != 0 {
				t.Errorf("forged counters charged %d tokens", got)
			}
			if got := a.Transport().PacketsRefused(PacketRefusedOrigin); tt.relayed && got != 0 {
				t.Errorf("a relayed cluster refused %d packets for their origins", got)
			}
			for _, s := range []*Syncer{b, rogue} {
				for _, r := range PacketRefusals {
					if n := s.Transport().PacketsRefused(r); n != 0 {
						t.Errorf("%s refused %d honest packets: %s", s.self, n, r)
					}
				}
			}
		})
	}
}

// Any packet: the guard never panics, and a counters message in a shape
// memberlist would hand the delegate (plain, compound, encrypted) is let
// through only if its sender may send from the source address.
func FuzzSenderGuard(f *testing.F) {
	w := newPacketWriter("a", 1<<16)
	w.add("a", Counter{Rule: "r", Key: "k", Epoch: 1, Used: 3})
	f.Add(first(w.packets()), byte(0), false)
	w = newPacketWriter("b", 1<<16)
	w.add("b", Counter{Rule: "r", Key: "k", Epoch: 1, Used: 3})
	f.Add(first(w.packets()), byte(3), true)
	f.Add([]byte{mlCompound, 2, 0, 1, 0, 200}, byte(1), false)
	f.Fuzz(func(t *testing.T, body []byte, shape byte, fromB bool) {
		src := senderA
		if fromB {
			src = senderB
		}
		for _, enc := range []bool{false, true} {
			g := &senderGuard{label: []byte("test"), encryption: enc, verify: enc, keys: testKeys, book: fixedBook, vouch: newVouches()}
			g.check(body, src) // raw bytes: no panic
			var msg []byte
			switch shape % 4 {
			case 0:
				msg = userMsg(body)
			case 1:
				msg = compound([]byte{mlPing}, userMsg(body))
			case 2:
				msg = withCRC(compound(compound(userMsg(body))))
			default:
				msg = compound(userMsg(body), userMsg(body))
			}
			if len(body) > 0xffff-8 {
				return
			}
			p := msg
			if enc {
				p = sealTest(t, 1, msg, "test", 0)
			}
			p = labelled(p, "test")
			r := g.check(p, src)
			sender, err := decodeCounters(body, func(string, Counter) {})
			if err == nil && r.reason == "" && !theBook.allows(src, []byte(sender)) {
				t.Fatalf("counters from %q let through from %v", sender, src)
			}
			if r.reason == "" && err == nil && !g.vouch.take(body) {
				t.Fatalf("counters from %q let through but not vouched for", sender)
			}
		}
	})
}

// A node whose cluster shrank to direct fan-out drops the relayed counters
// still pending, rather than send them to receivers that now take each
// sender's own counters only; its own are sent.
func TestDirectFanOutSendsOnlyOwnCounters(t *testing.T) {
	s, err := New(Config{NodeName: "me", BindAddr: "127.0.0.1"}, newMemLedger())
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queueLocked("me", Counter{Rule: "r", Key: "k", Epoch: 1, Used: 2}, 3)
	s.relayLocked("peer", Counter{Rule: "r", Key: "k", Epoch: 1, Used: 5}, 3)
	packets, counts := s.packPendingLocked(true)
	if len(packets) != 1 || counts[0] != 1 {
		t.Fatalf("%d packets, counts %v: want 1 packet of 1 counter", len(packets), counts)
	}
	var origins []string
	if _, err := decodeCounters(packets[0], func(o string, _ Counter) { origins = append(origins, o) }); err != nil || len(origins) != 1 || origins[0] != "me" {
		t.Fatalf("sent origins %v (%v), want only me", origins, err)
	}
	if len(s.relay.byOrigin) != 0 {
		t.Fatalf("relay shares left: %v", s.relay.byOrigin)
	}
}

// newFanoutSyncer is newTestSyncer with a fan-out limit (0: the default);
// above the limit the cluster relays (not owner mode, auto's choice).
func newFanoutSyncer(t *testing.T, name string, key []byte, fanout int, l Ledger) *Syncer {
	t.Helper()
	mode := ModeAuto
	if fanout > 0 {
		mode = ModeRelay // the limit only chooses direct fan-out below it
	}
	s, err := New(Config{
		NodeName: name, BindAddr: "127.0.0.1", BindPort: 0,
		GossipInterval: 5 * time.Millisecond, SecretKey: key, Label: "test", FanoutLimit: fanout, GossipMode: mode,
	}, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown() })
	return s
}

func TestDirectOnly(t *testing.T) {
	for _, tt := range []struct {
		n, limit int
		want     bool
	}{
		{3, 64, true}, {56, 64, true}, {57, 64, false}, {65, 64, false},
		{2, 2, false}, {3, 4, true}, {4, 4, false}, {1, 1, false},
	} {
		if got := directOnly(tt.n, tt.limit); got != tt.want {
			t.Errorf("directOnly(%d, %d) = %v, want %v", tt.n, tt.limit, got, tt.want)
		}
	}
}
