package daemon

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicelabs/sluice/config"
)

// The envoyproxy/ratelimit configuration (Settings.EnvoyConfig) is loaded
// beside the rules: its descriptors are translated into rules that are put in
// force together with the rules file's (or the rules service's, or the
// embedded defaults), so one rules hash covers both and gossip resolves both.
// It reloads with the rules (SIGHUP, POST /v1/reload) and when its file or
// directory changes. A bad configuration keeps the last good one in force,
// with the same file:line:col errors, log line and counters as a bad rules
// file.

// loadEnvoy reads the Envoy configuration at start; an invalid one is fatal.
func (d *Daemon) loadEnvoy() error {
	if d.settings.EnvoyConfig == "" {
		return nil
	}
	e, err := config.LoadEnvoy(d.settings.EnvoyConfig)
	if err != nil {
		return err
	}
	d.envoy.Store(e)
	return nil
}

// withEnvoy returns rules with the Envoy configuration in force merged in,
// remembering rules as the base a later Envoy reload merges into. The caller
// holds reloadMu.
func (d *Daemon) withEnvoy(rules *config.Rules) *config.Rules {
	d.baseRules = rules
	return rules.WithEnvoy(d.envoy.Load())
}

// reloadEnvoy re-reads the Envoy configuration and, when its meaning
// changed, puts it in force over the base rules in force. The caller holds
// reloadGate.
func (d *Daemon) reloadEnvoy(seq uint64) error {
	if d.settings.EnvoyConfig == "" {
		return nil
	}
	e, err := config.LoadEnvoy(d.settings.EnvoyConfig)
	if err != nil {
		return d.failReload(err)
	}
	if old := d.envoy.Load(); old != nil && old.Hash == e.Hash {
		return nil
	}
	d.envoy.Store(e)
	d.reloadMu.Lock()
	base := d.baseRules
	d.reloadMu.Unlock()
	return d.put(seq, base)
}

// ReloadEnvoy re-reads the Envoy configuration only (the watcher's reload).
func (d *Daemon) ReloadEnvoy() error {
	d.reloadGate.Lock()
	defer d.reloadGate.Unlock()
	return d.reloadEnvoy(d.reloadSeq.Add(1))
}

// watchEnvoy reloads the Envoy configuration when its file, or a file in its
// directory, changes (settled for watchDebounce; an unchanged meaning
// reloads nothing). Write a new file and rename it over the old one: a file
// written in place may be read half-way, and if that half is valid it is in
// force until the next event. It returns a function that stops the watch
// and waits for it.
func (d *Daemon) watchEnvoy(ctx context.Context) (stop func()) {
	path := d.settings.EnvoyConfig
	if path == "" || d.settings.NoWatch {
		return func() {}
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		d.log.Warn("cannot watch the envoy config; reload with SIGHUP", "error", err)
		return func() {}
	}
	dir := path
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		dir = filepath.Dir(path)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		d.log.Warn("cannot watch the envoy config; reload with SIGHUP", "dir", dir, "error", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Close()
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				d.log.Warn("envoy config watcher", "error", err)
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				timer.Reset(watchDebounce)
			case <-timer.C:
				_ = d.ReloadEnvoy() // logged; a bad file keeps the last good config
			}
		}
	}()
	return func() { cancel(); <-done }
}
