package testcluster

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Faults are applied to every UDP packet a node sends. Probabilities are in [0, 1].
type Faults struct {
	Drop      float64 // packet silently lost
	Duplicate float64 // packet sent twice
	Reorder   float64 // packet held back and sent after the next one
	Seed      uint64  // seeds the random choices; 0 picks one
}

// faultTransport wraps memberlist's transport to partition a node from some
// peers (both packets and streams) and to disturb its outgoing packets.
type faultTransport struct {
	inner   memberlist.Transport
	blocked atomic.Pointer[map[string]bool] // peer addresses ("ip:port") cut off
	faults  atomic.Pointer[Faults]

	// wireBytes counts the UDP bytes handed to the network, memberlist's own
	// packets (probes, acks, membership gossip) and framing included.
	wireBytes atomic.Uint64

	mu   sync.Mutex
	rnd  *rand.Rand
	held *heldPacket

	packets chan *memberlist.Packet
	stop    chan struct{}
	once    sync.Once
}

type heldPacket struct {
	b    []byte
	addr string
}

var errPartitioned = errors.New("testcluster: partitioned")

func newFaultTransport(inner memberlist.Transport, seed uint64) *faultTransport {
	if seed == 0 {
		seed = rand.Uint64()
	}
	t := &faultTransport{
		inner:   inner,
		rnd:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		packets: make(chan *memberlist.Packet, 1024),
		stop:    make(chan struct{}),
	}
	t.blocked.Store(&map[string]bool{})
	t.faults.Store(&Faults{})
	go t.forward()
	return t
}

func (t *faultTransport) setBlocked(addrs map[string]bool) { t.blocked.Store(&addrs) }
func (t *faultTransport) setFaults(f Faults)               { t.faults.Store(&f) }
func (t *faultTransport) isBlocked(addr string) bool       { return (*t.blocked.Load())[addr] }

// forward passes incoming packets on, except those from blocked peers.
func (t *faultTransport) forward() {
	in := t.inner.PacketCh()
	for {
		select {
		case <-t.stop:
			return
		case p := <-in:
			if blocked := *t.blocked.Load(); len(blocked) > 0 && blocked[p.From.String()] {
				continue
			}
			select {
			case t.packets <- p:
			default: // memberlist is not keeping up (or has stopped): drop, as a full socket buffer would
			}
		}
	}
}

func (t *faultTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

func (t *faultTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.isBlocked(addr) {
		return time.Now(), nil // lost in the partition
	}
	f := t.faults.Load()
	t.mu.Lock()
	drop := f.Drop > 0 && t.rnd.Float64() < f.Drop
	dup := f.Duplicate > 0 && t.rnd.Float64() < f.Duplicate
	reorder := f.Reorder > 0 && t.rnd.Float64() < f.Reorder
	var release *heldPacket
	if !drop && reorder && t.held == nil {
		t.held = &heldPacket{b: append([]byte(nil), b...), addr: addr}
		t.mu.Unlock()
		return time.Now(), nil
	}
	release, t.held = t.held, nil
	t.mu.Unlock()

	now, err := time.Now(), error(nil)
	if !drop {
		now, err = t.write(b, addr)
		if dup {
			t.write(b, addr)
		}
	}
	if release != nil {
		t.write(release.b, release.addr)
	}
	return now, err
}

func (t *faultTransport) write(b []byte, addr string) (time.Time, error) {
	t.wireBytes.Add(uint64(len(b)))
	return t.inner.WriteTo(b, addr)
}

func (t *faultTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *faultTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.isBlocked(addr) {
		return nil, errPartitioned
	}
	return t.inner.DialTimeout(addr, timeout)
}

func (t *faultTransport) StreamCh() <-chan net.Conn { return t.inner.StreamCh() }

// Shutdown stops the inner transport first: its listener may be waiting to
// hand forward a packet, and forward must still be there to take it.
func (t *faultTransport) Shutdown() error {
	err := t.inner.Shutdown()
	t.once.Do(func() { close(t.stop) })
	return err
}
