package main

// The protocol's test vectors (ipc/testdata/vectors.json, docs/PROTOCOL.md)
// replayed against real sluiced processes started as the file's setups
// say: what the spec shows is what the daemon does.

import (
	"bufio"
	be "encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/ipc"
)

// specVectors is the part of vectors.json a replay needs.
type specVectors struct {
	Servers map[string]struct {
		Rules     string   `json:"rules"`
		Sluiced   []string `json:"sluiced_args"`
		AllowUIDs []uint32 `json:"allow_uids"`
		IdleReapS float64  `json:"idle_reap_s"`
	} `json:"servers"`
	Vectors []specFrame `json:"vectors"`
}

type specFrame struct {
	Exchange string   `json:"exchange"`
	Step     int      `json:"step"`
	Server   string   `json:"server"`
	Conn     int      `json:"conn"`
	After    string   `json:"after"`
	Name     string   `json:"name"`
	From     string   `json:"from"`
	Hex      string   `json:"hex"`
	Closes   bool     `json:"closes"`
	Varies   []string `json:"varies"`
}

// TestSpecVectorsAgainstSluiced replays every exchange whose server is a
// sluiced setup against a sluiced process started with that setup's
// arguments, and compares each server frame with the file's: byte for byte,
// but for the fields the frame says vary (durations and balances, which
// move with the daemon's clock; an ERROR text quoting the client's uid).
// The exchange refused at the connection cap is left out: it needs the
// newcomer to arrive within sluiced's idle_reap (1 s) of the first
// connection's last frame, a race on a loaded machine.
func TestSpecVectorsAgainstSluiced(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../ipc/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var f specVectors
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	exchanges := map[string][]specFrame{}
	var order []string
	for _, v := range f.Vectors {
		if _, ok := exchanges[v.Exchange]; !ok {
			order = append(order, v.Exchange)
		}
		exchanges[v.Exchange] = append(exchanges[v.Exchange], v)
	}
	dir := tempDir(t)
	daemons := map[string]*specDaemon{} // one per setup, shared by its exchanges (their keys differ)
	replayed := 0
	for _, name := range order {
		frames := exchanges[name]
		setup, ok := f.Servers[frames[0].Server]
		switch {
		case !ok || len(setup.Sluiced) == 0:
			continue // not a sluiced setup
		case frames[0].Server == "sluiced-cap":
			continue // see above
		case slices.Contains(setup.AllowUIDs, uint32(os.Getuid())):
			continue // this test's own user would be admitted
		}
		shutsDown := slices.ContainsFunc(frames, func(v specFrame) bool { return v.After == "shutdown" })
		d := daemons[frames[0].Server]
		if d == nil || shutsDown {
			d = startSpecDaemon(t, filepath.Join(dir, fmt.Sprintf("d%d", len(order)+replayed)), setup.Rules, setup.Sluiced)
			if !shutsDown {
				daemons[frames[0].Server] = d
			}
		}
		t.Run(name, func(t *testing.T) { replaySpecExchange(t, d, frames) })
		replayed++
	}
	if replayed < 20 {
		t.Fatalf("replayed only %d exchanges against sluiced", replayed)
	}
}

type specDaemon struct {
	p    *proc
	path string
}

func startSpecDaemon(t *testing.T, dir, rules string, args []string) *specDaemon {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	args = slices.Clone(args)
	for i, a := range args {
		if a == "RULES_FILE" {
			args[i] = rulesPath
		}
	}
	p := startDaemon(t, append(args, "--socket", sock)...)
	// The socket is renamed into place once it listens: its presence, not
	// a connection (which would count against --max-conns 1), says ready.
	eventually(t, "sluiced listens", func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
	return &specDaemon{p: p, path: sock}
}

func replaySpecExchange(t *testing.T, d *specDaemon, frames []specFrame) {
	conns := map[int]*specConn{}
	defer func() {
		for _, c := range conns {
			c.nc.Close()
		}
	}()
	conn := func(n int) *specConn {
		if c := conns[n]; c != nil {
			return c
		}
		nc, err := net.Dial("unix", d.path)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		conns[n] = &specConn{nc: nc, br: bufio.NewReader(nc)}
		return conns[n]
	}
	for _, v := range frames {
		switch v.After {
		case "shutdown":
			if err := d.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		case "idle":
			// A precondition, not an outcome: sluiced reaps a connection
			// idle for 1 s, so the first must have idled that long.
			time.Sleep(1500 * time.Millisecond)
		}
		c := conn(v.Conn)
		want, err := hex.DecodeString(v.Hex)
		if err != nil {
			t.Fatal(err)
		}
		if v.From == "client" {
			c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.nc.Write(want); err != nil {
				t.Fatalf("step %d: send: %v", v.Step, err)
			}
			continue
		}
		got, err := c.read()
		if err != nil {
			t.Fatalf("step %d (%s): read: %v", v.Step, v.Name, err)
		}
		if err := sameFrame(got, want, v.Varies); err != nil {
			t.Errorf("step %d (%s): %v\n got  %x\n want %x", v.Step, v.Name, err, got, want)
		}
		if v.Closes {
			c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if n, err := c.br.Read(make([]byte, 1)); n > 0 || !(errors.Is(err, io.EOF) || err != nil && strings.Contains(err.Error(), "reset")) {
				t.Errorf("step %d: sluiced should have closed the connection (read %d bytes, %v)", v.Step, n, err)
			}
		}
	}
}

// sameFrame compares a server frame with the file's, leaving out the
// fields that vary.
func sameFrame(got, want []byte, varies []string) error {
	if len(varies) == 0 {
		if string(got) != string(want) {
			return errors.New("frames differ")
		}
		return nil
	}
	typ, _, err := ipc.PeekType(want[4:])
	if err != nil {
		return err
	}
	var g, w any
	switch typ {
	case ipc.MsgResult:
		var gr, wr ipc.Reply
		if err := ipc.DecodeReply(got[4:], &gr); err != nil {
			return err
		}
		if err := ipc.DecodeReply(want[4:], &wr); err != nil {
			return err
		}
		for _, r := range [][]ipc.Result{gr.Results, wr.Results} {
			for i := range r {
				r[i].RetryAfter, r[i].ResetAfter = 0, 0
			}
		}
		g, w = gr, wr
	case ipc.MsgBalance:
		gb, err := ipc.DecodeBalance(got[4:])
		if err != nil {
			return err
		}
		wb, err := ipc.DecodeBalance(want[4:])
		if err != nil {
			return err
		}
		gb.Balance, wb.Balance = 0, 0
		g, w = gb, wb
	case ipc.MsgError:
		ge, err := ipc.DecodeError(got[4:])
		if err != nil {
			return err
		}
		we, err := ipc.DecodeError(want[4:])
		if err != nil {
			return err
		}
		ge.Message, we.Message = "", ""
		g, w = *ge, *we
	default:
		return fmt.Errorf("unexpected message type %d with varying fields", typ)
	}
	if !reflect.DeepEqual(g, w) {
		return fmt.Errorf("messages differ: got %+v, want %+v", g, w)
	}
	return nil
}

type specConn struct {
	nc net.Conn
	br *bufio.Reader
}

func (c *specConn) read() ([]byte, error) {
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, 4)
	if _, err := io.ReadFull(c.br, hdr); err != nil {
		return nil, err
	}
	n := be.BigEndian.Uint32(hdr)
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	f := append(hdr, make([]byte, n)...)
	_, err := io.ReadFull(c.br, f[4:])
	return f, err
}
