package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
// changed to anything but its old or new limit; the complete file is applied
// once the writer closes it.
func TestRulesFileWrittenSlowlyInPlaceIsNeverLoadedHalfWay(t *testing.T) {
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
	for _, ch := range chunks {
		f.WriteString(ch)
		time.Sleep(300 * time.Millisecond) // the writer is slow: 3 debounce windows per chunk
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
	if got := strings.Count(p.stderr.String(), "rules reloaded"); got != 1 {
		t.Errorf("the rules were reloaded %d times, want once (the complete file)\n%s", got, p.stderr.String())
	}
	t.Logf("%d decisions during a %d-chunk in-place write; none saw a partial file", decided.Load(), len(chunks))
}

// A rules file past the size cap is refused with an error naming the file
// and the cap: at start the daemon exits; on reload the last good rules stay.
func TestRulesFileLargerThanTheCapIsRefused(t *testing.T) {
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
