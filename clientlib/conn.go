package clientlib

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice/ipc"
)

// call is one request awaiting its reply. Calls are pooled: a call is reused
// only after its caller has consumed the single signal on done, or has
// removed it from the pending map before anyone could claim it.
type call struct {
	id      uint64
	done    chan struct{}
	timer   *time.Timer
	reply   ipc.Reply
	inspect ipc.Inspection
	err     error
}

// readBufSize bounds a reply frame: replies are read in place from the
// buffer, so that a read interrupted by a deadline loses nothing.
const readBufSize = 64 << 10

// conn is one connection to the daemon.
//
// Writing: callers append frames to one buffer under wmu; whoever finds no
// write in progress writes everything buffered.
//
// Reading follows a leader/follower pattern. Whoever holds the read token
// reads frames and hands each reply to its caller. A caller that finds the
// token free takes it and reads until its own reply arrives: with one caller
// at a time, the reply goes straight to the goroutine that waits for it, with
// no hand-off between goroutines. A caller that finds the token taken waits to
// be handed its reply. When a caller gives the token back while others still
// wait, a background reader takes over.
type conn struct {
	client  *Client
	nc      net.Conn
	br      *bufio.Reader
	welcome ipc.Welcome
	dead    atomic.Bool
	deadCh  chan struct{}
	nextID  atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]*call

	wmu      sync.Mutex
	wbuf     []byte // frames waiting to be written
	spare    []byte
	flushing bool

	readToken  chan struct{} // holds a token while nobody reads
	readerWake chan struct{}
	rep        ipc.Reply // decode space; used only by the token holder
}

// dial connects and completes the handshake within opts.DialTimeout.
func dial(c *Client, opts Options) (*conn, error) {
	nc, err := net.DialTimeout("unix", opts.SocketPath, opts.DialTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDaemonDown, err)
	}
	nc.SetDeadline(time.Now().Add(opts.DialTimeout))
	br := bufio.NewReaderSize(nc, readBufSize)
	if _, err := nc.Write(ipc.AppendHello(nil, ipc.Hello{Version: ipc.ProtocolVersion, Client: opts.Name})); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: handshake: %w", ErrDaemonDown, err)
	}
	body, err := ipc.ReadFrame(br, nil, readBufSize)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: handshake: %w", ErrDaemonDown, err)
	}
	w, err := ipc.DecodeWelcome(body)
	if err != nil {
		if e, derr := ipc.DecodeError(body); derr == nil {
			err = e
		}
		nc.Close()
		return nil, fmt.Errorf("%w: handshake: %w", ErrProtocol, err)
	}
	nc.SetDeadline(time.Time{})
	cn := &conn{
		client: c, nc: nc, br: br, welcome: w,
		deadCh:     make(chan struct{}),
		pending:    map[uint64]*call{},
		wbuf:       make([]byte, 0, 4096),
		spare:      make([]byte, 0, 4096),
		readToken:  make(chan struct{}, 1),
		readerWake: make(chan struct{}, 1),
	}
	cn.readToken <- struct{}{}
	c.wg.Add(1)
	go cn.backgroundReader()
	return cn, nil
}

// send registers cl and writes its CHECK.
func (cn *conn) send(cl *call, checks []Check, timeout time.Duration) error {
	if len(checks) > int(cn.welcome.MaxBatch) {
		return fmt.Errorf("%w: %d checks, daemon accepts at most %d", ErrInvalid, len(checks), cn.welcome.MaxBatch)
	}
	maxKey := int(cn.welcome.MaxKeyLen)
	return cn.write(cl, timeout, func(b []byte, id uint64) []byte {
		b, start := ipc.BeginRequest(b, id, len(checks))
		for _, ch := range checks {
			key := ch.Key
			if maxKey > 0 && len(key) > maxKey {
				key = BoundedKey(key, maxKey) // limited like any other identity, not refused
			}
			b = ipc.AppendShapedCheck(b, ch.Rule, key, uint64(ch.Cost), ch.MaxDelay)
		}
		return ipc.FinishFrame(b, start)
	})
}

// write registers cl under a fresh id and writes the frame appendFrame
// appends. Concurrent writers append to one buffer; whoever finds no write in
// progress writes everything buffered, so requests from many callers leave
// in few system calls.
func (cn *conn) write(cl *call, timeout time.Duration, appendFrame func(b []byte, id uint64) []byte) error {
	id := cn.nextID.Add(1)
	cl.id, cl.err = id, nil
	cn.mu.Lock()
	if cn.dead.Load() {
		cn.mu.Unlock()
		return ErrDaemonDown
	}
	cn.pending[id] = cl
	cn.mu.Unlock()

	cn.wmu.Lock()
	if cn.welcome.Version >= 2 {
		cn.wbuf = cn.client.appendReport(cn.wbuf)
	}
	cn.wbuf = appendFrame(cn.wbuf, id)
	if cn.flushing {
		cn.wmu.Unlock()
		return nil
	}
	cn.flushing = true
	for len(cn.wbuf) > 0 {
		out := cn.wbuf
		cn.wbuf = cn.spare[:0]
		cn.wmu.Unlock()
		cn.nc.SetWriteDeadline(time.Now().Add(max(timeout, 10*time.Millisecond)))
		_, err := cn.nc.Write(out)
		cn.wmu.Lock()
		cn.spare = out[:0]
		if err != nil {
			cn.flushing = false
			cn.wmu.Unlock()
			// A partial frame may be on the wire: the connection is unusable.
			cn.fail(fmt.Errorf("%w: write: %w", ErrDaemonDown, err))
			if !cn.abandon(cl) {
				<-cl.done // fail claimed it; consume the signal so the call can be reused
			}
			return ErrDaemonDown
		}
	}
	cn.flushing = false
	cn.wmu.Unlock()
	return nil
}

// await waits for cl's reply, reading it itself if nobody else is reading.
// It returns ErrTimeout or ctx's error if the reply does not come in time;
// otherwise the reply (or a connection failure) is in cl.
func (cn *conn) await(ctx context.Context, cl *call, timeout time.Duration) error {
	select {
	case <-cn.readToken:
		return cn.readUntilDone(ctx, cl, timeout)
	default:
	}
	cl.timer.Reset(timeout)
	var err error
	select {
	case <-cl.done:
	case <-cl.timer.C:
		err = ErrTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	cl.timer.Stop()
	if err == nil {
		return nil // the signal on done was consumed above
	}
	return cn.settle(cl, err)
}

// readUntilDone reads frames as the token holder until cl is answered or its
// deadline passes. A cancellable context is polled every millisecond while
// the read waits, so cancellation is noticed within a millisecond.
func (cn *conn) readUntilDone(ctx context.Context, cl *call, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	const pollEvery = time.Millisecond
	cancellable := ctx.Done() != nil
	nextRead := func(now time.Time) time.Time {
		if p := now.Add(pollEvery); cancellable && p.Before(deadline) {
			return p
		}
		return deadline
	}
	cn.nc.SetReadDeadline(nextRead(time.Now()))
	var err error
	// The reply may already have been handed over by whoever held the token
	// before: look before reading, or this read could wait for a frame that
	// never comes.
	for len(cl.done) == 0 {
		rerr := cn.readOne()
		if rerr == nil {
			continue
		}
		if !errors.Is(rerr, os.ErrDeadlineExceeded) {
			break // the connection failed, which answered cl
		}
		if err = ctx.Err(); err != nil {
			break
		}
		now := time.Now()
		if !now.Before(deadline) {
			err = ErrTimeout
			break
		}
		cn.nc.SetReadDeadline(nextRead(now))
	}
	cn.releaseToken()
	return cn.settle(cl, err)
}

// settle resolves a wait whose signal on done has not been consumed: if err is
// set and the call is still pending it is abandoned and err stands; otherwise
// someone claimed the call, its answer is (or is about to be) signalled, and
// it is used instead.
func (cn *conn) settle(cl *call, err error) error {
	if err != nil && cn.abandon(cl) {
		return err
	}
	<-cl.done
	return nil
}

// releaseToken gives the read token back, and wakes the background reader if
// callers still wait for replies that nobody is reading.
func (cn *conn) releaseToken() {
	cn.readToken <- struct{}{}
	if cn.pendingCount() > 0 {
		select {
		case cn.readerWake <- struct{}{}:
		default:
		}
	}
}

func (cn *conn) pendingCount() int {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return len(cn.pending)
}

// backgroundReader reads replies for callers that are waiting to be handed
// them, whenever no caller is reading.
func (cn *conn) backgroundReader() {
	defer cn.client.wg.Done()
	for {
		select {
		case <-cn.deadCh:
			return
		case <-cn.readerWake:
		}
		for cn.pendingCount() > 0 {
			select {
			case <-cn.deadCh:
				return
			case <-cn.readToken:
			}
			cn.nc.SetReadDeadline(time.Time{})
			for cn.pendingCount() > 0 {
				if err := cn.readOne(); err != nil {
					cn.readToken <- struct{}{}
					return // the connection failed; fail() answered everyone
				}
			}
			cn.readToken <- struct{}{}
		}
	}
}

// readOne reads one frame in place and hands it to its caller. A deadline
// error leaves the buffer intact for the next reader; any other error fails
// the connection.
func (cn *conn) readOne() error {
	hdr, err := cn.br.Peek(4)
	if err != nil {
		return cn.readFailed(err)
	}
	n := int(binary.BigEndian.Uint32(hdr))
	if n == 0 || n > readBufSize-4 {
		err := fmt.Errorf("%w: reply frame of %d bytes", ErrProtocol, n)
		cn.fail(err)
		return err
	}
	frame, err := cn.br.Peek(4 + n)
	if err != nil {
		return cn.readFailed(err)
	}
	err = cn.dispatch(frame[4:])
	cn.br.Discard(4 + n)
	if err != nil {
		cn.fail(err)
	}
	return err
}

func (cn *conn) readFailed(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	err = fmt.Errorf("%w: read: %w", ErrDaemonDown, err)
	cn.fail(err)
	return err
}

// dispatch hands one reply to the call waiting for it.
func (cn *conn) dispatch(body []byte) error {
	typ, _, err := ipc.PeekType(body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	switch typ {
	case ipc.MsgResult:
		if err := ipc.DecodeReply(body, &cn.rep); err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if cl := cn.claim(cn.rep.ID); cl != nil { // nil: its caller gave up
			cl.reply.ID, cl.reply.Allowed = cn.rep.ID, cn.rep.Allowed
			cl.reply.Results = append(cl.reply.Results[:0], cn.rep.Results...)
			cl.done <- struct{}{}
		}
		return nil
	case ipc.MsgBalance:
		in, err := ipc.DecodeBalance(body)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if cl := cn.claim(in.ID); cl != nil {
			cl.inspect = in
			cl.done <- struct{}{}
		}
		return nil
	case ipc.MsgError:
		e, err := ipc.DecodeError(body)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if e.ID == 0 { // the daemon is closing this connection
			return fmt.Errorf("%w: %w", ErrDaemonDown, e)
		}
		if cl := cn.claim(e.ID); cl != nil {
			cl.err = e
			cl.done <- struct{}{}
		}
		return nil
	}
	return fmt.Errorf("%w: unexpected message type %d", ErrProtocol, typ)
}

// abandon removes a call whose caller gave up. It reports false if the call
// was already claimed and will be signalled.
func (cn *conn) abandon(cl *call) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.pending[cl.id] != cl {
		return false
	}
	delete(cn.pending, cl.id)
	return true
}

func (cn *conn) claim(id uint64) *call {
	cn.mu.Lock()
	cl := cn.pending[id]
	delete(cn.pending, id)
	cn.mu.Unlock()
	return cl
}

// fail marks the connection dead, closes it and fails every pending call.
func (cn *conn) fail(err error) {
	if cn.dead.Swap(true) {
		return
	}
	close(cn.deadCh)
	cn.nc.Close()
	cn.mu.Lock()
	pending := cn.pending
	cn.pending = map[uint64]*call{}
	cn.mu.Unlock()
	for _, cl := range pending {
		cl.err = err
		cl.done <- struct{}{}
	}
	if !errors.Is(err, ErrClosed) {
		cn.client.connLost()
	}
}
