// Package netnstest builds throwaway Linux network namespaces for tests:
// a lab is a private Ethernet segment (a bridge in a namespace of its own)
// and any number of hosts on it, each a namespace with one interface,
// eth0, at 10.213.0.N/24. Processes run in a host with `ip netns exec`;
// the test's own sockets are made inside one with Do or DialContext.
//
// Nothing is created in the caller's namespace: no interface, route or
// firewall rule of the machine is touched, and deleting the lab's
// namespaces deletes everything in them. Namespaces are named
// sluice-<pid>-<n> after the test process, so concurrent runs never meet,
// and New removes those left by a run that died (its pid no longer
// alive), killing what still ran inside them.
//
// Files of a host's own /etc (SetEtc: a resolv.conf naming the test's DNS
// server, say) live in /etc/netns/<namespace>/, where `ip netns exec`
// looks for them, and are deleted with the namespace.
//
// It needs Linux, root and iproute2's `ip`; Unavailable says why not. It
// is not a network emulator: for loss, run iptables in a host with Exec.
package netnstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Subnet is the lab's address range; host i (from 1) has 10.213.0.i.
const Subnet = "10.213.0.0/24"

// prefix starts every namespace name this package makes.
const prefix = "sluice-"

// seq numbers the namespaces of this process.
var seq atomic.Int64

// nsName is a fresh namespace name of this process.
func nsName() string {
	return fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), seq.Add(1))
}

// Unavailable returns why network namespaces cannot be made here (not
// root, no `ip`, no netns support), or "" if they can: it makes and
// deletes one to be sure.
func Unavailable() string {
	if runtime.GOOS != "linux" {
		return "network namespaces need Linux, this is " + runtime.GOOS
	}
	if os.Geteuid() != 0 {
		return "network namespaces need root (euid " + strconv.Itoa(os.Geteuid()) + ")"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "iproute2's ip is not installed (apt-get install iproute2): " + err.Error()
	}
	name := nsName()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns add failed: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns del failed: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return ""
}

// Lab is a bridge in a namespace of its own and the hosts plugged into it.
// Its methods are not safe for concurrent use; a Host's are.
type Lab struct {
	tb     testing.TB
	bridge string // the switch namespace
	hosts  []*Host
}

// Host is a namespace on the lab's segment.
type Host struct {
	// Name is the namespace's name (for `ip netns exec`).
	Name string
	// IP is eth0's address, 10.213.0.N.
	IP string
}

// New removes namespaces left by dead runs, then makes a lab whose
// namespaces are deleted when the test ends (passed or not), after the
// test's other cleanups (so after the processes it started in them have
// been killed). It fails the test if anything cannot be made; call
// Unavailable first to skip instead.
func New(tb testing.TB) *Lab {
	tb.Helper()
	if removed, err := RemoveStale(); err != nil {
		tb.Logf("netnstest: removing stale namespaces: %v", err)
	} else if len(removed) > 0 {
		tb.Logf("netnstest: removed namespaces of dead runs: %v", removed)
	}
	l := &Lab{tb: tb, bridge: nsName()}
	l.addNamespace(l.bridge)
	l.ip("-n", l.bridge, "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.bridge, "link", "set", "br0", "up")
	return l
}

// ip runs `ip args...`, failing the test with its output on error.
func (l *Lab) ip(args ...string) {
	l.tb.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.tb.Fatalf("netnstest: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
}

// addNamespace makes namespace name, deleted with the test.
func (l *Lab) addNamespace(name string) {
	l.tb.Helper()
	l.ip("netns", "add", name)
	l.tb.Cleanup(func() {
		if err := remove(name); err != nil {
			l.tb.Errorf("netnstest: %v", err)
		}
	})
}

// Add makes a host on the segment: a namespace whose eth0 (a veth whose
// other end is a port of the bridge) has the next address, with eth0 and
// lo up.
func (l *Lab) Add() *Host {
	l.tb.Helper()
	i := len(l.hosts) + 1
	if i > 254 {
		l.tb.Fatal("netnstest: a lab holds at most 254 hosts")
	}
	h := &Host{Name: nsName(), IP: fmt.Sprintf("10.213.0.%d", i)}
	l.addNamespace(h.Name)
	port := fmt.Sprintf("p%d", i)
	l.ip("-n", l.bridge, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.Name)
	l.ip("-n", l.bridge, "link", "set", port, "master", "br0", "up")
	l.ip("-n", h.Name, "addr", "add", h.IP+"/24", "dev", "eth0")
	l.ip("-n", h.Name, "link", "set", "eth0", "up")
	l.ip("-n", h.Name, "link", "set", "lo", "up")
	l.hosts = append(l.hosts, h)
	return h
}

// Command is `ip netns exec NAME name args...`: the process runs in the
// host's namespace with the pid Start reports (ip execs it, no fork), and
// is killed if the test process dies (SIGKILL on its parent's death).
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// etcRoot is where `ip netns exec NAME` finds the files it bind-mounts
// over /etc's in the process it runs: etcRoot/NAME/FILE over /etc/FILE.
const etcRoot = "/etc/netns"

// SetEtc gives processes run in the host (Command, Exec) their own
// /etc/FILE with data, through `ip netns exec`'s bind mount of
// /etc/netns/NAME/FILE (the file must exist in /etc, and file must be a
// plain name). The test's own goroutines (Do) still see the machine's.
// The file goes with the namespace.
func (h *Host) SetEtc(file string, data []byte) error {
	if file == "" || file != filepath.Base(file) || file == "." || file == ".." {
		return fmt.Errorf("netnstest: set /etc/%s of %s: not a plain file name", file, h.Name)
	}
	if _, err := os.Stat(filepath.Join("/etc", file)); err != nil {
		return fmt.Errorf("netnstest: set /etc/%s of %s: ip netns exec mounts only over a file that exists: %w", file, h.Name, err)
	}
	dir := filepath.Join(etcRoot, h.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("netnstest: set /etc/%s of %s: %w", file, h.Name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
		return fmt.Errorf("netnstest: set /etc/%s of %s: %w", file, h.Name, err)
	}
	return nil
}

// Exec runs name with args in the host and returns its combined output.
func (h *Host) Exec(name string, args ...string) ([]byte, error) {
	out, err := h.Command(name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("run %s in %s: %w: %s", name, h.Name, err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Do runs fn on an OS thread moved into the host's namespace, so sockets
// fn makes belong to the host (and keep to it when used from any
// goroutine afterwards). Goroutines fn starts do not run in the host. The
// thread is moved back afterwards; if that fails it is left locked, and
// the runtime ends it with its goroutine. (Threads the runtime starts
// meanwhile do not inherit the namespace: since Go 1.10 a locked thread
// never clones new ones itself.)
func (h *Host) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open this thread's network namespace: %w", err)
			return
		}
		defer home.Close()
		target, err := os.Open("/run/netns/" + h.Name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open namespace %s: %w", h.Name, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter namespace %s: %w", h.Name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave namespace %s: %w", h.Name, err))
			return // still locked: this thread is discarded
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// DialContext dials from inside the host (as net.Dialer.DialContext does),
// for use as an http.Transport's DialContext.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// stale matches this package's namespace names: sluice-<pid>-<n>.
var stale = regexp.MustCompile(`^` + prefix + `([0-9]+)-[0-9]+$`)

// RemoveStale deletes the namespaces this package made in processes no
// longer alive, killing what still runs inside them first, and returns
// their names.
func RemoveStale() ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list /run/netns: %w", err)
	}
	var removed []string
	var errs []error
	if etc, err := os.ReadDir(etcRoot); err == nil {
		entries = append(entries, etc...) // files of namespaces already gone
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e.Name()] {
			continue
		}
		seen[e.Name()] = true
		m := stale.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() || unix.Kill(pid, 0) != unix.ESRCH {
			continue // ours, or its process is alive
		}
		if err := remove(e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// remove kills the processes still in namespace name, then deletes it
// and its /etc files (either may be gone already).
func remove(name string) error {
	if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
		out, err := exec.Command("ip", "netns", "pids", name).Output()
		if err != nil {
			return fmt.Errorf("list processes in %s: %w", name, err)
		}
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			return fmt.Errorf("delete namespace %s: %w: %s", name, err, strings.TrimSpace(string(out)))
		}
	}
	if err := os.RemoveAll(filepath.Join(etcRoot, name)); err != nil {
		return fmt.Errorf("delete namespace %s's /etc files: %w", name, err)
	}
	return nil
}
