package gossip

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// The stream guard stands between the TCP listener and memberlist. memberlist
// trusts what a stream declares, within caps too loose to bound memory
// (v0.7.0 allows 1M node states, about 110 bytes each once allocated, and
// 20 MiB of user state per push-pull, 20 MiB per user message; v0.5.4 had
// none): a plain user message's header says how many bytes to make([]byte,
// n) (a 30-byte stream declaring 2^62 killed the daemon on v0.5.4), a plain
// push-pull says how many node states to allocate and how
// long its user state is, and an encrypted frame says how many bytes to
// buffer (up to 20 MiB each) before the key is checked. So before memberlist
// sees a stream the guard reads its first bytes (at most streamPeekSize),
// parses memberlist's framing exactly as memberlist will (net.go handleConn,
// readStream, readRemoteState, readUserMsg; label.go), refuses what Sluice
// never sends or what declares more than Sluice could, reserves the bytes the
// stream may make memberlist hold from a budget shared by all streams not
// yet closed, and hands memberlist a connection that replays the peeked bytes
// and then reads no more than the header declared. Every stream also has an
// absolute deadline memberlist cannot extend, and a shorter one for its
// header. Nothing a peer declares is allocated before it is checked.

// Stream caps.
const (
	// maxStreams is how many inbound streams may be open at once (being
	// screened or with memberlist); beyond, a new one is closed at once.
	// streamslots.go shares them out between sources.
	// memberlist opens one per push-pull (one per PushPullInterval per
	// peer, plus joins), per reliable user message and per TCP ping.
	maxStreams = 32
	// streamTimeout is the longest a stream may stay open, header included.
	// memberlist's own TCPTimeout (10 s in its LAN config) cannot extend it.
	streamTimeout = 10 * time.Second
	// streamPeekSize is what is read before deciding: a label header (at
	// most 257 bytes), the type, and a stream header (under 64 bytes).
	streamPeekSize = 512

	// maxPushNodes caps the node states a plain push-pull may declare.
	// memberlist sends every node it knows, dead ones included, until it
	// reaps them; a Sluice cluster of thousands is far beyond its design.
	maxPushNodes = 2048
	// maxNodeStateBytes bounds one encoded node state: a name of at most
	// 512 bytes (maxNameLen), a 16-byte address, 512 bytes of meta
	// (memberlist's MetaMaxSize), and field names and small ints.
	maxNodeStateBytes = 1536
	// maxUserState caps a push-pull's user state: what localState can
	// produce is stateBudget plus the entries that cross it.
	maxUserState = stateBudget + 1<<20
	// maxUserMsg caps a reliable user message. Sluice sends resets over
	// streams: a resend is at most resendBudget plus one entry, but a reset
	// of many rules for one long key is not split, so the cap is the same
	// as a push-pull's user state.
	maxUserMsg = maxUserState
	// maxPlainOther caps a plain stream of another kind (a TCP ping).
	maxPlainOther = 4 << 10
	// maxStreamBytes caps what one stream may declare: the largest
	// push-pull this node could send (header, maxPushNodes node states,
	// maxUserState), plus encryption's overhead. About 12 MiB, well under
	// memberlist's 20 MiB.
	maxStreamBytes = 1<<10 + maxPushNodes*maxNodeStateBytes + maxUserState + 64
	// streamBudget caps the bytes all open streams together may declare.
	// memberlist holds up to about three times a stream's declared size
	// while reading and decrypting it (a doubling buffer, then the
	// plaintext), so this bounds their memory at about 100 MiB however many
	// strangers connect. It admits two largest streams at once.
	streamBudget = 2*maxStreamBytes + 8<<20
)

// memberlist's message types (net.go) and label header (label.go).
const (
	mlPing       = 0
	mlAckResp    = 2
	mlPushPull   = 6
	mlCompound   = 7
	mlUser       = 8
	mlCompress   = 9
	mlEncrypt    = 10
	mlHasCrc     = 12
	mlErr        = 13
	mlHasLabel   = 244
	mlCrcHeader  = 5 // type byte and CRC-32
	mlFrameFixed = 5 // encrypted frame: type byte and big-endian uint32 length
)

// Stream refusal reasons, the label values of sluice_gossip_streams_refused_total.
const (
	RefusedBusy       = "busy"       // maxStreams already open
	RefusedTimeout    = "timeout"    // the header did not arrive in time, or the connection failed
	RefusedLabel      = "label"      // missing, malformed or another cluster's label
	RefusedEncryption = "encryption" // plain to an encrypted node or the reverse
	RefusedType       = "type"       // a kind of stream Sluice never sends (compressed, unknown)
	RefusedHeader     = "header"     // a header not as memberlist encodes it
	RefusedLength     = "length"     // a declared length or count beyond the caps
	RefusedBudget     = "budget"     // open streams already declare streamBudget bytes
	RefusedSource     = "source"     // the source address holds maxStreamsPerSource streams already
)

// StreamRefusals lists the stream refusal reasons.
var StreamRefusals = []string{RefusedBusy, RefusedTimeout, RefusedLabel, RefusedEncryption, RefusedType, RefusedHeader, RefusedLength, RefusedBudget, RefusedSource}

// errRefused carries why a stream or packet was refused.
type errRefused struct{ reason, detail string }

func (e *errRefused) Error() string { return e.reason + ": " + e.detail }

func refuse(reason, detail string) error { return &errRefused{reason, detail} }

// streamGuard holds the limits shared by all inbound streams.
type streamGuard struct {
	label      string
	encryption bool // memberlist decrypts encrypted streams
	encrypted  bool // memberlist accepts encrypted streams only
	stats      *TransportStats
	log        *dropLog
	slots      streamSlots
	mu         sync.Mutex
	reserved   int64 // bytes declared by open streams; under mu
	budget     int64
	timeout    time.Duration
	// headerTimeout bounds the wait for a stream's header (0: timeout).
	headerTimeout time.Duration
}

// acquire takes a stream slot for a stream from src, or returns the
// refusal (see streamSlots).
func (g *streamGuard) acquire(src netip.Addr) (slot, error) {
	sl, reason := g.slots.acquire(src)
	switch reason {
	case "":
		return sl, nil
	case RefusedSource:
		return sl, refuse(reason, "the source holds its share of streams")
	}
	return sl, refuse(reason, "too many streams open")
}

func (g *streamGuard) release(sl slot, reserved int64) {
	g.slots.release(sl)
	if reserved > 0 {
		g.mu.Lock()
		g.reserved -= reserved
		g.mu.Unlock()
	}
}

func (g *streamGuard) reserve(n int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reserved+n > g.budget {
		return false
	}
	g.reserved += n
	return true
}

// refused counts and logs (rate-limited) a refused stream.
func (g *streamGuard) refused(declared int64, from net.Addr, err error) {
	reason := RefusedTimeout
	if r, ok := err.(*errRefused); ok {
		reason = r.reason
	}
	g.stats.countStream(reason, declared)
	g.log.drop("refused a gossip stream: "+reason, from, err)
}

// screen reads conn's header and returns the connection memberlist may
// read, or an error naming why conn was refused (*errRefused) and the bytes
// the refused stream declared. conn holds the slot sl; the returned
// connection gives it back on Close. On error the caller closes conn and
// the slot is given back here.
func (g *streamGuard) screen(conn net.Conn, sl slot) (net.Conn, int64, error) {
	start := time.Now()
	deadline := start.Add(g.timeout)
	conn.SetDeadline(deadline)
	if g.headerTimeout > 0 && g.headerTimeout < g.timeout {
		conn.SetDeadline(start.Add(g.headerTimeout))
	}
	br := bufio.NewReaderSize(conn, streamPeekSize)
	limit, plan, err := g.parseStream(br)
	conn.SetDeadline(deadline)
	if err != nil {
		g.release(sl, 0)
		return nil, limit, err
	}
	if !g.reserve(limit) {
		g.release(sl, 0)
		return nil, limit, refuse(RefusedBudget, "open streams declare too much already")
	}
	if plan.nodes > 0 {
		r, err := checkNodeStates(io.LimitReader(br, limit), plan)
		if err != nil {
			g.release(sl, limit)
			return nil, limit, err
		}
		return &guardedConn{Conn: conn, r: r, deadline: deadline, done: func() { g.release(sl, limit) }}, 0, nil
	}
	peeked, _ := br.Peek(br.Buffered())
	if int64(len(peeked)) > limit {
		peeked = peeked[:limit]
	}
	rest := limit - int64(len(peeked))
	return &guardedConn{
		Conn:     conn,
		r:        io.MultiReader(bytes.NewReader(bytes.Clone(peeked)), io.LimitReader(conn, rest)),
		deadline: deadline,
		done:     func() { g.release(sl, limit) },
	}, 0, nil
}

// peekReader is what parse reads a header from.
type peekReader interface {
	Peek(n int) ([]byte, error)
}

// parse reads memberlist's framing from the start of a stream and returns
// how many bytes, from the stream's first, memberlist may read.
func (g *streamGuard) parse(br peekReader) (int64, error) {
	limit, _, err := g.parseStream(br)
	return limit, err
}

// pushPullPlan locates the node states of a plain push-pull: they start at
// byte at of the stream, and there are nodes of them (0: not a plain
// push-pull).
type pushPullPlan struct {
	at    int
	nodes int64
}

// parseStream is parse, also saying where a plain push-pull's node states are.
func (g *streamGuard) parseStream(br peekReader) (int64, pushPullPlan, error) {
	var plan pushPullPlan
	limit, err := g.parseInto(br, &plan)
	return limit, plan, err
}

// peeker returns a Peek that reports why it failed as a refusal.
func peeker(br peekReader) func(int) ([]byte, error) {
	return func(n int) ([]byte, error) {
		b, err := br.Peek(n)
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, refuse(RefusedHeader, "header too long")
			}
			return nil, refuse(RefusedTimeout, "read the header: "+err.Error())
		}
		return b, nil
	}
}

func (g *streamGuard) parseInto(br peekReader, plan *pushPullPlan) (int64, error) {
	peek := peeker(br)
	b, err := peek(1)
	if err != nil {
		return 0, err
	}
	off := 0
	if b[0] == mlHasLabel {
		if b, err = peek(2); err != nil {
			return 0, err
		}
		size := int(b[1])
		if size == 0 {
			return 0, refuse(RefusedLabel, "empty label header")
		}
		if b, err = peek(2 + size); err != nil {
			return 0, err
		}
		if string(b[2:2+size]) != g.label {
			return 0, refuse(RefusedLabel, "another cluster's label")
		}
		off = 2 + size
	} else if g.label != "" {
		return 0, refuse(RefusedLabel, "no label")
	}
	return g.parseBody(peek, off, plan, false)
}

// parseBody parses a stream from off, past any label header: an encrypted
// frame, or a plain message of a kind Sluice sends (reply: of a kind
// memberlist answers a stream this node opened with).
func (g *streamGuard) parseBody(peek func(int) ([]byte, error), off int, plan *pushPullPlan, reply bool) (int64, error) {
	b, err := peek(off + 1)
	if err != nil {
		return 0, err
	}
	typ := b[off]
	off++
	if typ == mlEncrypt {
		if !g.encryption {
			return 0, refuse(RefusedEncryption, "an encrypted stream to a plain node")
		}
		if b, err = peek(off + 4); err != nil {
			return 0, err
		}
		n := int64(binary.BigEndian.Uint32(b[off:]))
		if n > maxStreamBytes {
			return n, refuse(RefusedLength, "an encrypted frame beyond the cap")
		}
		// memberlist's encryption version 0 pads, and its unpadding trusts
		// the last byte: a keyed peer's frame with a pad longer than the
		// message panicked memberlist (out of range), which ended the
		// process. Sluice's memberlist writes version 1 (protocol >= 2).
		if n > 0 {
			if b, err = peek(off + 5); err != nil {
				return 0, err
			}
			if b[off+4] != 1 {
				return n, refuse(RefusedHeader, "an encryption version Sluice never sends")
			}
		}
		return int64(off+4) + n, nil
	}
	if g.encrypted {
		return 0, refuse(RefusedEncryption, "a plain stream to an encrypted node")
	}
	switch {
	case typ == mlPing && !reply, (typ == mlAckResp || typ == mlErr) && reply:
		return int64(off) + maxPlainOther, nil
	case typ == mlUser && !reply, typ == mlPushPull:
	default:
		return 0, refuse(RefusedType, "a kind of stream Sluice never sends")
	}
	var h streamHeader
	end, err := h.parse(peek, off, typ == mlPushPull)
	if err != nil {
		return 0, err
	}
	if typ == mlUser {
		if h.userMsgLen > maxUserMsg {
			return h.userMsgLen, refuse(RefusedLength, "a user message beyond the cap")
		}
		return int64(end) + h.userMsgLen, nil
	}
	if h.nodes > maxPushNodes || h.userStateLen > maxUserState {
		return h.nodes*maxNodeStateBytes + h.userStateLen, refuse(RefusedLength, "a push-pull beyond the caps")
	}
	plan.at, plan.nodes = end, h.nodes
	return int64(end) + h.nodes*maxNodeStateBytes + h.userStateLen, nil
}

// streamHeader is a plain user message's or push-pull's header.
type streamHeader struct {
	userMsgLen, nodes, userStateLen int64
}

// parse reads the msgpack map memberlist's codec writes for userMsgHeader
// ({UserMsgLen}) or pushPullHeader ({Nodes, UserStateLen, Join}) at off, and
// returns where it ends. It is strict: a map of distinct known string keys
// with integer (bool for Join) values, negative lengths refused. The codec
// would also read an array, other key encodings or unknown keys; Sluice's
// memberlist never writes them, so they are refused rather than guessed at.
func (h *streamHeader) parse(peek func(int) ([]byte, error), off int, pushPull bool) (int, error) {
	b, err := peek(off + 1)
	if err != nil {
		return 0, err
	}
	n := int(b[off])
	if n < 0x80 || n > 0x83 {
		return 0, refuse(RefusedHeader, "not a small map")
	}
	n -= 0x80
	off++
	var have [3]bool
	for range n {
		if b, err = peek(off + 1); err != nil {
			return 0, err
		}
		kl := int(b[off])
		if kl < 0xa0 || kl > 0xbf {
			return 0, refuse(RefusedHeader, "a key that is not a short string")
		}
		kl -= 0xa0
		if b, err = peek(off + 1 + kl + 1); err != nil {
			return 0, err
		}
		key := string(b[off+1 : off+1+kl])
		off += 1 + kl
		field := -1
		switch {
		case !pushPull && key == "UserMsgLen":
			field = 0
		case pushPull && key == "Nodes":
			field = 0
		case pushPull && key == "UserStateLen":
			field = 1
		case pushPull && key == "Join":
			field = 2
		}
		if field < 0 || have[field] {
			return 0, refuse(RefusedHeader, "an unknown or repeated key")
		}
		have[field] = true
		if field == 2 {
			if c := b[off]; c != 0xc2 && c != 0xc3 {
				return 0, refuse(RefusedHeader, "Join is not a bool")
			}
			off++
			continue
		}
		v, size, err := mpInt(peek, off)
		if err != nil {
			return 0, err
		}
		off += size
		if v < 0 {
			return 0, refuse(RefusedLength, "a negative length")
		}
		switch {
		case !pushPull:
			h.userMsgLen = v
		case field == 0:
			h.nodes = v
		default:
			h.userStateLen = v
		}
	}
	return off, nil
}

// mpInt reads a msgpack integer at off: its value (values beyond int64 are
// returned as math.MaxInt64) and its encoded size.
func mpInt(peek func(int) ([]byte, error), off int) (int64, int, error) {
	b, err := peek(off + 1)
	if err != nil {
		return 0, 0, err
	}
	c := b[off]
	switch {
	case c <= 0x7f:
		return int64(c), 1, nil
	case c >= 0xe0:
		return int64(int8(c)), 1, nil
	}
	var size int
	switch c {
	case 0xcc, 0xd0:
		size = 1
	case 0xcd, 0xd1:
		size = 2
	case 0xce, 0xd2:
		size = 4
	case 0xcf, 0xd3:
		size = 8
	default:
		return 0, 0, refuse(RefusedHeader, "a length that is not an integer")
	}
	if b, err = peek(off + 1 + size); err != nil {
		return 0, 0, err
	}
	p := b[off+1 : off+1+size]
	var u uint64
	for _, x := range p {
		u = u<<8 | uint64(x)
	}
	if c >= 0xd0 { // signed: sign-extend
		shift := 64 - 8*size
		return int64(u<<shift) >> shift, 1 + size, nil
	}
	if u > math.MaxInt64 {
		return math.MaxInt64, 1 + size, nil
	}
	return int64(u), 1 + size, nil
}

// guardedConn is a screened stream as memberlist reads it: the peeked bytes
// again, then no more than the header declared, before a deadline it cannot
// extend. Close gives back the stream's slot and reservation once.
type guardedConn struct {
	net.Conn
	r        io.Reader
	deadline time.Time
	done     func()
	once     sync.Once
}

func (c *guardedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}

func (c *guardedConn) clamp(t time.Time) time.Time {
	if t.IsZero() || t.After(c.deadline) {
		return c.deadline
	}
	return t
}

func (c *guardedConn) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *guardedConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.clamp(t))
}
func (c *guardedConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.clamp(t))
}

// guardNodeState is the part of memberlist's pushNodeState the guard checks,
// decoded by field name as memberlist's codec writes it.
type guardNodeState struct {
	Name string
	Vsn  []uint8
}

// checkNodeStates reads a plain push-pull's node states from src (the
// stream from its first byte, limited to what it declared) and refuses the
// stream if one carries a protocol version list shorter than memberlist
// writes (6 bytes). memberlist v0.5.4's verifyProtocol read Vsn[0..5] of any
// non-empty list, so a one-byte list panicked the daemon; v0.7.0 skips short
// lists and refuses the push-pull as incompatible, which also covers what
// this check cannot see: encrypted push-pulls (checked only once memberlist
// has decrypted them) and replies to push-pulls this node opened (read by
// memberlist without the guard). The check stays as a second wall: Sluice
// never sends such a list, and refusing it here costs memberlist no decoding.
// It returns the reader memberlist reads the stream from: the bytes
// checked, then the rest.
func checkNodeStates(src io.Reader, plan pushPullPlan) (io.Reader, error) {
	head := make([]byte, plan.at)
	if _, err := io.ReadFull(src, head); err != nil {
		return nil, refuse(RefusedTimeout, "read the header: "+err.Error())
	}
	var seen bytes.Buffer
	dec := codec.NewDecoder(io.TeeReader(src, &seen), &codec.MsgpackHandle{})
	for i := int64(0); i < plan.nodes; i++ {
		var st guardNodeState
		if err := dec.Decode(&st); err != nil {
			return nil, refuse(RefusedHeader, fmt.Sprintf("node state %d: %v", i, err))
		}
		if n := len(st.Vsn); n != 0 && n < 6 {
			return nil, refuse(RefusedHeader, fmt.Sprintf("node state %d: a version list of %d bytes, not 6", i, n))
		}
	}
	return io.MultiReader(bytes.NewReader(head), bytes.NewReader(seen.Bytes()), src), nil
}
