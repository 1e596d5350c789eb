package gossip

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net"
	"net/netip"
	"testing"
	"time"
)

// mpMapInts encodes a msgpack map of string keys to int64s, as memberlist's
// codec writes stream headers (it writes small ints compactly; the guard
// reads every integer width).
func mpMapInts(kv ...any) []byte {
	b := []byte{0x80 | byte(len(kv)/2)}
	for i := 0; i < len(kv); i += 2 {
		k := kv[i].(string)
		b = append(b, 0xa0|byte(len(k)))
		b = append(b, k...)
		switch v := kv[i+1].(type) {
		case bool:
			if v {
				b = append(b, 0xc3)
			} else {
				b = append(b, 0xc2)
			}
		case int64:
			b = append(b, 0xd3)
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		case int:
			b = append(b, byte(v)) // positive fixint
		}
	}
	return b
}

func withLabel(label string, b []byte) []byte {
	return append(append([]byte{mlHasLabel, byte(len(label))}, label...), b...)
}

func TestStreamGuardParse(t *testing.T) {
	user := func(n int64) []byte { return append([]byte{mlUser}, mpMapInts("UserMsgLen", n)...) }
	push := func(nodes, state int64) []byte {
		return append([]byte{mlPushPull}, mpMapInts("Nodes", nodes, "UserStateLen", state, "Join", true)...)
	}
	tests := []struct {
		name      string
		encrypted bool
		in        []byte
		want      string // refusal reason, "" for accepted
		limit     int64  // when accepted
	}{
		{"crash payload: user message of 2^62", false, withLabel("l", user(1<<62)), RefusedLength, 0},
		{"user message of -1", false, withLabel("l", user(-1)), RefusedLength, 0},
		{"user message within the cap", false, withLabel("l", user(100)), "", 3 + 1 + 21 + 100},
		{"user message of 0", false, withLabel("l", user(0)), "", 3 + 1 + 21},
		{"push-pull within the caps", false, withLabel("l", push(3, 1000)), "", 3 + 1 + int64(len(push(3, 1000))) - 1 + 3*maxNodeStateBytes + 1000},
		{"push-pull of 2^40 nodes", false, withLabel("l", push(1<<40, 0)), RefusedLength, 0},
		{"push-pull user state of 1 GiB", false, withLabel("l", push(1, 1<<30)), RefusedLength, 0},
		{"push-pull as an array", false, withLabel("l", []byte{mlPushPull, 0x93, 0xce, 0xff, 0xff, 0xff, 0xff, 0, 0xc2}), RefusedHeader, 0},
		{"unknown key", false, withLabel("l", append([]byte{mlUser}, mpMapInts("Other", 1)...)), RefusedHeader, 0},
		{"repeated key", false, withLabel("l", append([]byte{mlUser}, mpMapInts("UserMsgLen", 1, "UserMsgLen", 1<<62)...)), RefusedHeader, 0},
		{"a float length", false, withLabel("l", []byte{mlUser, 0x81, 0xaa, 'U', 's', 'e', 'r', 'M', 's', 'g', 'L', 'e', 'n', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}), RefusedHeader, 0},
		{"ping", false, withLabel("l", []byte{mlPing, 0x80}), "", 3 + 1 + maxPlainOther},
		{"compressed", false, withLabel("l", []byte{mlCompress, 0x80}), RefusedType, 0},
		{"unknown type", false, withLabel("l", []byte{200}), RefusedType, 0},
		{"no label", false, user(1), RefusedLabel, 0},
		{"another label", false, withLabel("x", user(1)), RefusedLabel, 0},
		{"empty label header", false, []byte{mlHasLabel, 0, mlUser}, RefusedLabel, 0},
		{"encrypted to a plain node", false, withLabel("l", []byte{mlEncrypt, 0, 0, 0, 1}), RefusedEncryption, 0},
		{"plain to an encrypted node", true, withLabel("l", user(1)), RefusedEncryption, 0},
		{"encrypted frame of 4 GiB", true, withLabel("l", []byte{mlEncrypt, 0xff, 0xff, 0xff, 0xff}), RefusedLength, 0},
		{"encrypted frame of 20 MiB", true, withLabel("l", binary.BigEndian.AppendUint32([]byte{mlEncrypt}, 20<<20)), RefusedLength, 0},
		{"encrypted frame at the cap", true, withLabel("l", append(binary.BigEndian.AppendUint32([]byte{mlEncrypt}, maxStreamBytes), 1)), "", 3 + 5 + maxStreamBytes},
		{"encrypted frame of version 0", true, withLabel("l", append(binary.BigEndian.AppendUint32([]byte{mlEncrypt}, 45), 0)), RefusedHeader, 0},
		{"truncated header", false, withLabel("l", []byte{mlUser, 0x81, 0xaa, 'U'}), RefusedTimeout, 0},
		{"empty stream", false, nil, RefusedTimeout, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &streamGuard{label: "l", encryption: tt.encrypted, encrypted: tt.encrypted}
			limit, err := g.parse(bufio.NewReaderSize(bytes.NewReader(tt.in), streamPeekSize))
			var r *errRefused
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want == "" && limit != tt.limit:
				t.Fatalf("limit %d, want %d", limit, tt.limit)
			case tt.want != "" && (!errors.As(err, &r) || r.reason != tt.want):
				t.Fatalf("got %v, want refusal %q", err, tt.want)
			}
		})
	}
}

// A screened stream reads the peeked bytes, then only what its header
// declared, and cannot push its deadline past the guard's.
func TestGuardedConnReplaysAndLimits(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	g := &streamGuard{label: "", stats: &TransportStats{}, log: newDropLog(log.New(io.Discard, "", 0)), budget: streamBudget, timeout: time.Minute}
	g.slots.stats = g.stats
	sl, err := g.acquire(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	msg := append(append([]byte{mlUser}, mpMapInts("UserMsgLen", 5)...), "hello and more"...)
	go client.Write(msg)
	gc, _, err := g.screen(server, sl)
	if err != nil {
		t.Fatal(err)
	}
	go client.Close()
	got, _ := io.ReadAll(gc)
	if want := msg[:len(msg)-len(" and more")]; !bytes.Equal(got, want) {
		t.Fatalf("read %q, want %q", got, want)
	}
	if gc.(*guardedConn).clamp(time.Now().Add(time.Hour)).After(time.Now().Add(time.Minute)) {
		t.Fatal("a deadline beyond the guard's was kept")
	}
	gc.Close()
	gc.Close()
	if g.stats.StreamsOpen.Load() != 0 || g.reserved != 0 {
		t.Fatalf("after close: %d open, %d reserved", g.stats.StreamsOpen.Load(), g.reserved)
	}
}

func TestStreamGuardSlotsAndBudget(t *testing.T) {
	member := netip.MustParseAddr("10.0.0.1")
	g := &streamGuard{stats: &TransportStats{}, budget: 100}
	g.slots.stats = g.stats
	g.slots.isMember = func(a netip.Addr) bool { return a == member }
	// Strangers: maxStreamsPerSource each, maxStreams−memberStreamSlots in all.
	var held []slot
	for i := range maxStreams - memberStreamSlots {
		src := netip.AddrFrom4([4]byte{192, 0, 2, byte(i / maxStreamsPerSource)})
		sl, err := g.acquire(src)
		if err != nil {
			t.Fatalf("stranger slot %d refused: %v", i, err)
		}
		held = append(held, sl)
		if i%maxStreamsPerSource == maxStreamsPerSource-1 && i < maxStreams-memberStreamSlots-1 {
			if _, err := g.acquire(src); !isRefusal(err, RefusedSource) {
				t.Fatalf("a source beyond its share: %v, want %q", err, RefusedSource)
			}
		}
	}
	if _, err := g.acquire(netip.MustParseAddr("192.0.2.200")); !isRefusal(err, RefusedBusy) {
		t.Fatalf("a new stranger with the strangers' slots held: %v, want %q", err, RefusedBusy)
	}
	// A member takes the slots kept for members, then none is left.
	for i := range memberStreamSlots {
		sl, err := g.acquire(member)
		if err != nil {
			t.Fatalf("member slot %d refused: %v", i, err)
		}
		held = append(held, sl)
	}
	if _, err := g.acquire(member); !isRefusal(err, RefusedBusy) {
		t.Fatalf("a slot beyond maxStreams: %v", err)
	}
	if n := g.stats.StreamsOpen.Load(); n != maxStreams {
		t.Fatalf("%d open, want %d", n, maxStreams)
	}
	g.release(held[0], 0)
	if _, err := g.acquire(held[0].src); err != nil {
		t.Fatalf("a released slot was not given back: %v", err)
	}
	for _, sl := range held { // held[0]'s slot is held again
		g.release(sl, 0)
	}
	if n := g.stats.StreamsOpen.Load(); n != 0 || len(g.slots.bySource) != 0 || g.slots.strangers != 0 {
		t.Fatalf("after release: %d open, %d sources, %d strangers", n, len(g.slots.bySource), g.slots.strangers)
	}
	if !g.reserve(60) || g.reserve(41) || !g.reserve(40) {
		t.Fatal("the budget is not 100")
	}
	g.release(slot{}, 60)
	if !g.reserve(60) {
		t.Fatal("a released reservation was not given back")
	}
}

func isRefusal(err error, reason string) bool {
	var r *errRefused
	return errors.As(err, &r) && r.reason == reason
}

// memberlist's own streams (the join's push-pull, a reliable user message)
// pass the guard, plain and encrypted: none is refused.
func TestStreamGuardPassesMemberlistsOwnStreams(t *testing.T) {
	for _, tt := range []struct {
		name string
		key  []byte
	}{{"plain", nil}, {"encrypted", []byte("0123456789abcdef")}} {
		t.Run(tt.name, func(t *testing.T) {
			a := newTestSyncer(t, "a", tt.key, newMemLedger())
			b := newTestSyncer(t, "b", tt.key, newMemLedger())
			if _, err := b.Join([]string{a.Addr()}); err != nil {
				t.Fatal(err)
			}
			bNode := b.list().LocalNode()
			if err := a.list().SendReliable(bNode, []byte{0xc0}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "both streams are accepted", func() bool {
				return a.Transport().StreamsAccepted.Load() >= 1 && b.Transport().StreamsAccepted.Load() >= 1
			})
			for _, s := range []*Syncer{a, b} {
				for _, r := range StreamRefusals {
					if n := s.Transport().StreamsRefused(r); n != 0 {
						t.Errorf("%s refused %d streams: %s", s.self, n, r)
					}
					if n := s.Transport().RepliesRefused(r); n != 0 {
						t.Errorf("%s refused %d replies: %s", s.self, n, r)
					}
				}
				for _, r := range PacketRefusals {
					if n := s.Transport().PacketsRefused(r); n != 0 {
						t.Errorf("%s refused %d packets: %s", s.self, n, r)
					}
				}
			}
		})
	}
}

// With encryption on but GossipVerifyIncoming off (memberlist's mode for
// turning encryption on in a running cluster) both kinds pass, screened.
func TestStreamGuardEncryptionNotVerified(t *testing.T) {
	g := &streamGuard{label: "l", encryption: true}
	for _, in := range [][]byte{
		withLabel("l", append([]byte{mlUser}, mpMapInts("UserMsgLen", 5)...)),
		withLabel("l", []byte{mlEncrypt, 0, 0, 1, 0, 1}),
	} {
		if _, err := g.parse(bufio.NewReaderSize(bytes.NewReader(in), streamPeekSize)); err != nil {
			t.Fatalf("%x refused: %v", in, err)
		}
	}
	if _, err := g.parse(bufio.NewReaderSize(bytes.NewReader(withLabel("l", append([]byte{mlUser}, mpMapInts("UserMsgLen", int64(1<<62))...))), streamPeekSize)); err == nil {
		t.Fatal("the crash payload passed")
	}
	// Encryption version 0 (padded; a keyed peer's bad pad crashed
	// memberlist) is refused: Sluice writes version 1.
	if _, err := g.parse(bufio.NewReaderSize(bytes.NewReader(withLabel("l", []byte{mlEncrypt, 0, 0, 0, 45, 0})), streamPeekSize)); !isRefusal(err, RefusedHeader) {
		t.Fatalf("an encryption version 0 frame: %v, want refused for its header", err)
	}
}

func TestStreamSourceOf(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::"},
		{"2001:db8:1:2::1", "2001:db8:1:2::"},
		{"::1", "::1"},
	} {
		if got := sourceOf(netip.MustParseAddr(tt.in)); got != netip.MustParseAddr(tt.want) {
			t.Errorf("sourceOf(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
