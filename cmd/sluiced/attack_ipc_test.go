package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/ipc"
)

// Attacks on the daemon's socket by a local user, against the real binary:
// each test makes the attack, then checks that other clients are still
// served and that what the attacker can make the daemon spend (slots,
// memory, log lines, metric counts) stays within its bound.

// ipcRaw speaks the protocol by hand, as an attacker would.
type ipcRaw struct {
	c  net.Conn
	br *bufio.Reader
}

func ipcDial(t *testing.T, sock string) *ipcRaw {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(60 * time.Second)) // a hung test fails instead of hanging
	return &ipcRaw{c: c, br: bufio.NewReaderSize(c, 512)}
}

func (r *ipcRaw) read() (ipc.MsgType, []byte, error) {
	body, err := ipc.ReadFrame(r.br, nil, 1<<20)
	if err != nil {
		return 0, nil, err
	}
	typ, _, err := ipc.PeekType(body)
	return typ, body, err
}

// hello sends HELLO with the given client name and waits for WELCOME.
func (r *ipcRaw) hello(t *testing.T, name string) {
	t.Helper()
	if _, err := r.c.Write(ipc.AppendHello(nil, ipc.Hello{Version: ipc.ProtocolVersion, Client: name})); err != nil {
		t.Fatal(err)
	}
	if typ, body, err := r.read(); err != nil || typ != ipc.MsgWelcome {
		t.Fatalf("handshake: type %d err %v body %q", typ, err, body)
	}
}

// ipcMetric scrapes one unlabelled series from the admin endpoint.
func ipcMetric(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s at %s/metrics", name, admin)
	return 0
}

// ipcStart starts a daemon serving a socket in a fresh directory with its
// admin endpoint on a free port, and waits until it answers.
func ipcStart(t *testing.T, args ...string) (p *proc, sock, admin string) {
	t.Helper()
	dir := tempDir(t)
	sock = filepath.Join(dir, "d.sock")
	admin = "127.0.0.1:" + freePort(t)
	p = startDaemon(t, append([]string{"--socket", sock, "--admin-addr", admin}, args...)...)
	eventually(t, "the daemon serves its socket and admin endpoint", func() bool {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			return false
		}
		resp.Body.Close()
		_, err = os.Stat(sock)
		return err == nil
	})
	return p, sock, admin
}

// ipcServed reports whether a new client is served: connected and
// answered by the daemon (not failed open).
func ipcServed(sock string) bool {
	// Some of these daemons run as another user: trust it (and root).
	c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sock, Timeout: 5 * time.Second, DaemonUIDs: []uint32{0, 65534}})
	if err != nil {
		return false
	}
	defer c.Close()
	d := c.Allow(context.Background(), "default", "newcomer")
	return !d.FailedOpen && d.Limit > 0 // decided by the daemon, admitted or not
}

// A crowd of handshaken connections that then say nothing fills
// --max-conns; a new client is still served, because the longest-idle
// connection is closed to make room.
func TestIPCAttackIdleConnectionsDoNotLockOutNewClients(t *testing.T) {
	t.Parallel()
	const maxConns = 100
	_, sock, admin := ipcStart(t, "--max-conns", strconv.Itoa(maxConns))
	idlers := make([]*ipcRaw, 0, maxConns)
	for i := range maxConns {
		r := ipcDial(t, sock)
		r.hello(t, fmt.Sprint("idler-", i))
		idlers = append(idlers, r)
	}
	eventually(t, "the crowd fills every slot", func() bool { return ipcMetric(t, admin, "sluice_ipc_connections") == maxConns })
	start := time.Now()
	eventually(t, "a new client is served at the cap", func() bool { return ipcServed(sock) })
	t.Logf("newcomer served %s after the cap was filled by idle connections", time.Since(start).Round(time.Millisecond))
	if n := ipcMetric(t, admin, "sluice_ipc_connections_reaped_total"); n < 1 {
		t.Fatalf("sluice_ipc_connections_reaped_total = %v", n)
	}
	// A reaped connection is told why before it is closed.
	told := 0
	for _, r := range idlers {
		r.c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if typ, body, err := r.read(); err == nil && typ == ipc.MsgError {
			if e, err := ipc.DecodeError(body); err == nil && e.Code == ipc.CodeTooManyConns {
				told++
			}
		}
	}
	if told == 0 {
		t.Fatal("no idle connection was told it was closed to admit another")
	}
}

// Slow loris: connections that send part of a frame and stall are closed
// within the frame timeout (5 s), and do not lock new clients out meanwhile.
func TestIPCAttackSlowLorisPartialFrames(t *testing.T) {
	t.Parallel()
	const maxConns = 50
	_, sock, admin := ipcStart(t, "--max-conns", strconv.Itoa(maxConns))
	loris := make([]*ipcRaw, 0, maxConns)
	for i := range maxConns {
		r := ipcDial(t, sock)
		r.hello(t, "loris")
		part := []byte{0, 0, 0, 100, 0x93, 0x02} // a 100-byte frame, of which two bytes come
		if i%2 == 0 {
			part = part[:2] // half a length prefix
		}
		if _, err := r.c.Write(part); err != nil {
			t.Fatal(err)
		}
		loris = append(loris, r)
	}
	eventually(t, "a new client is served while the stalled frames hold every slot", func() bool { return ipcServed(sock) })
	start := time.Now()
	for i, r := range loris {
		r.c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := io.Copy(io.Discard, r.c) // until the daemon closes it
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("stalled connection %d still open after 30s", i)
		}
	}
	t.Logf("all %d stalled connections closed %s after the newcomer was served", maxConns, time.Since(start).Round(time.Millisecond))
	slow := ipcMetric(t, admin, "sluice_ipc_slow_frames_total")
	reaped := ipcMetric(t, admin, "sluice_ipc_connections_reaped_total")
	if slow+reaped < maxConns || slow < 1 {
		t.Fatalf("slow frames %v + reaped %v, want the %d stalled connections, some closed by the frame timeout", slow, reaped, maxConns)
	}
}

const ipcHammerEnv = "SLUICE_TEST_IPC_HAMMER_SOCKET"

// TestIPCHammerHelperProcess is not a test: the refused-user test runs
// the test binary as another user with this test selected. It opens
// connections as fast as it can until its stdin closes (at most 60 s and
// 400,000 connections), sends HELLO on each and never reads; it holds the
// first 1,000 open and closes the others at once. It prints how many it
// opened.
func TestIPCHammerHelperProcess(t *testing.T) {
	sock := os.Getenv(ipcHammerEnv)
	if sock == "" {
		t.Skip("helper process only")
	}
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	var mu sync.Mutex
	var held []net.Conn
	opened := 0
	var wg sync.WaitGroup
	giveUp := time.Now().Add(60 * time.Second)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50_000 && time.Now().Before(giveUp); i++ {
				select {
				case <-done:
					return
				default:
				}
				c, err := net.Dial("unix", sock)
				if err != nil {
					continue
				}
				c.Write(ipc.AppendHello(nil, ipc.Hello{Version: ipc.ProtocolVersion, Client: "hammer"}))
				mu.Lock()
				opened++
				if len(held) < 1000 {
					held = append(held, c)
					c = nil
				}
				mu.Unlock()
				if c != nil {
					c.Close()
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("hammer: opened %d\n", opened)
}

// Another local user, refused by --allow-uid, opens thousands of
// connections and never reads: the allowed clients are all served, none
// meets the cap, because refused peers are closed before they count.
func TestIPCAttackRefusedUserCannotLockOutAllowedClients(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	const nobody = 65534
	dir := tempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil { // the other user may reach the socket
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "d.sock")
	admin := "127.0.0.1:" + freePort(t)
	startDaemon(t, "--socket", sock, "--socket-mode", "0666", "--allow-uid", "0", "--max-conns", "10", "--admin-addr", admin)
	eventually(t, "the daemon serves", func() bool { return ipcServed(sock) })

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(dir, "hammer.test")
	if err := os.WriteFile(child, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(child, "-test.run=^TestIPCHammerHelperProcess$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), ipcHammerEnv+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	hammerDone := make(chan error, 1)
	go func() { hammerDone <- cmd.Wait() }()
	defer func() { stdin.Close(); cmd.Process.Kill(); <-hammerDone }()

	eventually(t, "the hammer is refused in earnest", func() bool {
		select {
		case err := <-hammerDone:
			t.Fatalf("the hammer ended early: %v\n%s", err, out.String())
		default:
		}
		return ipcMetric(t, admin, "sluice_ipc_peers_refused_total") >= 500
	})
	// Allowed clients come and go while the hammer runs: every one is
	// served. The hammer connects faster than the daemon accepts, so the
	// kernel's listen backlog is at times full and a connect then fails at
	// once (EAGAIN); clientlib retries such a connect within its dial
	// timeout. What is bounded is how long an allowed client waits.
	refusedBefore := ipcMetric(t, admin, "sluice_ipc_peers_refused_total")
	var worst time.Duration
	// At least 100 clients, and on until the hammer has been refused 1,000
	// times meanwhile (bounded: 5,000 clients), so they meet the hammer.
	served := 0
	enough := func() bool {
		switch {
		case served < 100:
			return false
		case served >= 5000:
			return true
		}
		return ipcMetric(t, admin, "sluice_ipc_peers_refused_total")-refusedBefore >= 1000
	}
	for ; !enough(); served++ {
		i := served
		start := time.Now()
		c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sock, Timeout: 5 * time.Second, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("allowed client %d not served within 5s while a refused user hammers the socket: %v", i, err)
		}
		d := c.Allow(context.Background(), "default", "allowed")
		c.Close()
		if d.FailedOpen || d.Limit == 0 {
			t.Fatalf("allowed client %d not decided while a refused user hammers the socket: %+v", i, d)
		}
		worst = max(worst, time.Since(start))
	}
	refusedDuring := ipcMetric(t, admin, "sluice_ipc_peers_refused_total") - refusedBefore
	if refusedDuring == 0 {
		t.Fatal("the hammer stopped before the allowed clients were tried: the test proves nothing")
	}
	stdin.Close()
	select {
	case err := <-hammerDone:
		hammerDone <- err
		if err != nil {
			t.Fatalf("hammer: %v\n%s", err, out.String())
		}
	case <-time.After(70 * time.Second):
		t.Fatal("the hammer did not finish")
	}
	if n := ipcMetric(t, admin, "sluice_ipc_connections_refused_total"); n != 0 {
		t.Fatalf("%v connections refused at the cap: refused peers took slots", n)
	}
	t.Logf("%s; %v refused while %d allowed clients were served, the slowest in %s",
		strings.TrimSpace(out.String()), refusedDuring, served, worst.Round(time.Millisecond))
}

// A client sending a 1 MB HELLO, 60 KiB client names full of newlines and
// terminal escapes, bad requests and garbage frames, over hundreds of
// connections, makes a handful of log lines, none long, none forged.
func TestIPCAttackCannotAmplifyLogs(t *testing.T) {
	t.Parallel()
	p, sock, admin := ipcStart(t, "--log-level", "debug", "--max-conns", "1000")
	before := strings.Count(p.stderr.String(), "\n")
	name := strings.Repeat("\n2026-01-01T00:00:00.000Z [ERROR] sluiced: forged line \x1b[31m", 1000) // ~60 KB
	const conns = 300
	for i := range conns {
		r := ipcDial(t, sock)
		if i%10 == 0 { // a 1 MB HELLO: refused at its length prefix
			r.c.Write([]byte{0, 0x10, 0, 0})
			r.c.Write(bytes.Repeat([]byte{'x'}, 4096))
			continue
		}
		r.hello(t, name)
		var b []byte
		b = ipc.AppendReport(b, ipc.Report{FailedOpen: 1})
		b = ipc.AppendRequest(b, 1, []ipc.Check{{Rule: []byte("default"), Key: nil, Cost: 1}}) // empty key: refused
		b = append(b, 0, 0, 0, 3, 0xc1, 0xc1, 0xc1)                                            // not msgpack: closed
		r.c.Write(b)
	}
	eventually(t, "every bad connection is dealt with", func() bool {
		return ipcMetric(t, admin, "sluice_ipc_protocol_errors_total") >= conns
	})
	lines := strings.Split(p.stderr.String(), "\n")
	added := lines[before:]
	if len(added) > 12 {
		t.Fatalf("%d connections of abuse made %d log lines, want at most 12:\n%s", conns, len(added), strings.Join(added, "\n"))
	}
	for _, l := range added {
		if len(l) > 1000 {
			t.Fatalf("a log line of %d bytes: client strings are not bounded: %.300q", len(l), l)
		}
		// The forged text may appear, escaped, inside a value: never as
		// a line of its own, and never with a raw escape or newline.
		if strings.HasPrefix(l, "2026-01-01") || strings.Contains(l, "\x1b") || strings.Contains(l, " [ERROR] ") && !strings.Contains(l, `client=`) {
			t.Fatalf("a client forged or coloured a log line: %q", l)
		}
	}
	t.Logf("%d abusive connections made %d log lines:\n%s", conns, len(added), strings.Join(added, "\n"))
}

// A REPORT claiming 2^63 failed-open calls moves
// sluice_client_failed_open_total by no more than the report budget
// (10M at once, 1M/s), and is logged with the client's name and uid.
func TestIPCAttackReportCannotPoisonFailedOpenMetric(t *testing.T) {
	t.Parallel()
	p, sock, admin := ipcStart(t)
	start := time.Now()
	for i := range 20 {
		r := ipcDial(t, sock)
		r.hello(t, "liar")
		var b []byte
		for range 10 {
			b = ipc.AppendReport(b, ipc.Report{FailedOpen: 1 << 63, FailedClosed: 1 << 63})
		}
		b = ipc.AppendRequest(b, uint64(i+1), []ipc.Check{{Rule: []byte("default"), Key: []byte("k"), Cost: 1}})
		r.c.Write(b)
		if typ, _, err := r.read(); err != nil || typ != ipc.MsgResult { // the reports before it are taken
			t.Fatalf("after the reports: type %d err %v", typ, err)
		}
	}
	bound := float64(ipc.DefaultMaxReportBurst) + float64(ipc.DefaultMaxReportRate)*time.Since(start).Seconds()
	open := ipcMetric(t, admin, "sluice_client_failed_open_total")
	closed := ipcMetric(t, admin, "sluice_client_failed_closed_total")
	if open+closed > bound {
		t.Fatalf("reports moved failed_open %v + failed_closed %v, beyond the budget %v", open, closed, bound)
	}
	if c := ipcMetric(t, admin, "sluice_client_reports_clamped_total"); c < 1<<63 {
		t.Fatalf("sluice_client_reports_clamped_total = %v", c)
	}
	log := p.stderr.String()
	if !strings.Contains(log, "client report exceeds the report budget") || !strings.Contains(log, "client=liar uid=0") && os.Getuid() == 0 {
		t.Fatalf("the clamped report is not logged with its client and uid:\n%s", log)
	}
	t.Logf("200 reports of 2^63 calls each moved the counts by %v (bound %v)", open+closed, bound)
}

// ipcMemory is the daemon's heap and stack in use, and its resident set.
// The daemon must run with --pprof: a heap profile with gc=1 makes it
// collect its garbage first, so what is measured is what it holds.
func ipcMemory(t *testing.T, p *proc, admin string) (heapStack, rss float64) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/debug/pprof/heap?gc=1")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("heap profile (to collect garbage): %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	heapStack = ipcMetric(t, admin, "go_memstats_heap_inuse_bytes") + ipcMetric(t, admin, "go_memstats_stack_inuse_bytes")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return heapStack, math.NaN()
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			rss = kb * 1024
		}
	}
	return heapStack, rss
}

// ipcIdleConnBound is the memory (heap and stack) the README states one
// idle connection may hold in the daemon, whatever frames it sent before;
// ipcLargeFrameBound is what one large frame (beyond the 4 KiB read
// buffer) may hold while it arrives, at most ipc's default MaxLargeFrames
// (128) of them at once. So at the default --max-conns (4096) and
// --max-frame (64 KiB): 4096 × 16 KiB + 128 × 72 KiB = 73 MiB at most.
const (
	ipcIdleConnBound   = 16 << 10
	ipcLargeFrameBound = 72 << 10
	ipcMaxLargeFrames  = 128
)

// Memory under attack: 2,000 connections each send a frame of nearly the
// maximum size and then idle; the daemon gives the large buffers back.
// Then 500 connections each send most of a maximum frame and stall: at
// most 128 of those frames are held at once, the others wait in the
// kernel's socket buffers, and the frame timeout closes them all.
func TestIPCAttackMemoryStaysBounded(t *testing.T) {
	t.Parallel()
	const idle, stalled = 2000, 500
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < idle+stalled+200 {
		t.Skipf("needs %d file descriptors (limit %d)", idle+stalled+200, lim.Cur)
	}
	p, sock, admin := ipcStart(t, "--pprof")
	var warm []byte
	warm = ipc.AppendRequest(warm, 1, []ipc.Check{{Rule: []byte("default"), Key: []byte("k"), Cost: 1}})
	r0 := ipcDial(t, sock) // warm the request path up before the baseline
	r0.hello(t, "warm")
	r0.c.Write(warm)
	r0.read()
	hs0, rss0 := ipcMemory(t, p, admin)

	big := ipc.AppendRequest(nil, 1, []ipc.Check{{Rule: []byte("default"), Key: bytes.Repeat([]byte("k"), 60<<10), Cost: 1}})
	conns := make([]*ipcRaw, 0, idle)
	for range idle {
		r := ipcDial(t, sock)
		r.hello(t, "idler")
		r.c.Write(big)
		if typ, _, err := r.read(); err != nil || typ != ipc.MsgError { // key too long
			t.Fatalf("big frame: type %d err %v", typ, err)
		}
		conns = append(conns, r)
	}
	eventually(t, "every idle connection is open", func() bool { return ipcMetric(t, admin, "sluice_ipc_connections") >= idle })
	hs1, rss1 := ipcMemory(t, p, admin)
	perIdle := (hs1 - hs0) / idle
	t.Logf("idle after a 60 KiB frame: heap+stack %.0f B/connection, RSS %.0f B/connection (%d connections); at --max-conns 4096: %.1f MiB",
		perIdle, (rss1-rss0)/idle, idle, perIdle*4096/(1<<20))
	if perIdle > ipcIdleConnBound {
		t.Errorf("%.0f bytes of heap and stack per idle connection, bound %d", perIdle, ipcIdleConnBound)
	}

	stall := big[:60<<10] // most of a maximum frame, then nothing
	for range stalled {
		r := ipcDial(t, sock)
		r.hello(t, "staller")
		r.c.Write(stall)
		conns = append(conns, r)
	}
	// Measure once all are open, or once the first has met the frame
	// timeout (5s; opening them all may take longer on a loaded machine):
	// the bound holds at every moment.
	eventually(t, "every stalled connection is open", func() bool {
		return ipcMetric(t, admin, "sluice_ipc_connections") >= idle+stalled || ipcMetric(t, admin, "sluice_ipc_slow_frames_total") > 0
	})
	hs2, rss2 := ipcMemory(t, p, admin)
	bound := float64(stalled*ipcIdleConnBound + ipcMaxLargeFrames*ipcLargeFrameBound)
	t.Logf("%d connections stalled in 60 KiB of a frame: heap+stack %.1f MiB (%.0f B/connection), RSS %.1f MiB; bound %.1f MiB",
		stalled, (hs2-hs1)/(1<<20), (hs2-hs1)/stalled, (rss2-rss1)/(1<<20), bound/(1<<20))
	if hs2-hs1 > bound {
		t.Errorf("stalled large frames hold %.0f bytes, bound %.0f", hs2-hs1, bound)
	}
	eventually(t, "the frame timeout closes the stalled connections", func() bool {
		return ipcMetric(t, admin, "sluice_ipc_slow_frames_total") >= stalled
	})
	for _, r := range conns {
		r.c.Close()
	}
}

// A socket directory another local user could write to, or one they own,
// is refused at start with a clear error and exit status 1; a missing one
// is created 0750.
func TestIPCAttackUnsafeSocketDirIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	base := tempDir(t)
	mk := func(name string, mode os.FileMode, owner int) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, mode)
		if owner >= 0 {
			if err := os.Chown(d, owner, owner); err != nil {
				t.Skipf("cannot give a directory away: %v", err)
			}
		}
		return d
	}
	tests := []struct {
		name string
		dir  func() string
		want string
	}{
		{"world-writable", func() string { return mk("open", 0o777, -1) }, "writable by users other than its owner"},
		{"sticky and world-writable, like /tmp", func() string { return mk("sticky", 0o777|os.ModeSticky, -1) }, "writable by users other than its owner"},
		{"group-writable", func() string { return mk("group", 0o770, -1) }, "writable by users other than its owner"},
		{"under a world-writable parent", func() string { return filepath.Join(mk("parent", 0o777, -1), "sub") }, "writable by others and not sticky"},
		{"owned by another user", func() string {
			if os.Getuid() != 0 {
				t.Skip("needs root to give a directory away")
			}
			return mk("theirs", 0o755, 65534)
		}, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir()
			sock := filepath.Join(dir, "d.sock")
			cmd := exec.Command(binary, "--socket", sock, "--admin-addr", "")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "unsafe socket directory") || !strings.Contains(string(out), tt.want) {
				t.Fatalf("sluiced --socket %s: err %v, output %q; want exit 1 naming the unsafe directory (%q)", sock, err, out, tt.want)
			}
			if _, err := os.Lstat(sock); err == nil {
				t.Fatal("a socket was made in a directory that was refused")
			}
		})
	}
	t.Run("a missing directory is made private", func(t *testing.T) {
		sock := filepath.Join(base, "fresh", "d.sock")
		startDaemon(t, "--socket", sock, "--admin-addr", "")
		eventually(t, "the daemon serves", func() bool { return ipcServed(sock) })
		st, err := os.Stat(filepath.Dir(sock))
		if err != nil || st.Mode().Perm() != 0o750 {
			t.Fatalf("made the socket directory with mode %v (%v), want 0750", st.Mode(), err)
		}
	})
}

// A clean shutdown under load and a peer's graceful leave log nothing at
// ERROR level, on either side, even as the survivor keeps trying to
// reach the member that left and then shuts down in turn.
func TestIPCShutdownAndLeaveLogNoErrors(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	portA, portB := freePort(t), freePort(t)
	sockA, sockB := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	key := secureKeyFile(t, dir, "c2x1aWNlLXRlc3Qta2V5LQ==")
	pa := startDaemon(t, "--socket", sockA, "--bind", "127.0.0.1:"+portA, "--node-name", "a", "--admin-addr", "", "--gossip-interval", "10ms", "--log-level", "debug",
		"--gossip-key-file", key)
	pb := startDaemon(t, "--socket", sockB, "--bind", "127.0.0.1:"+portB, "--join", "127.0.0.1:"+portA,
		"--node-name", "b", "--admin-addr", "", "--gossip-interval", "10ms", "--log-level", "debug", "--gossip-key-file", key)
	eventually(t, "a and b see each other", func() bool {
		return strings.Contains(pa.stderr.String(), "member joined: name=b") && strings.Contains(pb.stderr.String(), "member joined: name=a")
	})
	ca := clientlib.New(clientlib.Options{SocketPath: sockA, Timeout: 2 * time.Second})
	defer ca.Close()
	cb := clientlib.New(clientlib.Options{SocketPath: sockB, Timeout: 2 * time.Second})
	defer cb.Close()
	eventually(t, "the clients connect", func() bool { return ca.Up() && cb.Up() })
	stopA, stopB := loadCallers(ca, 4, nil), loadCallers(cb, 4, nil)
	var stopBOnce sync.Once
	defer stopBOnce.Do(stopB)
	eventually(t, "both decide some of the load", func() bool { return ca.Stats().Decisions > 500 && cb.Stats().Decisions > 500 })

	pa.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-pa.exited:
		pa.exited <- err
		if err != nil {
			t.Fatalf("a's exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a did not exit within 20s of SIGTERM")
	}
	stopA()
	eventually(t, "b hears that a left", func() bool { return strings.Contains(pb.stderr.String(), "member left or died: name=a") })
	// b tries to rejoin the member that went away every 5s: let it try.
	eventually(t, "b has tried to reach a again", func() bool { return strings.Contains(pb.stderr.String(), "failed to join 127.0.0.1:"+portA) })
	stopBOnce.Do(stopB)
	pb.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-pb.exited:
		pb.exited <- err
		if err != nil {
			t.Fatalf("b's exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("b did not exit within 20s of SIGTERM")
	}
	for name, p := range map[string]*proc{"a": pa, "b": pb} {
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if strings.Contains(l, "[ERROR]") {
				t.Errorf("%s logged at ERROR during a clean shutdown or a peer's leave: %s", name, l)
			}
		}
	}
}

// The README's quick start for an unprivileged user: with no flags and no
// $XDG_RUNTIME_DIR, the daemon serves $TMPDIR/sluice-UID/sluiced.sock in a
// directory it makes 0750, even under a shared sticky $TMPDIR; if another
// user made that directory first, it refuses to start and says so.
func TestIPCDefaultSocketDirIsPrivateForAnUnprivilegedUser(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to run the daemon as another user")
	}
	const nobody, other = 65534, 65533
	tmp := tempDir(t)
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil { // a shared $TMPDIR, as /tmp
		t.Fatal(err)
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(tmp, "sluiced")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func() *exec.Cmd {
		cmd := exec.Command(exe, "--admin-addr", "")
		cmd.Env = []string{"TMPDIR=" + tmp, "PATH=" + os.Getenv("PATH")}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		return cmd
	}
	dir := filepath.Join(tmp, fmt.Sprint("sluice-", nobody))
	sock := filepath.Join(dir, "sluiced.sock")

	cmd := run()
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	eventually(t, "the daemon serves the default socket", func() bool { return strings.Contains(stderr.String(), "socket="+sock) && ipcServed(sock) })
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o750 || st.Sys().(*syscall.Stat_t).Uid != nobody {
		t.Fatalf("default socket directory: %v (%v), want 0750 owned by uid %d", st.Mode(), err, nobody)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}

	// Another user got there first.
	os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(dir, other, other)
	out, err := run().CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "unsafe socket directory") || !strings.Contains(string(out), fmt.Sprintf("owned by uid %d", other)) {
		t.Fatalf("with %s made by uid %d first: err %v, output %q; want exit 1 naming the directory and its owner", dir, other, err, out)
	}
}
