package clientlib

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice/ipc"
)

// call is one request awaiting its reply. Calls are pooled: a call is reused
// only after its caller has consumed the single signal on done, or has
// removed it from the pending map before any reader could claim it.
type call struct {
	id    uint64
	done  chan struct{}
	timer *time.Timer
	reply ipc.Reply
	err   error
}

// conn is one connection to the daemon: callers write frames under wmu, one
// reader goroutine dispatches replies to pending calls by id.
type conn struct {
	client  *Client
	nc      net.Conn
	welcome ipc.Welcome
	dead    atomic.Bool
	nextID  atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]*call

	wmu      sync.Mutex
	wbuf     []byte // frames waiting to be written
	spare    []byte
	flushing bool
}

// dial connects and completes the handshake within opts.DialTimeout.
func dial(c *Client, opts Options) (*conn, error) {
	nc, err := net.DialTimeout("unix", opts.SocketPath, opts.DialTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDaemonDown, err)
	}
	nc.SetDeadline(time.Now().Add(opts.DialTimeout))
	br := bufio.NewReaderSize(nc, 16<<10)
	if _, err := nc.Write(ipc.AppendHello(nil, ipc.Hello{Version: ipc.ProtocolVersion, Client: opts.Name})); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: handshake: %w", ErrDaemonDown, err)
	}
	body, err := ipc.ReadFrame(br, nil, 1<<20)
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
	cn := &conn{client: c, nc: nc, welcome: w, pending: map[uint64]*call{}, wbuf: make([]byte, 0, 4096), spare: make([]byte, 0, 4096)}
	c.wg.Add(1)
	go cn.readLoop(br, int(w.MaxFrame))
	return cn, nil
}

// send registers cl and writes its request. Concurrent senders append to one
// buffer; whoever finds no write in progress writes everything buffered, so
// requests from many callers leave in few system calls.
func (cn *conn) send(cl *call, checks []Check, timeout time.Duration) error {
	if len(checks) > int(cn.welcome.MaxBatch) {
		return fmt.Errorf("%w: %d checks, daemon accepts at most %d", ErrProtocol, len(checks), cn.welcome.MaxBatch)
	}
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
	b, start := ipc.BeginRequest(cn.wbuf, id, len(checks))
	for _, ch := range checks {
		b = ipc.AppendCheck(b, ch.Rule, ch.Key, uint64(ch.Cost))
	}
	cn.wbuf = ipc.FinishFrame(b, start)
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

// abandon removes a call whose caller gave up. It reports false if the
// reader (or fail) has already claimed the call and will signal it.
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

func (cn *conn) readLoop(br *bufio.Reader, maxFrame int) {
	defer cn.client.wg.Done()
	var frame []byte
	var rep ipc.Reply
	for {
		body, err := ipc.ReadFrame(br, frame, max(maxFrame, 1<<16))
		if err != nil {
			cn.fail(fmt.Errorf("%w: read: %w", ErrDaemonDown, err))
			return
		}
		frame = body[:0]
		typ, _, err := ipc.PeekType(body)
		if err != nil {
			cn.fail(fmt.Errorf("%w: %w", ErrProtocol, err))
			return
		}
		switch typ {
		case ipc.MsgResult:
			if err := ipc.DecodeReply(body, &rep); err != nil {
				cn.fail(fmt.Errorf("%w: %w", ErrProtocol, err))
				return
			}
			if cl := cn.claim(rep.ID); cl != nil { // nil: its caller timed out
				cl.reply.ID, cl.reply.Allowed = rep.ID, rep.Allowed
				cl.reply.Results = append(cl.reply.Results[:0], rep.Results...)
				cl.done <- struct{}{}
			}
		case ipc.MsgError:
			e, err := ipc.DecodeError(body)
			if err != nil {
				cn.fail(fmt.Errorf("%w: %w", ErrProtocol, err))
				return
			}
			if e.ID == 0 { // the daemon is closing this connection
				cn.fail(fmt.Errorf("%w: %w", ErrDaemonDown, e))
				return
			}
			if cl := cn.claim(e.ID); cl != nil {
				cl.err = e
				cl.done <- struct{}{}
			}
		default:
			cn.fail(fmt.Errorf("%w: unexpected message type %d", ErrProtocol, typ))
			return
		}
	}
}

// fail marks the connection dead, closes it and fails every pending call.
func (cn *conn) fail(err error) {
	if cn.dead.Swap(true) {
		return
	}
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
