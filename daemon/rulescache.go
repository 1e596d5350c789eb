package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicelabs/sluice/config"
)

// The rules cache keeps the last good document the rules service served,
// so that a daemon started while the service is down enforces the rules the
// fleet last agreed on rather than nothing, or worse, limits of its own.
//
// Every document the service serves that is valid and put in force is
// written to Settings.RulesCache atomically (a temporary file in the same
// directory, fsync, rename, fsync of the directory), mode 0600. At start,
// if the service cannot be reached or serves invalid rules:
//   - with a cache, its rules are put in force; the log and /readyz say that
//     the cache is in use and how old it is;
//   - without one, the daemon holds no rules and admits every check as an
//     unknown rule (unknown_rule: allow), counted per rule, and says so at
//     ERROR level and in /readyz: failing open, never on the embedded
//     default limits, which have nothing to do with this fleet's rules and
//     would deny its real traffic.
//
// Either way it keeps polling, and the first good answer replaces the
// fallback.

// rulesFallback describes rules in force that did not come from the service.
type rulesFallback struct {
	cache   string    // the cache file in force; empty: no rules at all (failing open)
	written time.Time // when the cache was written
	cause   string    // why the service's rules are not in force
}

// NoRulesSource is the Source of the empty rule set a daemon started on an
// unreachable rules service with no cache holds.
const NoRulesSource = "none (rules service unreachable at start, no cache: failing open)"

// startFromURL puts in force the rules the service serves now or, failing
// that, the cached copy, or failing that no rules at all (see above).
func (d *Daemon) startFromURL() {
	rules, body, err := d.reloadFromURL()
	if err == nil && rules != nil {
		d.apply(rules)
		d.reloads.Add(1) // the first fetch counts as a reload, as it always has
		d.metrics.reloads.WithLabelValues("ok").Inc()
		d.metrics.reloadAt.SetToCurrentTime()
		d.writeRulesCache(body)
		return
	}
	if err == nil {
		err = errors.New("rules service answered with nothing to apply")
	}
	var fe *fetchError
	if !errors.As(err, &fe) { // an invalid document: counted as a failed reload
		d.failures.Add(1)
		d.metrics.reloads.WithLabelValues("error").Inc()
		msg := err.Error()
		d.lastReloadError.Store(&msg)
	}
	if path := d.settings.RulesCache; path != "" {
		fi, serr := os.Stat(path)
		cached, cerr := config.LoadRules(path)
		switch {
		case cerr == nil && serr == nil:
			d.apply(cached)
			d.fallback.Store(&rulesFallback{cache: path, written: fi.ModTime(), cause: err.Error()})
			d.log.Warn("rules service unavailable at start; enforcing the cached rules until it answers",
				"url", d.settings.RulesURL, "cache", path, "cache_age", time.Since(fi.ModTime()).Round(time.Second),
				"rule_count", len(cached.ByName), "rules_hash", cached.Hash, "error", err)
			return
		case errors.Is(cerr, os.ErrNotExist):
			d.log.Warn("no rules cache yet", "cache", path)
		default:
			d.log.Error("rules cache unusable", "cache", path, "error", cerr)
		}
	}
	d.apply(config.NoRules(NoRulesSource))
	d.fallback.Store(&rulesFallback{cause: err.Error()})
	d.log.Error("NO RULES IN FORCE: the rules service is unavailable and there is no rules cache; admitting every check (failing open) until it answers",
		"url", d.settings.RulesURL, "error", err, "hint", "set --rules-cache so the last good rules survive a restart")
}

// endFallback notes that the service's rules are going in force: the
// fallback, if any, ends.
func (d *Daemon) endFallback() {
	if prev := d.fallback.Swap(nil); prev != nil {
		d.log.Info("rules service answered; its rules replace the fallback", "url", d.settings.RulesURL, "was_cache", prev.cache)
	}
}

// writeRulesCache writes body to the rules cache atomically; a failure is
// logged and leaves the previous cache as it was.
func (d *Daemon) writeRulesCache(body []byte) {
	path := d.settings.RulesCache
	if path == "" || body == nil {
		return
	}
	if err := writeFileAtomic(path, body, 0o600); err != nil {
		d.log.Warn("cannot write the rules cache; a restart while the rules service is down would find the previous copy", "cache", path, "error", err)
		return
	}
	d.log.Debug("rules cache written", "cache", path, "bytes", len(body))
}

// writeFileAtomic replaces path with data: a temporary file in the same
// directory is written, synced and renamed over path, and the directory is
// synced, so a crash leaves the old file or the new one, never a part.
func writeFileAtomic(path string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		d.Sync() // best effort: the rename is durable once the directory is
		d.Close()
	}
	return nil
}

// fallbackView is what /readyz says about rules not from the service.
func (d *Daemon) fallbackView(body map[string]any) {
	fb := d.fallback.Load()
	if fb == nil {
		return
	}
	body["rules_fallback_cause"] = fb.cause
	if fb.cache != "" {
		body["rules_cache_in_use"] = fb.cache
		body["rules_cache_written"] = fb.written.UTC().Format(time.RFC3339)
		body["rules_cache_age_seconds"] = int64(time.Since(fb.written).Seconds())
		return
	}
	body["rules_none_failing_open"] = true
	body["warning"] = "no rules in force: the rules service has not answered since start and there is no rules cache; every check is admitted"
}
