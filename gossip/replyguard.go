package gossip

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"sync"
	"time"
)

// The reply guard screens what comes back on a stream this node opened,
// before memberlist reads it: the answer to a push-pull (this node's
// periodic exchange, or a join) and to a TCP ping. memberlist reads a reply
// as it reads an inbound stream, trusting its declared lengths: a peer this
// node dials (any address given to --join, or any node that joined a plain
// cluster) could answer a push-pull with a header declaring 2^40 node
// states, or a node state whose short version list panics memberlist's
// verifyProtocol. So a reply passes the inbound checks (streamguard.go), with
// the kinds a reply may be: an encrypted frame no longer than
// maxStreamBytes (on an encrypted node; memberlist authenticates it and the
// label inside it), or, on a plain node, a push-pull within the caps and
// with well-formed node states, an ack or an error of at most maxPlainOther
// bytes. memberlist writes no label header on a reply (the label is
// checked inside the encryption, or not at all), so a reply with one is
// refused; so is a compressed reply, and any other kind. The stream keeps
// an absolute deadline memberlist cannot extend. Replies are not counted
// against the inbound slots or budget: this node opens them, a few at a
// time.

// replyTimeout bounds a stream this node opened, from the dial: its request
// and the reply, each of which the peer bounds by its own streamTimeout.
const replyTimeout = 2 * streamTimeout

// replyConn is a stream this node opened. Writes go straight through; the
// first Read screens the reply's header, and later reads see no more than
// it declared.
type replyConn struct {
	net.Conn
	g        *streamGuard
	deadline time.Time
	once     sync.Once
	r        io.Reader
	err      error
}

// outbound wraps a stream this node opened.
func (g *streamGuard) outbound(conn net.Conn) net.Conn {
	c := &replyConn{Conn: conn, g: g, deadline: time.Now().Add(replyTimeout)}
	conn.SetDeadline(c.deadline)
	return c
}

func (c *replyConn) Read(p []byte) (int, error) {
	c.once.Do(c.screen)
	if c.err != nil {
		return 0, c.err
	}
	return c.r.Read(p)
}

// screen parses the reply's header and sets what Read reads, or the error
// it returns (the refusal, counted and logged).
func (c *replyConn) screen() {
	br := bufio.NewReaderSize(c.Conn, streamPeekSize)
	var plan pushPullPlan
	limit, err := c.g.parseReply(br, &plan)
	if err == nil && plan.nodes > 0 {
		c.r, err = checkNodeStates(io.LimitReader(br, limit), plan)
	} else if err == nil {
		peeked, _ := br.Peek(br.Buffered())
		if int64(len(peeked)) > limit {
			peeked = peeked[:limit]
		}
		c.r = io.MultiReader(bytes.NewReader(bytes.Clone(peeked)), io.LimitReader(c.Conn, limit-int64(len(peeked))))
	}
	if err != nil {
		c.err = err
		c.g.refusedReply(limit, c.Conn.RemoteAddr(), err)
	}
}

// parseReply reads a reply's framing and returns how many bytes, from its
// first, memberlist may read.
func (g *streamGuard) parseReply(br peekReader, plan *pushPullPlan) (int64, error) {
	peek := peeker(br)
	b, err := peek(1)
	if err != nil {
		return 0, err
	}
	if b[0] == mlHasLabel {
		return 0, refuse(RefusedLabel, "a reply with a label header")
	}
	return g.parseBody(peek, 0, plan, true)
}

// refusedReply counts and logs (rate-limited) a refused reply.
func (g *streamGuard) refusedReply(declared int64, from net.Addr, err error) {
	reason := RefusedTimeout
	if r, ok := err.(*errRefused); ok {
		reason = r.reason
	}
	g.stats.countReply(reason, declared)
	g.log.drop("refused a gossip reply: "+reason, from, err)
}

func (c *replyConn) clamp(t time.Time) time.Time {
	if t.IsZero() || t.After(c.deadline) {
		return c.deadline
	}
	return t
}

func (c *replyConn) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *replyConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.clamp(t))
}
func (c *replyConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.clamp(t))
}
