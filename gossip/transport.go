package gossip

import (
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/internal/backoff"
)

// transport is memberlist's network: UDP packets and TCP streams on one
// port. It replaces memberlist.NetTransport, which allocates a fresh 64 KiB
// buffer for every packet it reads: with direct fan-out a daemon receives
// thousands of small counter packets a second, and that allocation, its
// zeroing and the garbage collection it caused were most of a 50-node
// cluster's CPU. Here one buffer per listener is reused and each packet is
// copied out at its own size (memberlist may hold a packet's bytes after the
// next read, so they cannot share a buffer). Peer addresses given as
// IP:port are parsed without the resolver.
//
// It also screens what it receives before memberlist sees it: each inbound
// stream through a streamGuard (streamguard.go), each packet through
// checkPacket (packetguard.go) and the senderGuard (senderguard.go: a
// counters packet's sender must be the member at its source address). What
// it refuses is counted in stats and logged at most once per cause per
// interval.
type transport struct {
	udp  *net.UDPConn
	tcp  *net.TCPListener
	bind netip.Addr // as configured; may be unspecified (0.0.0.0)
	port int
	log  *log.Logger

	packets chan *memberlist.Packet
	streams chan net.Conn
	// ready is closed by open once memberlist.Create has returned. Until
	// then nothing received is handed on: memberlist starts serving its
	// channels before it has added this node to its own member list, and a
	// peer whose join was answered in that gap learned of no one here, while
	// this node learned of it (see open).
	ready     chan struct{}
	readyOnce sync.Once

	// isMember reports whether an address is a live member's, for the
	// slots kept for members (see streamSlots); set before open.
	isMember func(netip.Addr) bool

	// Set by configure before open, read after waitReady.
	label     string
	encrypted bool // memberlist accepts encrypted messages only
	guard     *streamGuard
	senders   *senderGuard    // nil: senders are not checked
	stats     *TransportStats // the syncer's, so they outlive a failed start
	drops     *dropLog

	// screening are the streams whose header is being read, handed those
	// passed to memberlist and not yet closed: Shutdown closes both rather
	// than let them (and memberlist's goroutines reading them) wait out
	// their deadline.
	screenMu  sync.Mutex
	screening map[net.Conn]struct{}
	handed    map[net.Conn]struct{}

	// srcOOB asks the kernel to send from the advertised address (see
	// sourceaddr.go); nil: the socket's own address is the source.
	srcOOB atomic.Pointer[[]byte]
	// streamSrc is the address streams this node opens leave from, so
	// that peers count them as a member's (streamslots.go); nil: the route's.
	streamSrc atomic.Pointer[netip.Addr]

	closing atomic.Bool
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

const (
	// maxDatagram is the largest UDP payload.
	maxDatagram = 64 << 10
	// udpReadBuffer is the socket receive buffer asked for (halved until the
	// kernel accepts it): bursts of fan-out packets must not overflow it.
	udpReadBuffer = 2 << 20
)

// newTransport binds UDP and TCP on addr:port (port 0: a free port, the same
// for both) and starts reading. It counts what it refuses in stats (nil: its
// own).
func newTransport(addr string, port int, logger *log.Logger, stats *TransportStats) (*transport, error) {
	if stats == nil {
		stats = new(TransportStats)
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		ia, rerr := net.ResolveIPAddr("ip", addr) // a host name
		if rerr != nil {
			return nil, fmt.Errorf("bind address %q: %w", addr, rerr)
		}
		ip, _ = netip.AddrFromSlice(ia.IP)
	}
	ip = ip.Unmap()
	t := &transport{
		bind:    ip,
		log:     logger,
		packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn),
		ready:   make(chan struct{}),
		stop:    make(chan struct{}),
		drops:   newDropLog(logger),
		stats:   stats,

		screening: map[net.Conn]struct{}{},
		handed:    map[net.Conn]struct{}{},
	}
	t.configure(DefaultLabel, false, true)
	// With port 0 the kernel picks a TCP port that may be taken for UDP:
	// try a few.
	for attempt := 0; ; attempt++ {
		err = t.listen(port)
		if err == nil || port != 0 || attempt == 9 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	t.wg.Add(2)
	go t.readPackets()
	go t.acceptStreams()
	return t, nil
}

func (t *transport) listen(port int) error {
	tcp, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(t.bind, uint16(port))))
	if err != nil {
		return fmt.Errorf("listen tcp %s: %w", netip.AddrPortFrom(t.bind, uint16(port)), err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(t.bind, uint16(port))))
	if err != nil {
		tcp.Close()
		return fmt.Errorf("listen udp %s: %w", netip.AddrPortFrom(t.bind, uint16(port)), err)
	}
	for size := udpReadBuffer; size > 0; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	t.tcp, t.udp, t.port = tcp, udp, port
	return nil
}

// open lets what the transport receives through to memberlist. Call it
// once memberlist.Create has returned: a join that reached this node while
// memberlist was starting is then answered with a member list that holds
// this node. Otherwise the joiner was told of no one while this node added
// it: the joiner only learned of this node from gossip, and if this node
// left before its first gossip round the joiner ignored the leave (memberlist
// ignores the death of a node it never heard of) and never learned that this
// node had been, or had gone (TestSigtermUnderLoadAnswersClientsAndLeaves
// once failed so: "b hears that a left" never came).
func (t *transport) open() { t.readyOnce.Do(func() { close(t.ready) }) }

// configure sets what the guards check: the cluster label every packet and
// stream must carry ("" for none) and whether memberlist accepts encrypted
// messages only (encryption on and GossipVerifyIncoming, its default; with
// it off, plain messages are screened as on a plain node). Call it before
// open, with memberlist's final configuration.
func (t *transport) configure(label string, encryption, verifyIncoming bool) {
	t.label, t.encrypted = label, encryption && verifyIncoming
	t.guard = &streamGuard{label: label, encryption: encryption, encrypted: t.encrypted, stats: t.stats, log: t.drops,
		budget: streamBudget, timeout: streamTimeout, headerTimeout: streamHeaderTimeout}
	t.guard.slots.stats = t.stats
	t.guard.slots.isMember = t.isMember
}

// waitReady blocks until open or Shutdown; false means Shutdown.
func (t *transport) waitReady() bool {
	select {
	case <-t.ready:
		return true
	case <-t.stop:
		return false
	}
}

// Port is the bound port.
func (t *transport) Port() int { return t.port }

// FinalAdvertiseAddr returns ip and port if ip is given; otherwise the bound
// address and port, or, bound to every interface, a private IP of this host.
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, 0, fmt.Errorf("advertise address %q: %w", ip, err)
		}
		t.setSource(a.Unmap())
		return net.IP(a.Unmap().AsSlice()), port, nil
	}
	if !t.bind.IsUnspecified() {
		return net.IP(t.bind.Unmap().AsSlice()), t.port, nil
	}
	private, err := sockaddr.GetPrivateIP()
	if err != nil {
		return nil, 0, fmt.Errorf("find a private IP to advertise: %w", err)
	}
	a, err := netip.ParseAddr(private)
	if err != nil {
		return nil, 0, errors.New("no private IP to advertise: set an advertise address")
	}
	t.setSource(a.Unmap())
	return net.IP(a.Unmap().AsSlice()), t.port, nil
}

// WriteTo sends one packet to addr (IP:port, or host:port resolved each time).
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		ua, rerr := net.ResolveUDPAddr("udp", addr)
		if rerr != nil {
			return time.Time{}, rerr
		}
		ap = ua.AddrPort()
	}
	dst := netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if oob := t.srcOOB.Load(); oob != nil {
		_, _, err = t.udp.WriteMsgUDPAddrPort(b, *oob, dst)
		if err == nil {
			return time.Now(), nil
		}
		// The kernel refuses a source that is not this host's (a NAT's
		// address): EINVAL, EADDRNOTAVAIL or ENETUNREACH. If the packet goes
		// without it, the source was at fault: stop asking for it.
		if _, err2 := t.udp.WriteToUDPAddrPort(b, dst); err2 != nil {
			return time.Now(), err
		}
		if t.srcOOB.CompareAndSwap(oob, nil) {
			t.log.Printf("[WARN] gossip: cannot send from the advertised address (%v): packets leave from the address the route picks; peers refuse their counters unless a NAT translates them to the advertised address", err)
		}
		return time.Now(), nil
	}
	_, err = t.udp.WriteToUDPAddrPort(b, dst)
	return time.Now(), err
}

// setSource makes packets leave from adv, the address advertised, if the
// transport is bound to every interface.
func (t *transport) setSource(adv netip.Addr) {
	if oob := sourceOOB(t.bind, adv); oob != nil {
		t.srcOOB.Store(&oob)
		t.streamSrc.Store(&adv)
	} else {
		t.srcOOB.Store(nil)
		t.streamSrc.Store(nil)
	}
}

// WriteToAddress is WriteTo; the node's name is not needed.
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout opens a stream to addr. Its reply is screened before
// memberlist reads it (see replyguard.go).
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if src := t.streamSrc.Load(); src != nil { // from the advertised address, as packets (sourceaddr.go)
		d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil && d.LocalAddr != nil && (errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENETUNREACH)) {
		t.streamSrc.Store(nil) // not this host's address (a NAT's)
		conn, err = net.DialTimeout("tcp", addr, timeout)
	}
	if err != nil {
		return nil, err
	}
	return t.guard.outbound(conn), nil
}

// DialAddressTimeout is DialTimeout; the node's name is not needed.
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown closes both listeners and every inbound stream still open, and
// waits for the readers to end. It is safe to call more than once.
func (t *transport) Shutdown() error {
	t.once.Do(func() {
		t.closing.Store(true)
		close(t.stop)
		t.tcp.Close()
		t.udp.Close()
		t.screenMu.Lock()
		for c := range t.screening {
			c.Close()
		}
		for c := range t.handed {
			c.Close()
		}
		t.screenMu.Unlock()
		t.wg.Wait()
	})
	return nil
}

// readPackets hands each datagram to memberlist in a slice of its own size.
func (t *transport) readPackets() {
	defer t.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := t.udp.ReadFromUDPAddrPort(buf)
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		now := time.Now()
		if err != nil {
			if t.closing.Load() {
				return
			}
			t.log.Printf("[ERR] gossip: read a UDP packet: %v", err)
			continue
		}
		if n == 0 {
			continue // memberlist needs at least the message type
		}
		if !t.waitReady() {
			return
		}
		if reason := checkPacket(buf[:n], t.label, t.encrypted); reason != "" {
			t.stats.countPacket(reason)
			t.drops.drop("refused a gossip packet: "+reason, from, nil)
			continue
		}
		if t.senders != nil {
			// Members are listed without zones (memberlist's Node.Addr).
			if r := t.senders.check(buf[:n], netip.AddrPortFrom(from.Addr().WithZone(""), from.Port())); r.reason != "" {
				t.refuseSender(r, from)
				continue
			}
		}
		p := &memberlist.Packet{
			Buf:       append(make([]byte, 0, n), buf[:n]...),
			From:      net.UDPAddrFromAddrPort(from),
			Timestamp: now,
		}
		select {
		case t.packets <- p:
		case <-t.stop:
			return
		}
	}
}

// acceptStreams hands each TCP connection to memberlist, backing off while
// accepting fails (out of file descriptors, say).
func (t *transport) acceptStreams() {
	defer t.wg.Done()
	failures := 0
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closing.Load() {
				return
			}
			failures++
			wait := backoff.Accept().Delay(failures, 0)
			t.log.Printf("[ERR] gossip: accept a TCP connection: %v (retrying in %s)", err, wait)
			select {
			case <-time.After(wait):
				continue
			case <-t.stop:
				return
			}
		}
		failures = 0
		if !t.waitReady() {
			conn.Close()
			return
		}
		src := conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		sl, err := t.guard.acquire(src)
		if err != nil {
			conn.Close()
			t.guard.refused(0, conn.RemoteAddr(), err)
			continue
		}
		t.wg.Add(1)
		go t.screenStream(conn, sl)
	}
}

// screenStream hands conn to memberlist if its header passes the guard.
func (t *transport) screenStream(conn *net.TCPConn, sl slot) {
	defer t.wg.Done()
	t.screenMu.Lock()
	if t.closing.Load() {
		t.screenMu.Unlock()
		conn.Close()
		t.guard.release(sl, 0)
		return
	}
	t.screening[conn] = struct{}{}
	t.screenMu.Unlock()
	gc, declared, err := t.guard.screen(conn, sl)
	t.screenMu.Lock()
	delete(t.screening, conn)
	if err == nil {
		if g, ok := gc.(*guardedConn); ok {
			t.handed[conn] = struct{}{}
			release := g.done
			g.done = func() {
				release()
				t.screenMu.Lock()
				delete(t.handed, conn)
				t.screenMu.Unlock()
			}
		}
	}
	t.screenMu.Unlock()
	if err != nil {
		conn.Close()
		t.guard.refused(declared, conn.RemoteAddr(), err)
		return
	}
	select {
	case t.streams <- gc:
		t.stats.StreamsAccepted.Add(1)
	case <-t.stop:
		gc.Close()
	}
}

// refuseSender counts and logs a packet the sender guard refused.
func (t *transport) refuseSender(r senderRefusal, from netip.AddrPort) {
	t.stats.countPacket(r.reason)
	var err error
	if r.reason == PacketRefusedSender {
		owner := "no member"
		if o := t.senders.book().owner(from); o != "" {
			owner = fmt.Sprintf("member %.64q", o)
		}
		err = fmt.Errorf("it claims to be from %.64q; that address is %s's", r.claimed, owner)
	}
	t.drops.drop("refused a gossip packet: "+r.reason, from, err)
}
