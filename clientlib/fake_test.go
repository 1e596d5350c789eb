package clientlib

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicelabs/sluice/ipc"
)

// fakeDaemon is a socket that completes the handshake with welcome and then
// hands each connection to behave: a daemon that misbehaves on purpose.
type fakeDaemon struct {
	l       net.Listener
	accepts atomic.Int64
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
}

var fakeWelcome = ipc.Welcome{Version: ipc.ProtocolVersion, Server: "fake", MaxFrame: 64 << 10, MaxBatch: 16, MaxKeyLen: 256}

func startFake(t *testing.T, path string, welcome ipc.Welcome, behave func(c net.Conn, br *bufio.Reader)) *fakeDaemon {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeDaemon{l: l}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.accepts.Add(1)
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				br := bufio.NewReader(c)
				if _, err := ipc.ReadFrame(br, nil, 1<<20); err != nil {
					c.Close()
					return
				}
				if _, err := c.Write(ipc.AppendWelcome(nil, welcome)); err != nil {
					c.Close()
					return
				}
				behave(c, br)
			}()
		}
	}()
	t.Cleanup(f.close)
	return f
}

func (f *fakeDaemon) close() {
	f.l.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// Behaviours of a fake daemon after the handshake.
var (
	hangUp    = func(c net.Conn, _ *bufio.Reader) { c.Close() }
	neverRead = func(net.Conn, *bufio.Reader) {}
	// readSilently reads every request and answers none.
	readSilently = func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := ipc.ReadFrame(br, nil, 64<<20); err != nil {
				return
			}
		}
	}
)
