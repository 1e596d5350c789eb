package main

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lifeHold binds addr for TCP and UDP until the test ends, as another
// program would.
func lifeHold(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
}

// lifeAwaitExit waits (at most 30 s) for p to exit and returns its code.
func lifeAwaitExit(t *testing.T, p *proc) int {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err // for startDaemon's cleanup
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("sluiced: %v", err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("sluiced still running after 30 s; log:\n%s", p.stderr.String())
		return -1
	}
}

// A sluiced that cannot bind one of its addresses (the gossip port, the
// admin or the metrics endpoint) exits 1 naming it, leaves no socket
// behind, and never says it is serving: it says so only once everything is
// bound.
func TestLifeTakenAddressExitsBeforeServing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		flag string // the flag given the taken address
		want string // in the error
	}{
		{"gossip port", "--bind", "gossip: bind"},
		{"admin endpoint", "--admin-addr", "admin endpoint: listen on"},
		{"metrics endpoint", "--metrics-addr", "metrics endpoint: listen on"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := tempDir(t)
			sock := filepath.Join(dir, "s.sock")
			taken := "127.0.0.1:" + freePort(t)
			lifeHold(t, taken)
			args := []string{"--socket", sock, "--node-name", "life", tt.flag, taken}
			if tt.flag != "--bind" { // gossip on too: the address taken comes first
				args = append(args, "--bind", "127.0.0.1:"+freePort(t))
			}
			p := startDaemon(t, args...)
			if code := lifeAwaitExit(t, p); code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			log := p.stderr.String()
			if !strings.Contains(log, tt.want) || !strings.Contains(log, "address already in use") {
				t.Errorf("the error does not name the taken address (want %q); log:\n%s", tt.want, log)
			}
			if strings.Contains(log, "sluiced serving") {
				t.Errorf("logged \"sluiced serving\" although it could not bind everything; log:\n%s", log)
			}
			if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("socket left behind: %v", err)
			}
		})
	}
}

// SIGTERM stops a clustered sluiced gracefully: exit 0, the socket removed,
// the gossip port released, and "sluiced serving" logged once, before
// "stopped".
func TestLifeSigtermReleasesEverything(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	sock := filepath.Join(dir, "s.sock")
	bind := "127.0.0.1:" + freePort(t)
	admin := "127.0.0.1:" + freePort(t)
	p := startDaemon(t, "--socket", sock, "--node-name", "life", "--bind", bind, "--admin-addr", admin)
	eventually(t, "sluiced serves", func() bool { return strings.Contains(p.stderr.String(), "sluiced serving") })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := lifeAwaitExit(t, p); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0; log:\n%s", code, p.stderr.String())
	}
	log := p.stderr.String()
	if n := strings.Count(log, "sluiced serving"); n != 1 || strings.Index(log, "sluiced serving") > strings.Index(log, "stopped") {
		t.Errorf("want \"sluiced serving\" once, before \"stopped\"; log:\n%s", log)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	lifeHold(t, bind)  // fails the test if the gossip port is still bound
	lifeHold(t, admin) // or the admin endpoint
}

// lifeMembers reads node's sluice_members gauge for state from /metrics; -1
// when it cannot.
func lifeMembers(t *testing.T, admin, state string) int {
	t.Helper()
	code, body := adminRequest(t, "GET", "http://"+admin+"/metrics", "", nil, "")
	if code != 200 {
		return -1
	}
	prefix := `sluice_members{state="` + state + `"} `
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// sluiced counts a member it suspects (killed -9, not yet declared dead)
// as suspect, from memberlist's census through the go-metrics sink the
// program installs (gossip.CensusSink).
func TestLifeCensusCountsASuspect(t *testing.T) {
	dir := tempDir(t)
	rules := "rules:\n  r:\n    rate: 5/1h\n"
	ports := []string{freePort(t), freePort(t), freePort(t)}
	args := func(i int) []string {
		a := []string{"--bind", "127.0.0.1:" + ports[i], "--push-pull-interval", "200ms", "--cluster-label", "life", "--insecure-gossip"}
		if i > 0 {
			a = append(a, "--join", "127.0.0.1:"+ports[0])
		}
		return a
	}
	a := startAdminNode(t, dir, "a", rules, args(0)...)
	startAdminNode(t, dir, "b", rules, args(1)...)
	c := startAdminNode(t, dir, "c", rules, args(2)...)
	eventually(t, "a counts 3 alive, none suspect", func() bool {
		return lifeMembers(t, a.admin, "alive") == 3 && lifeMembers(t, a.admin, "suspect") == 0
	})
	if err := c.p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// memberlist suspects c for 4 s (SuspicionMult 4 × ProbeInterval 1 s)
	// before declaring it dead; the census is taken every 200 ms.
	eventually(t, "a counts c suspect", func() bool {
		return lifeMembers(t, a.admin, "suspect") == 1 && lifeMembers(t, a.admin, "alive") == 2
	})
}
