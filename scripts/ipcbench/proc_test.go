package ipcbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// procRules are the rules of the daemons started with launch. Keys under
// "idle" (1 per hour) are in debt after one take and stay so for an hour, so
// the sweep never evicts them: only the cap can. Keys under "bench" refill
// at once and are always admitted.
const procRules = "rules:\n  idle:\n    rate: 1/1h\n  bench:\n    rate: 1000000000/1s\n"

// proc is a sluiced process with its admin endpoint on loopback, which the
// memory and CPU benchmarks read from outside: /proc for what the kernel
// charges the process, /metrics for what the Go runtime holds.
type proc struct {
	cmd   *exec.Cmd
	pid   int
	sock  string
	admin string // HOST:PORT of the admin endpoint
	dir   string
	http  *http.Client
	once  sync.Once
}

// launch starts sluiced with procRules, the admin endpoint on a free
// loopback port (and its profiles when pprof is set), and the extra flags
// given, and waits until it serves. The process is stopped by stop, or at
// the end of the test at the latest.
func launch(tb testing.TB, pprof bool, extra ...string) *proc {
	tb.Helper()
	dir, err := os.MkdirTemp("", "sp")
	if err != nil {
		tb.Fatal(err)
	}
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(procRules), 0o600); err != nil {
		tb.Fatal(err)
	}
	p := &proc{sock: filepath.Join(dir, "d.sock"), admin: freeLoopbackAddr(tb), dir: dir,
		http: &http.Client{Timeout: 30 * time.Second}}
	args := []string{"--socket", p.sock, "--rules", rulesPath, "--log-level", "warn", "--no-watch", "--admin-addr", p.admin}
	if pprof {
		args = append(args, "--pprof")
	}
	p.cmd = exec.Command(sluicedBin, append(args, extra...)...)
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		tb.Fatal(err)
	}
	p.pid = p.cmd.Process.Pid
	tb.Cleanup(p.stop)
	deadline := time.After(20 * time.Second)
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for !p.serving() {
		select {
		case <-deadline:
			tb.Fatalf("sluiced (pid %d) not serving on %s and %s within 20s", p.pid, p.sock, p.admin)
		case <-poll.C:
		}
	}
	return p
}

// freeLoopbackAddr returns a loopback TCP address nothing listens on now.
// Another process could take it before sluiced does; launch then times out
// saying so.
func freeLoopbackAddr(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (p *proc) serving() bool {
	if _, err := os.Stat(p.sock); err != nil {
		return false
	}
	resp, err := p.http.Get("http://" + p.admin + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stop kills the daemon and removes its files; it is idempotent.
func (p *proc) stop() {
	p.once.Do(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		os.RemoveAll(p.dir)
	})
}

// dial connects a client with conns connections and a timeout long enough
// that a busy daemon still decides every call.
func (p *proc) dial(tb testing.TB, conns int) *clientlib.Client {
	c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: p.sock, Timeout: 2 * time.Second, Conns: conns})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// metrics scrapes /metrics once and returns the values of the named series,
// which must carry no labels.
func (p *proc) metrics(tb testing.TB, names ...string) []float64 {
	v, err := p.scrape(names...)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// scrape is metrics for goroutines other than the benchmark's.
func (p *proc) scrape(names ...string) ([]float64, error) {
	resp, err := p.http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape sluiced: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape sluiced: %w", err)
	}
	out := make([]float64, len(names))
	for i, name := range names {
		if out[i], err = seriesValue(body, name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// seriesValue finds "name value" in a Prometheus text exposition.
func seriesValue(body []byte, name string) (float64, error) {
	for line := range bytes.Lines(body) {
		if v, ok := bytes.CutPrefix(line, []byte(name+" ")); ok {
			f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
			if err != nil {
				return 0, fmt.Errorf("series %s: %w", name, err)
			}
			return f, nil
		}
	}
	return 0, fmt.Errorf("no series %s in /metrics", name)
}

// profile fetches a CPU profile of d from the daemon (launched with pprof)
// into path, starting after delay. It returns at once; wait blocks until the
// profile is written and fails the benchmark if it could not be.
func (p *proc) profile(tb testing.TB, delay, d time.Duration, path string) (wait func()) {
	done := make(chan error, 1)
	go func() {
		<-time.After(delay) // a start on schedule, not a wait for an outcome
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.admin, int(d.Seconds()))
		resp, err := p.http.Get(url)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("%s: %s", url, resp.Status)
			return
		}
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			tb.Fatalf("cpu profile of sluiced: %v", err)
		}
		tb.Logf("sluiced cpu profile: %s", path)
	}
}

// profilePath is where the daemon's CPU profile for benchmark name goes
// when IPCBENCH_PROFILE_DIR is set; "" (no profile) otherwise.
func profilePath(name string) string {
	dir := os.Getenv("IPCBENCH_PROFILE_DIR")
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, strings.NewReplacer("/", "_", "=", "-").Replace(name)+".pprof")
}

// rssBytes reads the process's resident set size (VmRSS).
func (p *proc) rssBytes(tb testing.TB) float64 {
	v, err := p.rss()
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// rss is rssBytes for goroutines other than the benchmark's.
func (p *proc) rss() (float64, error) {
	path := fmt.Sprintf("/proc/%d/status", p.pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", path, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in %s", path)
}

// cpuTime reads the CPU time (user and system) the process has used.
func (p *proc) cpuTime(tb testing.TB) time.Duration {
	return procCPU(tb, fmt.Sprintf("/proc/%d/stat", p.pid))
}

// procCPU reads utime + stime from a /proc/PID/stat file.
func procCPU(tb testing.TB, path string) time.Duration {
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: count fields after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		tb.Fatalf("%s: unexpected format", path)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		tb.Fatalf("%s: unexpected format", path)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		tb.Fatalf("%s: unexpected format", path)
	}
	return time.Duration(utime+stime) * time.Second / time.Duration(clockTicks())
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat times.
var clockTicks = sync.OnceValue(func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 100
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n <= 0 {
		return 100
	}
	return n
})
