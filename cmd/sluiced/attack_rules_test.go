package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/ipc"
)

// Attacks on how sluiced loads its rules: files written in place, files too
// large, rules services that are down at start.

// rulesDial waits for the daemon at sock to accept a client.
func rulesDial(t *testing.T, sock string) *clientlib.Client {
	t.Helper()
	var c *clientlib.Client
	eventually(t, "the daemon accepts a client", func() bool {
		var err error
		c, err = clientlib.Dial(context.Background(), clientlib.Options{SocketPath: sock, Timeout: 5 * time.Second})
		return err == nil
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// rulesDoc is a rules file of n rules r0..r(n-1), each count/1h, as a header
// and one chunk per rule: every prefix ending at a chunk is a valid file.
func rulesDoc(n int, count int64) (header string, chunks []string) {
	header = "unknown_rule: deny\nrules:\n"
	for i := range n {
		chunks = append(chunks, fmt.Sprintf("  r%d:\n    rate: %d/1h\n", i, count))
	}
	return header, chunks
}

// A writer rewrites the rules file in place, slowly, one rule at a time,
// pausing between chunks for longer than the watch's debounce, so every
// pause leaves a valid file holding only the first rules. Under load on the
// last rule, no decision may ever see that rule missing (unknown_rule) or
// changed to anything but its old or new limit, not even after a SIGHUP in
// the middle of the write; the complete file is applied once the writer
// closes it.
func TestRulesFileWrittenSlowlyInPlaceIsNeverLoadedHalfWay(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	sock, rules := filepath.Join(dir, "d.sock"), filepath.Join(dir, "rules.yaml")
	const n, oldCount, newCount = 10, 1_000_000, 2_000_000
	header, chunks := rulesDoc(n, oldCount)
	if err := os.WriteFile(rules, []byte(header+strings.Join(chunks, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startDaemon(t, "--socket", sock, "--rules", rules, "--admin-addr", "")
	c := rulesDial(t, sock)
	if d := c.Allow(context.Background(), "r9", "k"); d.Limit != oldCount {
		t.Fatalf("before the rewrite: %+v", d)
	}

	// Load on the later rules: every decision must come from the old or the
	// new complete file.
	var decided, bad atomic.Int64
	var firstBad atomic.Pointer[string]
	var wg sync.WaitGroup
	done := make(chan struct{})
	giveUp := time.Now().Add(60 * time.Second)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rule := fmt.Sprintf("r%d", n-1-g%3) // r9, r8, r7
			for i := 0; i < 2_000_000 && time.Now().Before(giveUp); i++ {
				select {
				case <-done:
					return
				default:
				}
				d := c.Allow(context.Background(), rule, fmt.Sprint("k", i%100))
				decided.Add(1)
				if d.FailedOpen || d.Status != ipc.StatusOK || (d.Limit != oldCount && d.Limit != newCount) {
					bad.Add(1)
					msg := fmt.Sprintf("%s: %+v (status %s)", rule, d, d.Status)
					firstBad.CompareAndSwap(nil, &msg)
				}
			}
		}()
	}
	stopLoad := func() { close(done); wg.Wait() }
	eventually(t, "the load is being decided", func() bool { return decided.Load() > 200 })

	// The in-place writer: one open, chunks with pauses, then close.
	header, chunks = rulesDoc(n, newCount)
	f, err := os.OpenFile(rules, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		stopLoad()
		t.Fatal(err)
	}
	f.WriteString(header)
	for i, ch := range chunks {
		f.WriteString(ch)
		time.Sleep(300 * time.Millisecond) // the writer is slow: 3 debounce windows per chunk
		if i == 2 {
			// An operator's SIGHUP mid-write does not load the prefix either.
			p.cmd.Process.Signal(syscall.SIGHUP)
		}
	}
	if err := f.Close(); err != nil {
		stopLoad()
		t.Fatal(err)
	}
	eventually(t, "the complete new file is in force", func() bool {
		return c.Allow(context.Background(), "r9", "probe").Limit == newCount && c.Allow(context.Background(), "r0", "probe").Limit == newCount
	})
	stopLoad()
	if b := bad.Load(); b > 0 {
		t.Fatalf("%d of %d decisions saw a half-written rules file; first: %s\n%s", b, decided.Load(), *firstBad.Load(), p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "the rules file is being written in place") {
		t.Errorf("the SIGHUP mid-write was not refused with a reason\n%s", p.stderr.String())
	}
	if got := strings.Count(p.stderr.String(), "rules reloaded"); got != 1 {
		t.Errorf("the rules were reloaded %d times, want once (the complete file)\n%s", got, p.stderr.String())
	}
	t.Logf("%d decisions during a %d-chunk in-place write; none saw a partial file", decided.Load(), len(chunks))
}

// A rules file past the size cap is refused with an error naming the file
// and the cap: at start the daemon exits; on reload the last good rules stay.
func TestRulesFileLargerThanTheCapIsRefused(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	sock, rules, huge := filepath.Join(dir, "d.sock"), filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "huge.yaml")
	good := "rules:\n  r:\n    rate: 2/1h\n"
	// Valid YAML, padded with a comment past the 4 MiB cap.
	padded := good + "# " + strings.Repeat("x", 4<<20) + "\n"
	os.WriteFile(huge, []byte(padded), 0o600)
	out, err := runSluicedBriefly(t, "--socket", filepath.Join(dir, "s.sock"), "--rules", huge, "--admin-addr", "")
	if err == nil || !strings.Contains(out, "huge.yaml") || !strings.Contains(out, "cap of 4194304 bytes") {
		t.Fatalf("start with a rules file past the cap: err %v, output %q", err, out)
	}

	os.WriteFile(rules, []byte(good), 0o600)
	p := startDaemon(t, "--socket", sock, "--rules", rules, "--admin-addr", "")
	c := rulesDial(t, sock)
	// Replace the file atomically with the oversize one.
	tmp := rules + ".tmp"
	os.WriteFile(tmp, []byte(strings.Replace(padded, "2/1h", "9/1h", 1)), 0o600)
	if err := os.Rename(tmp, rules); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the oversize file is refused, naming the file and the cap", func() bool {
		s := p.stderr.String()
		return strings.Contains(s, "reload failed") && strings.Contains(s, "rules.yaml") && strings.Contains(s, "cap of 4194304 bytes")
	})
	if d := c.Allow(context.Background(), "r", "k"); d.Limit != 2 || d.Status != ipc.StatusOK {
		t.Fatalf("after an oversize rules file: %+v, want the last good rules (limit 2)", d)
	}
}

// runSluicedBriefly runs sluiced with args until it exits (at most 20 s) and
// returns its combined output.
func runSluicedBriefly(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	return string(out), err
}

// rulesServer is a rules service that can be down (it accepts connections
// and drops them, so every fetch fails) or up (serving doc).
type rulesServer struct {
	up  atomic.Bool
	doc atomic.Pointer[string]
	srv *httptest.Server
}

func newRulesServer(t *testing.T) *rulesServer {
	rs := &rulesServer{}
	rs.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !rs.up.Load() {
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
					return
				}
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, *rs.doc.Load())
	}))
	t.Cleanup(rs.srv.Close)
	return rs
}

func (rs *rulesServer) serve(doc string) { rs.doc.Store(&doc); rs.up.Store(true) }

// rulesReadyz returns the daemon's /readyz document.
func rulesReadyz(t *testing.T, admin string) map[string]any {
	t.Helper()
	var body map[string]any
	eventually(t, "/readyz answers", func() bool {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&body) == nil
	})
	return body
}

// A daemon restarted while its rules service is down enforces the last good
// rules it fetched, from the cache (written atomically, mode 0600), and says
// so in the log and /readyz; when the service answers again its rules replace
// the cache's.
func TestRulesURLDownAtStartUsesTheCache(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	sock, cache := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state", "rules.cache.yaml")
	os.Mkdir(filepath.Dir(cache), 0o700)
	rs := newRulesServer(t)
	rs.serve("unknown_rule: deny\nrules:\n  api:\n    rate: 3/1h\n")
	args := []string{"--socket", sock, "--rules-url", rs.srv.URL, "--rules-cache", cache, "--rules-poll-interval", "200ms"}

	first := startDaemon(t, append(args, "--admin-addr", "")...)
	c := rulesDial(t, sock)
	if d := c.Allow(context.Background(), "api", "k"); d.Limit != 3 {
		t.Fatalf("on the service's rules: %+v", d)
	}
	eventually(t, "the cache is written", func() bool { _, err := os.Stat(cache); return err == nil })
	if fi, _ := os.Stat(cache); fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache mode %v, want 0600", fi.Mode().Perm())
	}
	c.Close()
	first.cmd.Process.Kill()
	<-first.exited
	first.exited <- nil

	// The service goes down; the daemon restarts.
	rs.up.Store(false)
	admin := "127.0.0.1:" + freePort(t)
	p := startDaemon(t, append(args, "--admin-addr", admin)...)
	c = rulesDial(t, sock)
	for i := range 3 {
		if d := c.Allow(context.Background(), "api", "k"); !d.Allowed || d.Limit != 3 {
			t.Fatalf("request %d on the cached rules: %+v", i, d)
		}
	}
	if d := c.Allow(context.Background(), "api", "k"); d.Allowed {
		t.Fatalf("4th request on the cached 3/1h admitted: %+v", d)
	}
	if d := c.Allow(context.Background(), "other", "k"); d.Status != ipc.StatusUnknownRule {
		t.Fatalf("the cache's unknown_rule: deny not in force: %+v", d)
	}
	// The daemon logged it before serving; the test copies its stderr
	// through a pipe, so the line may reach the buffer a moment later.
	eventually(t, "the log says the cache is in use and how old it is", func() bool {
		log := p.stderr.String()
		return strings.Contains(log, "enforcing the cached rules") && strings.Contains(log, "cache_age=")
	})
	ready := rulesReadyz(t, admin)
	if ready["rules_cache_in_use"] != cache || ready["rules_cache_age_seconds"] == nil {
		t.Fatalf("/readyz does not report the cache in use: %v", ready)
	}

	// The service comes back with new rules: they replace the cache's.
	rs.serve("rules:\n  api:\n    rate: 7/1h\n")
	eventually(t, "the service's new rules are in force", func() bool { return c.Allow(context.Background(), "api", "probe").Limit == 7 })
	eventually(t, "/readyz no longer reports the cache", func() bool { return rulesReadyz(t, admin)["rules_cache_in_use"] == nil })
	eventually(t, "the cache holds the new rules", func() bool {
		b, _ := os.ReadFile(cache)
		return strings.Contains(string(b), "7/1h")
	})
}

// With the rules service down at start and no cache, the daemon holds no
// rules and admits every check, counted, rather than enforcing the embedded
// default limits (100/s on "default"), which would deny real traffic; it
// says so loudly. The service's rules apply once it answers.
func TestRulesURLDownAtStartWithoutCacheFailsOpenNotOnDefaults(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	sock := filepath.Join(dir, "d.sock")
	rs := newRulesServer(t)
	admin := "127.0.0.1:" + freePort(t)
	p := startDaemon(t, "--socket", sock, "--rules-url", rs.srv.URL, "--rules-poll-interval", "200ms", "--admin-addr", admin)
	c := rulesDial(t, sock)
	// Well beyond the embedded default's burst of 100 on "default".
	for i := range 300 {
		d := c.Allow(context.Background(), "default", "k")
		if !d.Allowed || d.FailedOpen || d.Status != ipc.StatusUnknownRuleAllowed {
			t.Fatalf("request %d with no rules in force: %+v, want admitted as an unknown rule", i, d)
		}
	}
	if !strings.Contains(p.stderr.String(), "[ERROR]") || !strings.Contains(p.stderr.String(), "NO RULES IN FORCE") {
		t.Fatalf("no loud log line about running without rules:\n%s", p.stderr.String())
	}
	ready := rulesReadyz(t, admin)
	if ready["rules_none_failing_open"] != true || ready["rules_source"] == "embedded:default_rules.yaml" {
		t.Fatalf("/readyz does not say no rules are in force: %v", ready)
	}

	rs.serve("rules:\n  default:\n    rate: 2/1h\n")
	eventually(t, "the service's rules apply once it answers", func() bool { return c.Allow(context.Background(), "default", "probe").Limit == 2 })
	c.Allow(context.Background(), "default", "k2")
	c.Allow(context.Background(), "default", "k2")
	if d := c.Allow(context.Background(), "default", "k2"); d.Allowed {
		t.Fatalf("third request on the service's 2/1h admitted: %+v", d)
	}
	if r := rulesReadyz(t, admin); r["rules_none_failing_open"] != nil {
		t.Fatalf("/readyz still reports no rules after the service answered: %v", r)
	}
}

// rulesMetric scrapes one unlabelled series from the daemon's /metrics.
func rulesMetric(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	t.Fatalf("no series %s in /metrics", name)
	return 0
}

// rulesLiveHeap makes the daemon collect its garbage (the heap profile with
// gc=1 does) and returns its heap then.
func rulesLiveHeap(t *testing.T, admin string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return rulesMetric(t, admin, "go_memstats_heap_alloc_bytes")
}

// A flood of the longest keys allowed, each sending many requests under a
// sliding log whose limit is large: without a budget every key's log grows
// with its requests (256 entries, 4 KiB a key here); with --max-log-bytes the
// logs' room beyond their first entry stays within the budget, every request
// is admitted, and the daemon's live heap stays within
// keys × per-key + budget of where it started.
func TestSlidingLogFloodStaysWithinTheLogBudget(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	sock, rules := filepath.Join(dir, "d.sock"), filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte("rules:\n  logged:\n    rate: 10000/1h\n    algorithm: sliding_log\n"), 0o600)
	const (
		keys     = 2000
		requests = 256
		budget   = 512 << 10
		perKey   = 1024 // generous: entry, 256-byte key, map slot, log state and first entry come to ~550 B
		slack    = 4 << 20
	)
	admin := "127.0.0.1:" + freePort(t)
	p := startDaemon(t, "--socket", sock, "--rules", rules, "--admin-addr", admin, "--pprof", "--max-log-bytes", fmt.Sprint(budget))
	c := rulesDial(t, sock)
	idle := rulesLiveHeap(t, admin)

	var wg sync.WaitGroup
	var refused, stalled atomic.Int64
	var firstRefusal atomic.Pointer[string]
	giveUp := time.Now().Add(90 * time.Second)
	const callers = 16
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := g; k < keys; k += callers {
				key := fmt.Sprintf("%0256d", k) // the longest key --max-key-len allows
				for i := 0; i < requests && time.Now().Before(giveUp); i++ {
					d := c.Allow(context.Background(), "logged", key)
					// A call the loaded machine stalled past the client's 5 s
					// is asked again (at most twice): the daemon was late,
					// not wrong, and the limit leaves room for the repeat.
					for retry := 0; retry < 2 && d.FailedOpen && errors.Is(d.Err, clientlib.ErrTimeout); retry++ {
						stalled.Add(1)
						d = c.Allow(context.Background(), "logged", key)
					}
					if !d.Allowed || d.FailedOpen {
						refused.Add(1)
						msg := fmt.Sprintf("key %d request %d: %+v", k, i, d)
						firstRefusal.CompareAndSwap(nil, &msg)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := refused.Load(); n > 0 {
		t.Fatalf("%d requests refused or undecided under a limit of 10000/1h; first: %s", n, *firstRefusal.Load())
	}
	used := rulesMetric(t, admin, "sluice_log_bytes")
	growthRefused := rulesMetric(t, admin, "sluice_log_growth_refused_total")
	heap := rulesLiveHeap(t, admin)
	if used > budget || growthRefused == 0 {
		t.Fatalf("log bytes %v with a budget of %d, growth refused %v times", used, budget, growthRefused)
	}
	if bound := idle + keys*perKey + budget + slack; heap > bound {
		t.Fatalf("live heap %.1f MiB after the flood, over the bound %.1f MiB (idle %.1f + %d keys × %d B + budget %d + slack)\n%s",
			heap/(1<<20), bound/(1<<20), idle/(1<<20), keys, perKey, budget, p.stderr.String())
	}
	t.Logf("%d keys × %d requests, 256-byte keys: live heap %.1f → %.1f MiB (%.0f B/key), log bytes %v of %d, growth refused %v times; calls stalled past 5 s and asked again: %d",
		keys, requests, idle/(1<<20), heap/(1<<20), (heap-idle)/keys, used, budget, growthRefused, stalled.Load())
}
