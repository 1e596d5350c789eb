package gossip

import (
	"bytes"
	"io"
	"log"
	"net"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicelabs/sluice/gossip/gossiptest"
)

// transportLeakOptions ignore only what memberlist is known to leave
// behind (a memberlist of an earlier test in this package shut down while a
// probe was in flight keeps that probe's goroutine until it times out; see
// gossiptest). Never a goroutine of ours.
var transportLeakOptions = gossiptest.MemberlistLeftovers()

func newTestTransport(t *testing.T) *transport {
	t.Helper()
	tr, err := newTransport("127.0.0.1", 0, log.New(io.Discard, "", 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown() })
	tr.configure("", false, true) // no label: the guards let these tests' raw bytes through
	tr.open()
	return tr
}

// Nothing received reaches memberlist before open: a join answered while
// memberlist was starting would be told of no one (see transport.open).
func TestTransportHoldsWhatItReceivesUntilOpen(t *testing.T) {
	defer goleak.VerifyNone(t, transportLeakOptions...)
	tr, err := newTransport("127.0.0.1", 0, log.New(io.Discard, "", 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown()
	tr.configure("", false, true)
	sender, err := newTransport("127.0.0.1", 0, log.New(io.Discard, "", 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Shutdown()
	if _, err := sender.WriteTo([]byte("early"), addrOf(tr)); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addrOf(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{mlPing}); err != nil { // a header the stream guard lets through
		t.Fatal(err)
	}
	select {
	case <-tr.PacketCh():
		t.Fatal("a packet was handed on before open")
	case <-tr.StreamCh():
		t.Fatal("a stream was handed on before open")
	case <-time.After(100 * time.Millisecond): // an absence can only be watched for a while
	}
	tr.open()
	for _, what := range []string{"packet", "stream"} {
		select {
		case p := <-tr.PacketCh():
			if string(p.Buf) != "early" {
				t.Fatalf("packet %q", p.Buf)
			}
		case s := <-tr.StreamCh():
			s.Close()
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s after open", what)
		}
	}
}

func addrOf(tr *transport) string { return "127.0.0.1:" + strconv.Itoa(tr.Port()) }

// Each packet arrives in a slice of its own size, its own bytes, from the
// sender's address, whether the address was given as IP:port or by name.
func TestTransportPacketsAreCopiedAtTheirSize(t *testing.T) {
	defer goleak.VerifyNone(t, transportLeakOptions...)
	a, b := newTestTransport(t), newTestTransport(t)
	payloads := [][]byte{[]byte("x"), bytes.Repeat([]byte("ab"), 600), []byte("third")}
	for i, p := range payloads {
		to := addrOf(b)
		if i == 2 {
			to = "localhost:" + strconv.Itoa(b.Port())
		}
		if _, err := a.WriteTo(p, to); err != nil {
			t.Fatal(err)
		}
	}
	var got []*[]byte
	for i, want := range payloads {
		select {
		case p := <-b.PacketCh():
			if !bytes.Equal(p.Buf, want) || cap(p.Buf) != len(want) {
				t.Fatalf("packet %d: %d bytes (cap %d), want %d", i, len(p.Buf), cap(p.Buf), len(want))
			}
			if p.From.String() != addrOf(a) || p.Timestamp.IsZero() {
				t.Fatalf("packet %d from %v at %v, want %s", i, p.From, p.Timestamp, addrOf(a))
			}
			got = append(got, &p.Buf)
		case <-time.After(5 * time.Second):
			t.Fatalf("packet %d never arrived", i)
		}
	}
	// Packets share no memory: memberlist may keep one while reading the next.
	(*got[0])[0] = 'y'
	if !bytes.Equal(*got[2], payloads[2]) {
		t.Fatalf("writing one packet changed another: %q", *got[2])
	}
	a.Shutdown()
	b.Shutdown()
}

func TestTransportStreams(t *testing.T) {
	defer goleak.VerifyNone(t, transportLeakOptions...)
	a, b := newTestTransport(t), newTestTransport(t)
	conn, err := a.DialTimeout(addrOf(b), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{mlPing}); err != nil { // a header the stream guard lets through
		t.Fatal(err)
	}
	var in net.Conn
	select {
	case in = <-b.StreamCh():
	case <-time.After(5 * time.Second):
		t.Fatal("no stream accepted")
	}
	defer in.Close()
	if _, err := conn.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(in, buf); err != nil || string(buf) != "\x00state" {
		t.Fatalf("read %q, %v", buf, err)
	}
	a.Shutdown()
	b.Shutdown()
	if err := b.Shutdown(); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
}

func TestTransportAdvertiseAddr(t *testing.T) {
	tr := newTestTransport(t)
	ip, port, err := tr.FinalAdvertiseAddr("", 0)
	if err != nil || !ip.Equal(net.IPv4(127, 0, 0, 1)) || port != tr.Port() {
		t.Fatalf("bound address: %v %d %v, want 127.0.0.1 %d", ip, port, err, tr.Port())
	}
	ip, port, err = tr.FinalAdvertiseAddr("10.1.2.3", 7000)
	if err != nil || ip.String() != "10.1.2.3" || len(ip) != 4 || port != 7000 {
		t.Fatalf("explicit address: %v (%d bytes) %d %v", ip, len(ip), port, err)
	}
	if _, _, err := tr.FinalAdvertiseAddr("not-an-ip", 7000); err == nil {
		t.Fatal("a bad advertise address was accepted")
	}
	if _, err := newTransport("no.such.host.invalid", 0, log.New(io.Discard, "", 0), nil); err == nil {
		t.Fatal("an unresolvable bind address was accepted")
	}
}

// Shutdown does not wait out the deadline of a stream whose header has not
// come: it closes it.
func TestTransportShutdownClosesStreamsBeingScreened(t *testing.T) {
	defer goleak.VerifyNone(t, transportLeakOptions...)
	tr, err := newTransport("127.0.0.1", 0, log.New(io.Discard, "", 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	tr.configure("sluice", false, true)
	tr.open()
	c, err := net.Dial("tcp", addrOf(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "the silent stream is being screened", func() bool { return tr.stats.StreamsOpen.Load() == 1 })
	start := time.Now()
	tr.Shutdown()
	if took := time.Since(start); took > streamTimeout/2 {
		t.Fatalf("Shutdown took %s: it waited for a silent stream", took)
	}
}
