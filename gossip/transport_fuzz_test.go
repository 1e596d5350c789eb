package gossip

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// Fuzz targets for the transport as a stranger meets it: arbitrary bytes
// sent as one inbound TCP stream, or as UDP packets, to a running syncer
// (memberlist and all) over loopback, plain and encrypted. A panic anywhere
// in memberlist or the syncer kills the fuzzing process; each stream must
// also not make the process allocate more than fuzzAllocBound. Run one
// longer with
//
//	go test -run '^$' -fuzz '^FuzzTransportStream$' -fuzztime 5m ./gossip

// fuzzAllocBound caps what one fuzzed stream may make this process allocate:
// the largest stream the guard lets through (maxStreamBytes, made at once by
// memberlist for a plain push-pull's user state) plus room for the rest.
const fuzzAllocBound = maxStreamBytes + 16<<20

// loopbackOnly wraps the transport so that memberlist, told of members at
// made-up addresses by a fuzzed push-pull, reaches none beyond loopback.
type loopbackOnly struct{ *transport }

var errNotLoopback = errors.New("fuzz: only loopback is reached")

func isLoopback(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

func (l loopbackOnly) WriteTo(b []byte, addr string) (time.Time, error) {
	if !isLoopback(addr) {
		return time.Now(), errNotLoopback
	}
	return l.transport.WriteTo(b, addr)
}

func (l loopbackOnly) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return l.WriteTo(b, a.Addr)
}

func (l loopbackOnly) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if !isLoopback(addr) {
		return nil, errNotLoopback
	}
	return l.transport.DialTimeout(addr, timeout)
}

func (l loopbackOnly) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return l.DialTimeout(a.Addr, timeout)
}

// fuzzTargets starts a plain and an encrypted syncer labelled "sluice".
func fuzzTargets(f *testing.F) []*Syncer {
	var out []*Syncer
	for _, key := range [][]byte{nil, []byte("0123456789abcdef")} {
		s, err := New(Config{
			NodeName: "fuzz", BindAddr: "127.0.0.1", SecretKey: key, Label: "sluice",
			WrapTransport: func(t memberlist.Transport) memberlist.Transport { return loopbackOnly{t.(*transport)} },
		}, newMemLedger())
		if err != nil {
			f.Fatal(err)
		}
		if err := s.Start(); err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { s.Shutdown() })
		out = append(out, s)
	}
	return out
}

func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func fuzzLabelled(b []byte) []byte {
	return append([]byte{mlHasLabel, 6, 's', 'l', 'u', 'i', 'c', 'e'}, b...)
}

// fuzzStreamSeeds are streams as memberlist and attackers write them.
func fuzzStreamSeeds() [][]byte {
	userHdr := func(n int64) []byte {
		b := append([]byte{mlUser, 0x81, 0xaa}, "UserMsgLen"...)
		return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
	}
	push := append([]byte{mlPushPull, 0x83, 0xa5}, "Nodes"...)
	push = append(push, 1, 0xac)
	push = append(push, "UserStateLen"...)
	push = append(push, 4, 0xa4)
	push = append(push, "Join"...)
	push = append(push, 0xc2,
		// one node state: {Name: "x", Addr: 127.0.0.1, Port: 7946, State: 0, Vsn: [1,5,2,0,0,0]}
		0x85, 0xa4, 'N', 'a', 'm', 'e', 0xa1, 'x', 0xa4, 'A', 'd', 'd', 'r', 0xc4, 4, 127, 0, 0, 1,
		0xa4, 'P', 'o', 'r', 't', 0xcd, 0x1f, 0x0a, 0xa5, 'S', 't', 'a', 't', 'e', 0,
		0xa3, 'V', 's', 'n', 0xc4, 6, 1, 5, 2, 0, 0, 0,
		0x94, 2, 0xa1, 'z', 0x90) // user state
	return [][]byte{
		fuzzLabelled(userHdr(1 << 62)), // the 30-byte crash
		fuzzLabelled(userHdr(-1)),
		fuzzLabelled(append(userHdr(3), 0x94, 1, 2)),
		fuzzLabelled(push),
		fuzzLabelled([]byte{mlPing, 0x83, 0xa5, 'S', 'e', 'q', 'N', 'o', 1, 0xa4, 'N', 'o', 'd', 'e', 0xa4, 'f', 'u', 'z', 'z', 0xa3, 'V', 's', 'n', 0x90}),
		fuzzLabelled([]byte{mlEncrypt, 0x01, 0x40, 0x00, 0x00}),
		fuzzLabelled(append([]byte{mlEncrypt, 0, 0, 0, 40}, bytes.Repeat([]byte{1}, 40)...)),
		fuzzLabelled([]byte{mlCompress, 0x82, 0xa4, 'A', 'l', 'g', 'o', 0, 0xa3, 'B', 'u', 'f', 0xc4, 2, 0, 1}),
		{mlUser, 0x81},
		[]byte("GET / HTTP/1.1\r\n\r\n"),
	}
}

// FuzzTransportStream sends the input as one inbound stream to a plain and an
// encrypted syncer and reads until they close it.
func FuzzTransportStream(f *testing.F) {
	for _, s := range fuzzStreamSeeds() {
		f.Add(s)
	}
	targets := fuzzTargets(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, s := range targets {
			before := heapAllocs()
			c, err := net.DialTimeout("tcp", s.Addr(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(15 * time.Second))
			c.Write(in)
			c.(*net.TCPConn).CloseWrite()
			_, err = io.Copy(io.Discard, c)
			c.Close()
			if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
				t.Fatalf("the stream was not closed by the daemon: %v", err)
			}
			if got := heapAllocs() - before; got > fuzzAllocBound {
				t.Fatalf("one stream of %d bytes made the process allocate %d bytes (bound %d)", len(in), got, fuzzAllocBound)
			}
		}
	})
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// FuzzTransportPacket sends the input as a UDP packet to a plain and an
// encrypted syncer, labelled as they expect and as given.
func FuzzTransportPacket(f *testing.F) {
	f.Add([]byte{mlUser, 0x94, 1, 0xa1, 'a', 0x90})
	f.Add([]byte{mlCompress, 0x82, 0xa4, 'A', 'l', 'g', 'o', 0, 0xa3, 'B', 'u', 'f', 0xc4, 2, 0, 1})
	f.Add([]byte{mlCompound, 2, 0, 1, 0, 2, mlUser, mlCompress, 0x80})
	f.Add([]byte{mlHasCrc, 0, 0, 0, 0, mlPing, 0x80})
	f.Add([]byte{mlPing, 0x83, 0xa5, 'S', 'e', 'q', 'N', 'o', 1, 0xa4, 'N', 'o', 'd', 'e', 0xa4, 'f', 'u', 'z', 'z', 0xa3, 'V', 's', 'n', 0x90})
	f.Add([]byte{4, 0x84, 0xa4, 'N', 'o', 'd', 'e', 0xa1, 'x', 0xa4, 'A', 'd', 'd', 'r', 0xc4, 4, 10, 0, 0, 1, 0xa4, 'P', 'o', 'r', 't', 1, 0xa3, 'V', 's', 'n', 0x90})
	targets := fuzzTargets(f)
	conns := make([]net.Conn, len(targets))
	for i, s := range targets {
		c, err := net.Dial("udp", s.Addr())
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 64<<10-300 {
			return
		}
		for _, c := range conns {
			c.Write(in)
			c.Write(fuzzLabelled(in))
		}
	})
}

// FuzzTransportReply answers a plain and an encrypted syncer's join (a
// push-pull this node opens) with the input, as a peer at a --join address
// could: the reply is read by memberlist behind the reply guard
// (replyguard.go). Run one longer with
//
//	go test -run '^$' -fuzz '^FuzzTransportReply$' -fuzztime 5m ./gossip
func FuzzTransportReply(f *testing.F) {
	for _, s := range fuzzStreamSeeds() {
		if len(s) > 8 && s[0] == mlHasLabel {
			f.Add(s[8:]) // replies carry no label
		}
		f.Add(s)
	}
	oneByteVsn := []byte{mlPushPull, 0x83, 0xa5, 'N', 'o', 'd', 'e', 's', 1, 0xac}
	oneByteVsn = append(oneByteVsn, "UserStateLen"...)
	oneByteVsn = append(oneByteVsn, 0, 0xa4, 'J', 'o', 'i', 'n', 0xc2,
		0x83, 0xa4, 'N', 'a', 'm', 'e', 0xa1, 'x', 0xa4, 'A', 'd', 'd', 'r', 0xc4, 4, 127, 0, 0, 1, 0xa3, 'V', 's', 'n', 0xc4, 1, 1)
	f.Add(oneByteVsn) // panicked memberlist's verifyProtocol before the reply guard
	f.Add([]byte{mlErr, 0x81, 0xa5, 'E', 'r', 'r', 'o', 'r', 0xa1, 'x'})
	targets := fuzzTargets(f)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	// Every stream to the fake peer is answered with the current input:
	// the join's, and any memberlist opens to members a fuzzed reply named
	// at the fake's address.
	var reply atomic.Pointer[[]byte]
	reply.Store(new([]byte))
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(15 * time.Second))
				c.Write(*reply.Load())
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, c)
			}()
		}
	}()
	f.Fuzz(func(t *testing.T, in []byte) {
		reply.Store(&in)
		for _, s := range targets {
			before := heapAllocs()
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.Join([]string{l.Addr().String()})
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the join did not end")
			}
			if got := heapAllocs() - before; got > fuzzAllocBound {
				t.Fatalf("one reply of %d bytes made the process allocate %d bytes (bound %d)", len(in), got, fuzzAllocBound)
			}
		}
	})
}
