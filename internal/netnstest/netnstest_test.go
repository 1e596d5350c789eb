package netnstest

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// requireNetns skips the test where namespaces cannot be made, or fails it
// when SLUICE_REQUIRE_NETNS is set (as in CI).
func requireNetns(t *testing.T) {
	t.Helper()
	if why := Unavailable(); why != "" {
		if os.Getenv("SLUICE_REQUIRE_NETNS") != "" {
			t.Fatalf("SLUICE_REQUIRE_NETNS is set but network namespaces cannot be made here: %s", why)
		}
		t.Skipf("skipped: network namespaces cannot be made here: %s", why)
	}
}

// Two hosts of a lab reach each other on their eth0 addresses; the test's
// own namespace reaches neither; a process started in a host sees only
// that host's interfaces; and the lab's namespaces are gone after it.
func TestLabHostsReachEachOtherAndNothingElse(t *testing.T) {
	requireNetns(t)
	var names []string
	t.Run("lab", func(t *testing.T) {
		lab := New(t)
		a, b := lab.Add(), lab.Add()
		names = append(names, a.Name, b.Name)
		if a.IP != "10.213.0.1" || b.IP != "10.213.0.2" {
			t.Fatalf("addresses %s and %s, want 10.213.0.1 and .2", a.IP, b.IP)
		}
		var l net.Listener
		if err := a.Do(func() error {
			var err error
			l, err = net.Listen("tcp", net.JoinHostPort(a.IP, "0"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			c, err := l.Accept()
			if err == nil {
				c.Write([]byte("hello from a"))
				c.Close()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := b.DialContext(ctx, "tcp", l.Addr().String())
		if err != nil {
			t.Fatalf("b cannot reach a: %v", err)
		}
		got, _ := io.ReadAll(c)
		c.Close()
		if string(got) != "hello from a" {
			t.Fatalf("b read %q from a", got)
		}
		if c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
			c.Close()
			t.Fatalf("the test's own namespace reaches a's %s", l.Addr())
		}
		out, err := b.Exec("ip", "-o", "-4", "addr", "show")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "eth0    inet 10.213.0.2/24") || strings.Contains(string(out), "10.213.0.1/") {
			t.Fatalf("b's addresses:\n%s", out)
		}
	})
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); err == nil {
			t.Errorf("namespace %s is left after its test", n)
		}
	}
}

// A namespace named for a process no longer alive is removed with what
// runs in it; one of a live process is left alone.
func TestRemoveStaleDeletesOnlyDeadRunsNamespaces(t *testing.T) {
	requireNetns(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	staleName := prefix + strconv.Itoa(dead.Process.Pid) + "-1"
	if out, err := exec.Command("ip", "netns", "add", staleName).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", staleName).Run() })
	sleeper := exec.Command("ip", "netns", "exec", staleName, "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	t.Cleanup(func() { sleeper.Process.Kill(); <-exited })
	// ip netns exec enters the namespace after Start returns: wait until the
	// sleeper runs in it, or a loaded machine lets New look before it does.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "pids", staleName).Output()
		if len(strings.TrimSpace(string(out))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sleeper never ran in %s", staleName)
		}
		poll := time.NewTimer(10 * time.Millisecond)
		<-poll.C
	}

	lab := New(t) // removes it
	live := lab.Add()
	if _, err := os.Stat("/run/netns/" + staleName); err == nil {
		t.Fatalf("the dead run's namespace %s is still there", staleName)
	}
	select {
	case <-exited:
		exited <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("the process in the dead run's namespace still runs")
	}
	removed, err := RemoveStale()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range removed {
		if r == live.Name {
			t.Fatalf("RemoveStale removed %s, of this live process", r)
		}
	}
	if _, err := os.Stat("/run/netns/" + live.Name); err != nil {
		t.Fatalf("this run's namespace is gone: %v", err)
	}
}

// SetEtc's file is what a process in the host reads at its /etc path,
// while the machine's stays as it was; a plain name is required; the file
// goes with the lab, and one left by a dead run goes with RemoveStale.
func TestSetEtcGivesTheHostItsOwnFile(t *testing.T) {
	requireNetns(t)
	machine, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Skipf("skipped: the machine has no /etc/resolv.conf to mount over: %v", err)
	}
	const mine = "nameserver 10.213.0.1\n"
	var name string
	t.Run("lab", func(t *testing.T) {
		h := New(t).Add()
		name = h.Name
		for _, bad := range []string{"", "../passwd", "a/b", ".."} {
			if err := h.SetEtc(bad, nil); err == nil {
				t.Errorf("SetEtc(%q) did not fail", bad)
			}
		}
		if err := h.SetEtc("resolv.conf", []byte(mine)); err != nil {
			t.Fatal(err)
		}
		out, err := h.Exec("cat", "/etc/resolv.conf")
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != mine {
			t.Fatalf("the host's process read %q, want %q", out, mine)
		}
		if now, _ := os.ReadFile("/etc/resolv.conf"); string(now) != string(machine) {
			t.Fatalf("the machine's /etc/resolv.conf changed: %q", now)
		}
	})
	if _, err := os.Stat(etcRoot + "/" + name); err == nil {
		t.Errorf("%s/%s is left after its test", etcRoot, name)
	}

	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	staleDir := etcRoot + "/" + prefix + strconv.Itoa(dead.Process.Pid) + "-1"
	if err := os.MkdirAll(staleDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(staleDir) })
	if _, err := RemoveStale(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(staleDir); err == nil {
		t.Fatalf("a dead run's %s is still there", staleDir)
	}
}
