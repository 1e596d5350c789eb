package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/config"
)

func runWatching(t *testing.T, rulesPath string) *Daemon {
	t.Helper()
	s := config.DefaultSettings()
	s.RulesPath = rulesPath
	return runDaemon(t, s)
}

// runDaemon runs a daemon with settings s on a socket of its own until the
// test ends.
func runDaemon(t *testing.T, s config.Settings) *Daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "dw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s.SocketPath = filepath.Join(dir, "d.sock")
	d, err := New(Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	<-d.Ready()
	t.Cleanup(func() { cancel(); <-ran })
	return d
}

// pollUntil checks cond every few milliseconds, failing after 10s.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out after 10s waiting until %s", what)
		case <-tick.C:
		}
	}
}

func waitRate(t *testing.T, d *Daemon, rule string, count int64) {
	t.Helper()
	pollUntil(t, fmt.Sprintf("rule %s has count %d", rule, count), func() bool {
		r, ok := d.Rules().ByName[rule]
		return ok && r.Limits[0].Count() == count
	})
}

func rulesWithCount(n int) []byte { return fmt.Appendf(nil, "rules:\n  r:\n    rate: %d/1s\n", n) }

func TestRulesFileIsWatched(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	os.WriteFile(path, rulesWithCount(10), 0o600)
	d := runWatching(t, path)

	// Written in place.
	os.WriteFile(path, rulesWithCount(11), 0o600)
	waitRate(t, d, "r", 11)

	// Written aside and renamed over, as editors do.
	tmp := filepath.Join(dir, ".rules.yaml.swp")
	os.WriteFile(tmp, rulesWithCount(12), 0o600)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitRate(t, d, "r", 12)

	// A bad file keeps the last good rules, and a good one after it applies.
	os.WriteFile(path, []byte("rules:\n  r:\n    rate: nonsense\n"), 0o600)
	pollUntil(t, "the bad file is tried", func() bool { _, failed := d.ReloadCounts(); return failed > 0 })
	if d.Rules().ByName["r"].Limits[0].Count() != 12 {
		t.Fatal("a bad file replaced the rules")
	}
	os.WriteFile(path, rulesWithCount(13), 0o600)
	waitRate(t, d, "r", 13)
}

// Kubernetes mounts a ConfigMap as rules.yaml -> ..data/rules.yaml with
// ..data -> ..2026_11_21_v1, and updates it by swapping the ..data link.
func TestRulesFileWatchedThroughConfigMapSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "..v1"), filepath.Join(dir, "..v2")
	os.Mkdir(v1, 0o755)
	os.Mkdir(v2, 0o755)
	os.WriteFile(filepath.Join(v1, "rules.yaml"), rulesWithCount(20), 0o600)
	os.WriteFile(filepath.Join(v2, "rules.yaml"), rulesWithCount(21), 0o600)
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rules.yaml")
	if err := os.Symlink(filepath.Join("..data", "rules.yaml"), path); err != nil {
		t.Fatal(err)
	}
	d := runWatching(t, path)
	if d.Rules().ByName["r"].Limits[0].Count() != 20 {
		t.Fatal("initial rules not read through the links")
	}
	// The atomic swap: a new link renamed over ..data.
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitRate(t, d, "r", 21)
}
