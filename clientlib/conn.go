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
	"syscall"
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
	born    time.Time    // when the handshake completed
	life    atomic.Int64 // how long it lived, set when it dies
	dead    atomic.Bool
	deadCh  chan struct{}
	nextID  atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]*call

	wmu      sync.Mutex
	wbuf     []byte // frames waiting to be written
	spare    []byte
	flushing bool

	rInt, wInt interrupter // wake the token holder's read, the flusher's write

	readToken  chan struct{} // holds a token while nobody reads
	readerWake chan struct{}
	rep        ipc.Reply // decode space; used only by the token holder
}

// maxQueued bounds the bytes callers may queue behind a write that cannot
// finish (a daemon that stopped reading): beyond it calls fail at once.
const maxQueued = 1 << 20

// errNotReading fails calls made while maxQueued bytes wait to be written.
var errNotReading = fmt.Errorf("%w: the daemon is not reading its socket (%d bytes queued)", ErrDaemonDown, maxQueued)

// connectUnix connects to a Unix socket within timeout. A connect that finds
// the daemon's listen backlog full fails at once with EAGAIN (a local user
// connecting faster than the daemon accepts can cause that); it is retried,
// with a short growing pause, until the timeout.
func connectUnix(path string, timeout time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(timeout)
	pause := 100 * time.Microsecond
	for {
		nc, err := net.DialTimeout("unix", path, time.Until(deadline))
		if err == nil || !errors.Is(err, syscall.EAGAIN) {
			return nc, err
		}
		if time.Until(deadline) < pause {
			return nil, err
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
}

// dial connects, checks who serves the socket, and completes the handshake
// within opts.DialTimeout. Its errors are *ReachError.
func dial(c *Client, opts Options) (*conn, error) {
	nc, err := connectUnix(opts.SocketPath, opts.DialTimeout)
	if err != nil {
		return nil, explainDial(opts.SocketPath, c.pathWhy, err)
	}
	// Nothing, not even HELLO, goes to a process that is not the daemon.
	if _, err := verifyDaemon(nc, opts.SocketPath, opts.DaemonUIDs); err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(opts.DialTimeout))
	br := bufio.NewReaderSize(nc, readBufSize)
	if _, err := nc.Write(ipc.AppendHello(nil, ipc.Hello{Version: ipc.ProtocolVersion, Client: opts.Name})); err != nil {
		nc.Close()
		return nil, explainHandshake(opts.SocketPath, opts.DialTimeout.String(), err)
	}
	body, err := ipc.ReadFrame(br, nil, readBufSize)
	if err != nil {
		nc.Close()
		return nil, explainHandshake(opts.SocketPath, opts.DialTimeout.String(), err)
	}
	w, err := ipc.DecodeWelcome(body)
	if err != nil {
		if e, derr := ipc.DecodeError(body); derr == nil {
			err = e
		}
		nc.Close()
		return nil, explainHandshake(opts.SocketPath, opts.DialTimeout.String(), err)
	}
	nc.SetDeadline(time.Time{})
	cn := &conn{
		client: c, nc: nc, br: br, welcome: w,
		born:       time.Now(),
		deadCh:     make(chan struct{}),
		pending:    map[uint64]*call{},
		wbuf:       make([]byte, 0, 4096),
		spare:      make([]byte, 0, 4096),
		readToken:  make(chan struct{}, 1),
		readerWake: make(chan struct{}, 1),
	}
	cn.rInt.set, cn.wInt.set = nc.SetReadDeadline, nc.SetWriteDeadline
	cn.readToken <- struct{}{}
	c.wg.Add(1)
	go cn.backgroundReader()
	return cn, nil
}

// lifetime is how long a dead connection lived.
func (cn *conn) lifetime() time.Duration { return time.Duration(cn.life.Load()) }

// send registers cl and writes its CHECK. A request the daemon would refuse
// whole (more checks than max_batch, a frame above max_frame) is refused
// here as ErrInvalid before anything is queued: it would otherwise close
// the connection under every caller sharing it.
func (cn *conn) send(ctx context.Context, cl *call, checks []Check, deadline time.Time) error {
	if len(checks) > int(cn.welcome.MaxBatch) {
		return fmt.Errorf("%w: %d checks, daemon accepts at most %d", ErrInvalid, len(checks), cn.welcome.MaxBatch)
	}
	maxKey := int(cn.welcome.MaxKeyLen)
	return cn.write(ctx, cl, deadline, checksSize(checks, maxKey), func(b []byte, id uint64) []byte {
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

// write registers cl under a fresh id and queues the frame appendFrame
// appends; size is the frame body's length without the id. Concurrent
// writers append to one buffer; whoever finds no write in progress writes
// everything buffered, so requests from many callers leave in few system
// calls. The writer gives up at deadline or when ctx ends, handing what is
// left to a background flush, and returns nil: its await then reports the
// timeout (or the reply, if it came anyway).
func (cn *conn) write(ctx context.Context, cl *call, deadline time.Time, size int, appendFrame func(b []byte, id uint64) []byte) error {
	id := cn.nextID.Add(1)
	if body := size + uintSize(id); cn.welcome.MaxFrame > 0 && uint64(body) > cn.welcome.MaxFrame {
		return fmt.Errorf("%w: request of %d bytes, daemon accepts frames of at most %d", ErrInvalid, body, cn.welcome.MaxFrame)
	}
	cl.id, cl.err = id, nil
	cn.mu.Lock()
	if cn.dead.Load() {
		cn.mu.Unlock()
		return ErrDaemonDown
	}
	cn.pending[id] = cl
	cn.mu.Unlock()

	cn.wmu.Lock()
	if cn.flushing && len(cn.wbuf) >= maxQueued {
		cn.wmu.Unlock()
		cn.withdraw(cl)
		return errNotReading
	}
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
		n, err := cn.writeBy(ctx, cl, out, deadline)
		if errors.Is(err, ErrDaemonDown) { // the write failed, not the caller's time
			cn.wmu.Lock()
			cn.flushing = false
			cn.wmu.Unlock()
			// A partial frame may be on the wire: the connection is unusable.
			cn.fail(err)
			cn.withdraw(cl)
			return err
		}
		if err != nil {
			// This caller must go; what it took to write (perhaps half a
			// frame) must still go out, or the stream is corrupt.
			cn.client.wg.Add(1)
			go cn.finishFlush(out, n)
			return nil
		}
		cn.wmu.Lock()
		cn.spare = out[:0]
	}
	cn.flushing = false
	cn.wmu.Unlock()
	return nil
}

// withdraw takes back a call that was registered but not sent.
func (cn *conn) withdraw(cl *call) {
	if !cn.abandon(cl) {
		<-cl.done // fail claimed it; consume the signal so the call can be reused
	}
}

// writeBy writes b until done, deadline, or ctx's end, whichever is first.
// While ctx can end, the first wait is cut to pollEvery; a write still
// blocked after it (the daemon's socket buffer is full) arms the write
// interrupter, so that cancelling ctx ends it at once. It returns the bytes
// written, and ErrTimeout, ctx's error, or the write's failure.
func (cn *conn) writeBy(ctx context.Context, cl *call, b []byte, deadline time.Time) (int, error) {
	cancellable := ctx.Done() != nil
	defer cn.wInt.disarm()
	written := 0
	for {
		now := time.Now()
		if !now.Before(deadline) {
			return written, ErrTimeout
		}
		d := deadline
		if p := now.Add(pollEvery); cancellable && !cn.wInt.armed() && p.Before(d) {
			d = p
		}
		cn.nc.SetWriteDeadline(d)
		// After setting the deadline: an interruption that came before it is seen here.
		if err := ctx.Err(); err != nil {
			return written, err
		}
		n, err := cn.nc.Write(b[written:])
		written += n
		if err == nil {
			return written, nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return written, fmt.Errorf("%w: write: %w", ErrDaemonDown, err)
		}
		if cancellable && !cn.wInt.armed() {
			cn.wInt.arm(ctx, cl)
		}
	}
}

// writeStall is how long a background flush waits for the daemon to read
// before it declares the connection dead.
func (cn *conn) writeStall() time.Duration {
	return max(cn.client.opts.Timeout, cn.client.opts.DialTimeout, time.Second)
}

// finishFlush writes out[n:] and then whatever callers queued meanwhile,
// for a writer that had to return; the connection fails if the daemon does
// not take the bytes within writeStall.
func (cn *conn) finishFlush(out []byte, n int) {
	defer cn.client.wg.Done()
	stall := cn.writeStall()
	for {
		cn.nc.SetWriteDeadline(time.Now().Add(stall))
		if _, err := cn.nc.Write(out[n:]); err != nil {
			cn.wmu.Lock()
			cn.flushing = false
			cn.wmu.Unlock()
			cn.fail(fmt.Errorf("%w: write: the daemon did not read its socket within %s: %w", ErrDaemonDown, stall, err))
			return
		}
		cn.wmu.Lock()
		cn.spare = out[:0]
		if len(cn.wbuf) == 0 {
			cn.flushing = false
			cn.wmu.Unlock()
			return
		}
		out, n = cn.wbuf, 0
		cn.wbuf = cn.spare[:0]
		cn.wmu.Unlock()
	}
}

// await waits for cl's reply, reading it itself if nobody else is reading.
// It returns ErrTimeout or ctx's error if the reply does not come in time;
// otherwise the reply (or a connection failure) is in cl.
func (cn *conn) await(ctx context.Context, cl *call, deadline time.Time) error {
	select {
	case <-cn.readToken:
		return cn.readUntilDone(ctx, cl, deadline)
	default:
	}
	cl.timer.Reset(time.Until(deadline))
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

// pollEvery bounds the first wait of a read or write for a caller whose
// context can end; a longer wait arms an interrupter (see interrupter).
const pollEvery = 500 * time.Microsecond

// readUntilDone reads frames as the token holder until cl is answered or its
// deadline passes. While ctx can end, the first wait is cut to pollEvery;
// a read still waiting after it arms the read interrupter, so that
// cancelling ctx ends the wait at once.
func (cn *conn) readUntilDone(ctx context.Context, cl *call, deadline time.Time) error {
	cancellable := ctx.Done() != nil
	first := deadline
	if p := time.Now().Add(pollEvery); cancellable && p.Before(deadline) {
		first = p
	}
	cn.nc.SetReadDeadline(first)
	// A caller whose time ran out while it wrote does not read at all.
	err := ctx.Err()
	if err == nil && !time.Now().Before(deadline) {
		err = ErrTimeout
	}
	// The reply may already have been handed over by whoever held the token
	// before: look before reading, or this read could wait for a frame that
	// never comes.
	for err == nil && len(cl.done) == 0 {
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
		if !time.Now().Before(deadline) {
			err = ErrTimeout
			break
		}
		if cancellable && !cn.rInt.armed() {
			cn.rInt.arm(ctx, cl)
		}
		cn.nc.SetReadDeadline(deadline)
		// After setting the deadline: an interruption that came before it is seen here.
		if err = ctx.Err(); err != nil {
			break
		}
	}
	cn.rInt.disarm()
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
	if cn.dead.Load() {
		return
	}
	cn.life.Store(int64(time.Since(cn.born)))
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
		cn.client.connLost(err)
	}
}
