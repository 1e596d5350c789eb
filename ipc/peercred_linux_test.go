//go:build linux

package ipc

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// logRecorder is a Logger that keeps its Warn lines.
type logRecorder struct {
	mu    sync.Mutex
	warns []string
}

func (l *logRecorder) Debug(string, ...interface{}) {}

func (l *logRecorder) Warn(msg string, args ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.warns = append(l.warns, fmt.Sprint(msg, args))
}

func (l *logRecorder) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.warns, "\n")
}

// The allow-lists are checked against this process's own credentials; when
// the tests run as root, the refused cases refuse root (uid 0 is not listed).
func TestServerPeerAllowList(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	tests := []struct {
		name       string
		uids, gids []uint32
		admit      bool
		helloFirst bool // the refused client writes HELLO before reading, as clients do
	}{
		{"own uid listed", []uint32{uid + 1, uid}, nil, true, false},
		{"own gid listed", []uint32{uid + 1}, []uint32{gid}, true, false},
		{"gid list only", nil, []uint32{gid + 1, gid}, true, false},
		{"other uid only", []uint32{uid + 1}, nil, false, false},
		{"other uid and other gid", []uint32{uid + 1}, []uint32{gid + 1}, false, true},
		{"other gid only", nil, []uint32{gid + 1}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &logRecorder{}
			ts := startServer(t, ServerConfig{AllowUIDs: tt.uids, AllowGIDs: tt.gids, Logger: log})
			c := dialRaw(t, ts.path)
			if tt.admit {
				c.hello()
				c.send(AppendRequest(nil, 1, []Check{check("api", "k")}))
				c.expectReply(1, true)
				if n := ts.Stats().PeersRefused.Load(); n != 0 {
					t.Fatalf("PeersRefused = %d, want 0", n)
				}
				return
			}
			if tt.helloFirst {
				c.send(AppendHello(nil, Hello{Version: ProtocolVersion, Client: "test"}))
			}
			typ, body, err := c.read()
			if err != nil || typ != MsgError {
				t.Fatalf("want ERROR, got type %d err %v", typ, err)
			}
			e, err := DecodeError(body)
			wantMsg := fmt.Sprintf("uid %d gid %d not allowed", uid, gid)
			if err != nil || e.ID != 0 || e.Code != CodePeerRefused || e.Message != wantMsg {
				t.Fatalf("got %+v (%v), want id 0 code %d %q", e, err, CodePeerRefused, wantMsg)
			}
			c.expectClosed()
			st := ts.Stats()
			if st.PeersRefused.Load() != 1 || st.ProtocolErrors.Load() != 0 || st.Requests.Load() != 0 {
				t.Fatalf("PeersRefused %d ProtocolErrors %d Requests %d, want 1 0 0",
					st.PeersRefused.Load(), st.ProtocolErrors.Load(), st.Requests.Load())
			}
			want := fmt.Sprintf("peer not allowed[pid %d uid %d gid %d]", os.Getpid(), uid, gid)
			if got := log.all(); !strings.Contains(got, want) {
				t.Fatalf("warn log %q does not contain %q", got, want)
			}
		})
	}
}

func TestServerWithoutAllowListAdmitsAnyone(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	c := dialRaw(t, ts.path)
	c.hello()
	if n := ts.Stats().PeersRefused.Load(); n != 0 {
		t.Fatalf("PeersRefused = %d", n)
	}
}

// The allow-list must not keep NewServer's caller's slices.
func TestServerCopiesAllowLists(t *testing.T) {
	uids := []uint32{uint32(os.Getuid())}
	ts := startServer(t, ServerConfig{AllowUIDs: uids})
	uids[0]++
	dialRaw(t, ts.path).hello()
}

const peerChildEnv = "SLUICE_TEST_PEER_SOCKET"

// TestPeerCredHelperProcess is not a test: TestServerRefusesOtherUserKeepsServingAllowed
// runs the test binary as another user with this test selected, to connect
// as that user and print what the server said.
func TestPeerCredHelperProcess(t *testing.T) {
	path := os.Getenv(peerChildEnv)
	if path == "" {
		t.Skip("helper process only")
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(AppendHello(nil, Hello{Version: ProtocolVersion, Client: "other-user"})); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	body, err := ReadFrame(br, nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	e, err := DecodeError(body)
	if err != nil {
		t.Fatalf("not an ERROR: %v", err)
	}
	_, eofErr := br.ReadByte()
	fmt.Printf("peer-result: code=%d closed=%v msg=%s\n", e.Code, eofErr == io.EOF, e.Message)
}

// Another user's process is refused while this process's connections, and
// new ones, keep being served. Needs root to start the other user's process.
func TestServerRefusesOtherUserKeepsServingAllowed(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	const nobody = 65534
	log := &logRecorder{}
	ts := startServer(t, ServerConfig{AllowUIDs: []uint32{0}, Logger: log})
	// Let the other user reach the socket and run a copy of this binary.
	dir := filepath.Dir(ts.path)
	for p, mode := range map[string]os.FileMode{dir: 0o755, ts.path: 0o666} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(dir, "ipc.test")
	if err := os.WriteFile(child, bin, 0o755); err != nil {
		t.Fatal(err)
	}

	allowed := dialRaw(t, ts.path)
	allowed.hello()

	cmd := exec.Command(child, "-test.run=^TestPeerCredHelperProcess$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), peerChildEnv+"="+ts.path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as uid %d: %v\n%s", nobody, err, out)
	}
	want := fmt.Sprintf("peer-result: code=%d closed=true msg=uid %d gid %d not allowed", CodePeerRefused, nobody, nobody)
	if !strings.Contains(string(out), want) {
		t.Fatalf("client as uid %d saw:\n%s\nwant %q", nobody, out, want)
	}

	// The allowed connection, and a new one, are still served.
	allowed.send(AppendRequest(nil, 7, []Check{check("api", "k")}))
	allowed.expectReply(7, true)
	again := dialRaw(t, ts.path)
	again.hello()
	again.send(AppendRequest(nil, 8, []Check{check("api", "k")}))
	again.expectReply(8, true)

	if n := ts.Stats().PeersRefused.Load(); n != 1 {
		t.Fatalf("PeersRefused = %d, want 1", n)
	}
	if got := log.all(); !strings.Contains(got, fmt.Sprintf("uid %d gid %d", nobody, nobody)) {
		t.Fatalf("warn log %q does not name uid and gid %d", got, nobody)
	}
}
