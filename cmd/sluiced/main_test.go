package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// These tests run the real binary, as operators and services meet it.

var binary string

func TestMain(m *testing.M) {
	if os.Getenv(ipcHammerEnv) != "" { // a helper process (attack_ipc_test.go), maybe as another user: no binary needed
		os.Exit(m.Run())
	}
	flag.Parse()
	defaultParallel()
	dir, err := os.MkdirTemp("", "sluiced-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sluiced")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		panic("build sluiced: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// parallelTests is how many of the tests that call t.Parallel run at once
// when go test's -parallel is not given. Those tests mostly wait: on the
// processes they start, on timers and gossip rounds, on the daemon's frame
// and header deadlines; GOMAXPROCS of them at once (go test's default, 2 on
// a two-core machine) leaves the package near go test's 10-minute limit on
// a loaded machine. The timing and accuracy tests do not call t.Parallel:
// go test runs them first, one at a time, before any parallel test starts.
const parallelTests = 4

// defaultParallel sets -test.parallel to parallelTests unless the command
// line set it (or GOMAXPROCS is higher).
func defaultParallel() {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(max(parallelTests, runtime.GOMAXPROCS(0))))
	}
}

type proc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startDaemon(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	// No admin endpoint unless a test asks for one with --admin-addr: a taken
	// address is an error, and tests (and test runs) share the machine.
	cmd.Env = append(os.Environ(), "SLUICE_ADMIN_ADDR=")
	return startProc(t, cmd)
}

// startProc starts cmd, collecting its stderr, and kills it when the test
// ends.
func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// eventually polls cond every few milliseconds until it holds, failing after
// 45 s: a bound for a hung daemon, far above what a condition takes on a 2-core
// machine running the whole suite beside other work (15 s was seen to run out).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(45 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out after 45s waiting until %s", what)
		}
	}
}

// holdRetry is the longest retry-after allowFresh asks again after: a
// key new to a cluster is held to this node's share of its burst for one
// propagation delay (issue 20's first-contact hold: tens of milliseconds
// here), while a refusal by a test's slow rules says minutes.
const holdRetry = 500 * time.Millisecond

// allowFresh asks c for one token of rule/key, asking again, for up to
// 15 s, while the refusal is the first-contact hold's. Whether the hold
// applies depends on when the daemon last counted its members, so tests
// that spend a fresh key's burst in a cluster go through here.
func allowFresh(c *clientlib.Client, rule, key string) bool {
	deadline := time.Now().Add(15 * time.Second)
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for {
		d := c.Allow(context.Background(), rule, key)
		if d.Allowed || d.FailedOpen || d.RetryAfter > holdRetry || time.Now().After(deadline) {
			return d.Allowed && !d.FailedOpen
		}
		<-poll.C
	}
}

func tempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestRunsOnEmbeddedDefaultsWithNoFlags(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	sock := filepath.Join(dir, "sluice", "sluiced.sock")
	// No flags and no files: the default socket comes from the environment.
	cmd := exec.Command(binary)
	// The admin port is the one thing not left to its default: 9464 may be
	// taken by another run of these tests, which is an error at start.
	cmd.Env = []string{"XDG_RUNTIME_DIR=" + dir, "PATH=" + os.Getenv("PATH"), "SLUICE_ADMIN_ADDR=127.0.0.1:0"}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { cmd.Process.Kill(); <-exited }()

	eventually(t, "the startup log names the socket", func() bool { return strings.Contains(stderr.String(), "socket="+sock) })
	c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sock, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := c.Allow(context.Background(), "default", "k"); d.FailedOpen || !d.Allowed || d.Limit != 100 {
		t.Fatalf("decision on embedded defaults: %+v", d)
	}
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v (%v), want 0660", st.Mode(), err)
	}
}

func TestSighupReloadsAndSigtermShutsDownGracefully(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	sock, rules := filepath.Join(dir, "d.sock"), filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte("rules:\n  r:\n    rate: 2/1h\n"), 0o600)
	p := startDaemon(t, "--socket", sock, "--rules", rules, "--log-level", "debug")
	var c *clientlib.Client
	eventually(t, "the daemon accepts a client", func() bool {
		var err error
		c, err = clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sock, Timeout: 5 * time.Second})
		return err == nil
	})
	defer c.Close()
	ctx := context.Background()
	c.Allow(ctx, "r", "k")
	c.Allow(ctx, "r", "k")
	if d := c.Allow(ctx, "r", "k"); d.Allowed {
		t.Fatalf("third request on 2/1h admitted: %+v", d)
	}

	// A bad file is refused and logged with its line; the rules stay.
	os.WriteFile(rules, []byte("rules:\n  r:\n    rate: 4/1h\n    burts: 9\n"), 0o600)
	p.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the failed reload is logged", func() bool {
		return strings.Contains(p.stderr.String(), "rules.yaml:4:12: rules.r.burts: unknown field")
	})
	if d := c.Allow(ctx, "r", "k"); d.Allowed || d.Limit != 2 {
		t.Fatalf("after a bad reload: %+v", d)
	}
	// A good file doubles the limit; the bucket keeps its (rescaled) balance.
	os.WriteFile(rules, []byte("rules:\n  r:\n    rate: 4/1h\n"), 0o600)
	p.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the new limit is in force", func() bool { return c.Allow(ctx, "r", "probe").Limit == 4 })
	if d := c.Allow(ctx, "r", "k"); d.Allowed {
		t.Fatalf("reload reset the bucket: %+v", d)
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit within 15s of SIGTERM")
	}
	p.exited <- nil // for the cleanup
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after SIGTERM: %v", err)
	}
}

func TestKill9FailsOpenThenRestartReplacesStaleSocket(t *testing.T) {
	dir := tempDir(t)
	sock := filepath.Join(dir, "d.sock")
	p := startDaemon(t, "--socket", sock)
	eventually(t, "the socket appears", func() bool { _, err := os.Stat(sock); return err == nil })
	c := clientlib.New(clientlib.Options{SocketPath: sock, Timeout: 50 * time.Millisecond, ReconnectMin: 5 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	defer c.Close()
	eventually(t, "the client connects", c.Up)

	// Load from 8 callers until told to stop, bounded in count and time.
	var mu sync.Mutex
	worst := time.Duration(0)
	stopLoad := loadCallers(c, 8, func(_ int, took time.Duration, d clientlib.Decision) {
		if d.FailedOpen {
			mu.Lock()
			worst = max(worst, took)
			mu.Unlock()
		}
	})
	eventually(t, "the daemon has decided some of the load", func() bool { return c.Stats().Decisions > 500 })
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	p.exited <- nil
	eventually(t, "calls fail open", func() bool { return c.Stats().FailedOpen > 0 && !c.Up() })

	// The dead daemon left its socket file behind; a new one replaces it.
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("expected a stale socket after kill -9: %v", err)
	}
	decidedBefore := c.Stats().Decisions
	startDaemon(t, "--socket", sock)
	eventually(t, "the client reconnects and the load is decided again", func() bool {
		return c.Stats().Decisions > decidedBefore+500
	})
	stopLoad()
	mu.Lock()
	defer mu.Unlock()
	// Fail-open calls return within the deadline plus scheduling slack.
	if worst > 2*time.Second {
		t.Fatalf("a failed-open call took %s", worst)
	}
	t.Logf("stats %+v; slowest failed-open call %s", c.Stats(), worst)
}

func TestBadFlagsAndRulesExitNonZero(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  r:\n    rate: nope\n"), 0o600)
	notDir := filepath.Join(dir, "plain-file") // a socket directory that cannot be made
	os.WriteFile(notDir, nil, 0o600)
	long := filepath.Join(dir, strings.Repeat("d", 120), "s.sock") // beyond a Unix socket address
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--socket", filepath.Join(dir, "s"), "--rules", bad}, "bad.yaml:3:11: rules.r.rate"},
		{[]string{"--socket", filepath.Join(notDir, "d.sock")}, "not a directory"},
		{[]string{"--socket", long}, "path too long"},
		{[]string{"--socket", filepath.Join(dir, "s"), "--log-level", "loud"}, "--log-level"},
		{[]string{"--socket", filepath.Join(dir, "s"), "--socket-mode", "rw"}, "--socket-mode"},
		{[]string{"--socket", filepath.Join(dir, "s"), "--max-batch", "0"}, "max batch"},
		{[]string{"--socket", filepath.Join(dir, "s"), "--allow-uid", "no-such-user-q7"}, `--allow-uid "no-such-user-q7"`},
		{[]string{"--socket", filepath.Join(dir, "s"), "--allow-gid", "4294967295"}, "allowed gid 4294967295"},
		{[]string{"--socket", filepath.Join(dir, "s"), "--admin-addr", "", "--first-contact", "herd"}, `--first-contact: first contact "herd": want auto, token or share`},
		{[]string{"--socket", filepath.Join(dir, "s"), "--admin-addr", "", "--aggregate-above", "many"}, `invalid value "many" for flag -aggregate-above`},
	}
	for _, tt := range tests {
		out, err := exec.Command(binary, tt.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("sluiced %v: err %v, output %q, want it to mention %q", tt.args, err, out, tt.want)
		}
	}
}

// freePort returns a port free for TCP and UDP on 127.0.0.1, chosen at
// random below the kernel's ephemeral range: a port the kernel hands out
// for port 0 (or for any outgoing connection, of this test run or of
// another one beside it) can be taken again the moment it is released,
// and a daemon told to bind it then fails. Ports are not handed out twice
// in one test run.
func freePort(t *testing.T) string {
	t.Helper()
	low := ephemeralLow()
	freePorts.mu.Lock()
	defer freePorts.mu.Unlock()
	for range 200 {
		port := 10000 + rand.IntN(low-10000)
		if freePorts.given[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		if u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			u.Close()
			freePorts.given[port] = true
			return fmt.Sprint(port)
		}
	}
	t.Fatal("no free port")
	return ""
}

// freePorts are the ports freePort has handed out in this test run.
var freePorts = struct {
	mu    sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read), at least 20000.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	return max(low, 20000)
}

// Two real processes form a cluster; the second starts first and keeps
// retrying its join in the background while already serving its socket.
func TestTwoProcessesShareALimit(t *testing.T) {
	dir := tempDir(t)
	rules := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte("rules:\n  r:\n    rate: 5/1h\n"), 0o600)
	portA, portB := freePort(t), freePort(t)
	sockA, sockB := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	key := secureKeyFile(t, dir, "c2x1aWNlLXRlc3Qta2V5LQ==") // 16 bytes
	startDaemon(t, "--socket", sockB, "--rules", rules, "--bind", "127.0.0.1:"+portB, "--join", "127.0.0.1:"+portA,
		"--gossip-key-file", key, "--node-name", "b", "--gossip-interval", "10ms")
	var b *clientlib.Client
	eventually(t, "b serves before it has joined anyone", func() bool {
		var err error
		b, err = clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sockB, Timeout: 5 * time.Second})
		return err == nil
	})
	defer b.Close()
	if d := b.Allow(context.Background(), "r", "probe"); !d.Allowed || d.FailedOpen {
		t.Fatalf("b before joining: %+v", d)
	}
	pa := startDaemon(t, "--socket", sockA, "--rules", rules, "--bind", "127.0.0.1:"+portA,
		"--gossip-key-file", key, "--node-name", "a", "--gossip-interval", "10ms")
	var a *clientlib.Client
	eventually(t, "a serves", func() bool {
		var err error
		a, err = clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sockA, Timeout: 5 * time.Second})
		return err == nil
	})
	defer a.Close()
	eventually(t, "b's join retry finds a", func() bool { return strings.Contains(pa.stderr.String(), "member joined: name=b") })
	// a spends the whole burst; b learns of it by gossip. A key new to the
	// cluster is held to a's share of the burst for one propagation delay
	// (bucket/firstshare.go): a's last requests may wait for it.
	for i := range 5 {
		eventually(t, fmt.Sprintf("a admits its request %d, nobody else having spent anything", i), func() bool {
			d := a.Allow(context.Background(), "r", "shared")
			return d.Allowed && !d.FailedOpen
		})
	}
	admittedByB := 0
	eventually(t, "b denies what a spent", func() bool {
		d := b.Allow(context.Background(), "r", "shared")
		if d.Allowed {
			admittedByB++
		}
		return !d.Allowed
	})
	if admittedByB >= 5 {
		t.Fatalf("b admitted %d of a burst of 5 that a had already spent: it never heard of a's consumption", admittedByB)
	}
	t.Logf("b admitted %d before learning a's consumption", admittedByB)
}

// The sidecar proxy, as shipped: sluiced proxy in front of an upstream,
// limiting through a running daemon, with a routes file.
func TestProxyCommandLimitsThroughTheDaemon(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	sock, rules, routes := filepath.Join(dir, "d.sock"), filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "routes.yaml")
	os.WriteFile(rules, []byte("rules:\n  api:\n    rate: 2/1h\n  uploads:\n    rate: 100/1h\n"), 0o600)
	os.WriteFile(routes, []byte("identity:\n  header: X-API-Key\nroutes:\n  - match: \"GET /\"\n    limits:\n      - rule: api\n"), 0o600)
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer up.Close()
	startDaemon(t, "--socket", sock, "--rules", rules)
	eventually(t, "the daemon's socket", func() bool { _, err := os.Stat(sock); return err == nil })
	listen := "127.0.0.1:" + freePort(t)
	px := startDaemon(t, "proxy", "--listen", listen, "--upstream", up.URL, "--socket", sock, "--routes", routes, "--decision-timeout", "2s")
	get := func(key string) int {
		req, _ := http.NewRequest("GET", "http://"+listen+"/", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// A request the daemon decided carries limit headers; one the proxy let
	// through failing open (not yet connected) carries none.
	eventually(t, "the proxy serves, connected to the daemon", func() bool {
		req, _ := http.NewRequest("GET", "http://"+listen+"/", nil)
		req.Header.Set("X-API-Key", "probe")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200 && resp.Header.Get("X-Ratelimit-Limit") != ""
	})
	before := reached.Load() // the probes (some may have failed open before the proxy connected)
	codes := []int{get("alice"), get("alice"), get("alice"), get("bob")}
	if fmt.Sprint(codes) != "[200 200 429 200]" {
		t.Fatalf("codes %v, want [200 200 429 200]", codes)
	}
	if n := reached.Load() - before; n != 3 { // alice ×2, bob
		t.Fatalf("upstream reached %d times, want 3", n)
	}
	// SIGHUP re-reads the routes: "GET /" now counts against "uploads", so
	// alice, throttled under "api", is admitted again.
	os.WriteFile(routes, []byte("identity:\n  header: X-API-Key\nroutes:\n  - match: \"GET /\"\n    limits:\n      - rule: uploads\n"), 0o600)
	px.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the reloaded routes apply", func() bool { return get("alice") == 200 })
	// A bad routes file keeps the last good routes.
	os.WriteFile(routes, []byte("routes:\n  - match: /\n    limitz: []\n"), 0o600)
	px.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the bad reload is logged", func() bool { return strings.Contains(px.stderr.String(), "routes reload failed") })
	if code := get("alice"); code != 200 {
		t.Fatalf("after a bad routes file: %d", code)
	}
}

// The proxy built into the daemon decides in-process.
func TestBuiltInProxy(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	sock, rules := filepath.Join(dir, "d.sock"), filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte("rules:\n  default:\n    rate: 2/1h\n"), 0o600)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	listen := "127.0.0.1:" + freePort(t)
	startDaemon(t, "--socket", sock, "--rules", rules, "--proxy-listen", listen, "--proxy-upstream", up.URL)
	get := func() int {
		resp, err := http.Get("http://" + listen + "/")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	eventually(t, "the built-in proxy serves", func() bool { return get() == 200 })
	if a, b := get(), get(); a != 200 || b != 429 {
		t.Fatalf("codes %d %d, want 200 429 (2/1h by client IP)", a, b)
	}
}

// SIGTERM while clients are busy: the daemon answers what it has received,
// tells its clients it is going (they fail open at once, none waits out its
// deadline), leaves the cluster (its peer hears of it at once, not after
// the seconds failure detection takes), and exits 0.
func TestSigtermUnderLoadAnswersClientsAndLeaves(t *testing.T) {
	dir := tempDir(t)
	portA, portB := freePort(t), freePort(t)
	sockA := filepath.Join(dir, "a.sock")
	key := secureKeyFile(t, dir, "c2x1aWNlLXRlc3Qta2V5LQ==")
	pa := startDaemon(t, "--socket", sockA, "--bind", "127.0.0.1:"+portA, "--node-name", "a", "--admin-addr", "", "--gossip-key-file", key)
	pb := startDaemon(t, "--socket", filepath.Join(dir, "b.sock"), "--bind", "127.0.0.1:"+portB, "--join", "127.0.0.1:"+portA,
		"--node-name", "b", "--admin-addr", "", "--gossip-key-file", key)
	eventually(t, "b joins a", func() bool { return strings.Contains(pa.stderr.String(), "member joined: name=b") })
	c := clientlib.New(clientlib.Options{SocketPath: sockA, Timeout: 2 * time.Second, ReconnectMin: 5 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	defer c.Close()
	eventually(t, "the client connects", c.Up)

	stopLoad := loadCallers(c, 8, nil)
	eventually(t, "a decides some of the load", func() bool { return c.Stats().Decisions > 1000 })
	sent := time.Now()
	pa.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-pa.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, pa.stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit within 15s of SIGTERM")
	}
	pa.exited <- nil // for the cleanup
	exitedAfter := time.Since(sent)
	eventually(t, "b hears that a left", func() bool { return strings.Contains(pb.stderr.String(), "member left or died: name=a") })
	leftAfter := time.Since(sent)
	eventually(t, "calls fail open once a is gone", func() bool { return c.Stats().FailedOpen > 0 })
	stopLoad()

	s := c.Stats()
	if s.Timeouts != 0 {
		t.Errorf("%d calls waited out their deadline: the shutdown left requests unanswered", s.Timeouts)
	}
	if strings.Contains(pa.stderr.String(), "leaving the cluster") {
		t.Errorf("a could not leave the cluster cleanly:\n%s", pa.stderr.String())
	}
	// memberlist declares a silent member dead only after its suspicion
	// timeout (about 5 s here); a graceful leave is heard at once.
	if leftAfter > 4*time.Second {
		t.Errorf("b heard of a's departure %s after SIGTERM: that is failure detection, not a leave", leftAfter)
	}
	t.Logf("SIGTERM under load: exited after %s, peer heard the leave after %s; client %+v",
		exitedAfter.Round(time.Millisecond), leftAfter.Round(time.Millisecond), s)
}

// A full disk at start-up: the daemon says so and exits non-zero, whether
// the socket's directory cannot be made or the socket itself cannot. The
// test mounts a tmpfs with room for a single inode, so it needs root (and
// the right to mount); elsewhere it skips.
func TestDiskFullAtStartExitsWithClearError(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a full filesystem")
	}
	for _, tt := range []struct {
		name  string
		mkdir bool // the socket's directory exists, so the socket is what cannot be made
	}{{"directory cannot be made", false}, {"socket cannot be made", true}} {
		t.Run(tt.name, func(t *testing.T) {
			mnt := tempDir(t)
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=2", "tmpfs", mnt).CombinedOutput(); err != nil {
				t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
			}
			t.Cleanup(func() { exec.Command("umount", mnt).Run() })
			sockDir := filepath.Join(mnt, "run")
			filler := filepath.Join(mnt, "filler")
			if tt.mkdir {
				filler = sockDir
			}
			if err := os.Mkdir(filler, 0o755); err != nil { // takes the last free inode
				t.Fatal(err)
			}
			out, err := exec.Command(binary, "--socket", filepath.Join(sockDir, "d.sock"), "--admin-addr", "").CombinedOutput()
			if err == nil || !strings.Contains(string(out), "no space left on device") {
				t.Fatalf("sluiced on a full disk: err %v, output %q", err, out)
			}
		})
	}
}

// loadCallers runs n goroutines asking c for decisions (rule "default", 50
// keys) back to back, each bounded to 5M calls and 60 s, handing each call's
// duration and decision to observe if it is set. The returned function stops
// them and waits for them.
func loadCallers(c *clientlib.Client, n int, observe func(caller int, took time.Duration, d clientlib.Decision)) (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	giveUp := time.Now().Add(60 * time.Second)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5_000_000 && time.Now().Before(giveUp); i++ {
				select {
				case <-done:
					return
				default:
				}
				start := time.Now()
				d := c.Allow(context.Background(), "default", fmt.Sprint("k", i%50))
				if observe != nil {
					observe(g, time.Since(start), d)
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}
