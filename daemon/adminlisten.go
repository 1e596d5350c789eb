package daemon

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// cappedListener holds at most max connections open at once. A connection
// beyond the cap is accepted, answered 503 in one small write and closed at
// once, so a local user opening connections in a loop costs the daemon no
// lasting file descriptor and sees a clear refusal, while the cap's
// connections are reaped by the server's timeouts.
//
// golang.org/x/net/netutil.LimitListener caps connections too, but by not
// accepting: the excess waits in the kernel's backlog, silent, behind the
// connections holding the cap, so an operator's request would hang instead
// of failing with a reason.
type cappedListener struct {
	net.Listener
	max  int64
	open atomic.Int64
	shed atomic.Uint64
}

// shedBody says why a connection beyond the cap is closed; shedReply is the
// whole answer it reads first.
const shedBody = "sluiced admin endpoint: too many connections; retry later\n"

var shedReply = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n" +
	"Content-Length: " + strconv.Itoa(len(shedBody)) + "\r\n\r\n" + shedBody)

// shedWriteTimeout bounds the refusal's write (one small write to a fresh
// socket, which its send buffer takes whole).
const shedWriteTimeout = 100 * time.Millisecond

func newCappedListener(l net.Listener, max int) *cappedListener {
	return &cappedListener{Listener: l, max: int64(max)}
}

// Accept returns the next connection under the cap, shedding those beyond it.
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
		c.SetWriteDeadline(time.Now().Add(shedWriteTimeout))
		c.Write(shedReply)
		c.Close()
	}
}

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
