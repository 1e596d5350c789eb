package daemon

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// cappedListener holds at most max connections open at once. A connection
// beyond the cap is accepted, and closed at once, or, while fewer than
// maxShedding refusals are under way, answered 503 first: its request is
// read for up to shedTimeout (so that the client, which has sent it, reads
// the answer rather than a reset), then the refusal is written and the
// connection closed. A local user opening connections in a loop thus holds
// at most max + maxShedding of the daemon's descriptors, and an operator's
// request at the cap fails at once with a reason, while the connections
// holding the cap are reaped by the server's timeouts.
//
// golang.org/x/net/netutil.LimitListener caps connections too, but by not
// accepting: the excess waits in the kernel's backlog, silent, behind the
// connections holding the cap, so an operator's request would hang instead
// of failing with a reason.
type cappedListener struct {
	net.Listener
	max      int64
	open     atomic.Int64
	shedding atomic.Int64
	shed     atomic.Uint64
	refusing sync.WaitGroup // the refusals under way
}

// shedBody says why a connection beyond the cap is closed; shedReply is the
// whole answer it reads first.
const shedBody = "sluiced admin endpoint: too many connections; retry later\n"

var shedReply = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n" +
	"Content-Length: " + strconv.Itoa(len(shedBody)) + "\r\n\r\n" + shedBody)

// Refusals at the cap: how many may be under way at once, and how long
// each may wait for the request it answers.
const (
	maxShedding = 16
	shedTimeout = 250 * time.Millisecond
)

func newCappedListener(l net.Listener, max int) *cappedListener {
	return &cappedListener{Listener: l, max: int64(max)}
}

// Accept returns the next connection under the cap, refusing those beyond it.
func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &countedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.shed.Add(1)
		if l.shedding.Add(1) > maxShedding {
			l.shedding.Add(-1)
			c.Close()
			continue
		}
		l.refusing.Add(1)
		go func() {
			defer l.refusing.Done()
			defer l.shedding.Add(-1)
			var buf [2048]byte
			c.SetReadDeadline(time.Now().Add(shedTimeout))
			c.Read(buf[:]) // the request, or nothing by the deadline
			c.SetWriteDeadline(time.Now().Add(shedTimeout))
			c.Write(shedReply)
			c.Close()
		}()
	}
}

// wait waits for the refusals under way, each bounded by shedTimeout
// twice; call it once Accept can no longer be called (the listener closed,
// its server's Serve returned or never begun).
func (l *cappedListener) wait() { l.refusing.Wait() }

// Shed is the number of connections refused at the cap.
func (l *cappedListener) Shed() uint64 { return l.shed.Load() }

// countedConn gives its slot back once, on its first Close.
type countedConn struct {
	net.Conn
	l    *cappedListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
