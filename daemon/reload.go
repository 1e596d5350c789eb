package daemon

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/gossip"
)

// Reload re-reads the rules: the rules file, or the rules service (a
// conditional GET; nothing changes when it answers 304). An invalid document
// changes nothing: the last good rules stay in force and the error (naming
// file or URL, line and field) is logged, counted and returned. A rules
// service that cannot be reached changes nothing either. Buckets of rules
// that still exist keep their balances, rescaled where the limit changed.
// With neither file nor URL (embedded defaults) there is nothing to re-read.
// In a cluster started with a keyring file, the keyring is re-read too, so
// gossip keys rotate without a restart.
//
// Reloads from every source (SIGHUP, the file watcher, the rules service
// poller, POST /v1/reload) run one at a time, and the newest read wins: a
// reload whose source was read before the rules in force were read is
// dropped, not applied over them.
func (d *Daemon) Reload() error {
	d.reloadGate.Lock()
	defer d.reloadGate.Unlock()
	seq := d.reloadSeq.Add(1)
	kerr := d.reloadKeyring()
	err := d.reloadRules(seq)
	failed := d.lastReloadError.Load()
	if eerr := d.reloadEnvoy(seq); err == nil {
		err = eerr
	} else {
		d.lastReloadError.Store(failed) // an Envoy change put in force does not hide the rules' error
	}
	if err != nil {
		return err
	}
	return kerr
}

// reloadRules is Reload's rules half; the caller holds reloadGate.
func (d *Daemon) reloadRules(seq uint64) error {
	var rules *config.Rules
	var err error
	switch {
	case d.fetcher != nil:
		var body []byte
		rules, body, err = d.reloadFromURL()
		var fe *fetchError
		if errors.As(err, &fe) {
			return fmt.Errorf("reload: %w", err) // logged and counted as a fetch error
		}
		if err == nil && rules == nil {
			return nil // unchanged
		}
		if err != nil {
			return d.failReload(err)
		}
		// The fallback ends as the service's rules go in, not after: once
		// a client sees the new rules, /readyz no longer reports a fallback.
		d.endFallback()
		if err := d.put(seq, rules); err != nil {
			return err
		}
		d.writeRulesCache(body)
		return nil
	case d.settings.RulesPath == "":
		d.log.Info("reload: running on embedded default rules; nothing to re-read")
		return nil
	case d.fileWriting.Load():
		// The watcher saw an in-place writer that has not closed the file:
		// what is there may be a valid prefix of the new rules. The watcher
		// loads it once the writer closes it.
		d.log.Warn("reload: the rules file is being written in place; it will be loaded when the writer closes it", "path", d.settings.RulesPath)
		return fmt.Errorf("reload: %w", errRulesBeingWritten)
	default:
		rules, err = config.LoadRules(d.settings.RulesPath)
	}
	return d.commitRules(seq, rules, err)
}

// errRulesBeingWritten refuses a reload while a writer has the rules file open.
var errRulesBeingWritten = errors.New("rules file is being written in place; not loaded until the writer closes it")

// nextReadSeq numbers a read of the rules source made outside Reload (the
// watcher's): take it before reading, pass it to reloadFileData.
func (d *Daemon) nextReadSeq() uint64 { return d.reloadSeq.Add(1) }

// reloadFileData puts in force the rules file's content as the watcher read
// it (once it stood still and no writer held it open), so what was checked
// is what is parsed. seq is from nextReadSeq, taken before the read: if a
// reload that read the source later has already put its rules in force,
// data is older than what is in force and is dropped.
func (d *Daemon) reloadFileData(seq uint64, data []byte) error {
	d.reloadGate.Lock()
	defer d.reloadGate.Unlock()
	if seq <= d.appliedSeq {
		d.log.Debug("reload: dropping a rules file read older than the rules in force", "path", d.settings.RulesPath)
		return nil
	}
	rules, err := config.ParseRules(d.settings.RulesPath, data)
	return d.commitRules(seq, rules, err)
}

// commitRules puts rules in force, or, when err is set, keeps the last good
// rules and logs, counts and returns err. The caller holds reloadGate.
func (d *Daemon) commitRules(seq uint64, rules *config.Rules, err error) error {
	if err != nil {
		return d.failReload(err)
	}
	return d.put(seq, rules)
}

// failReload logs, counts and returns a reload that failed; the last good
// rules stay in force.
func (d *Daemon) failReload(err error) error {
	d.failures.Add(1)
	d.metrics.reloads.WithLabelValues("error").Inc()
	msg := err.Error()
	d.lastReloadError.Store(&msg)
	d.log.Error("reload failed; keeping the last good rules", "rules_hash", d.Rules().Hash, "error", err)
	return fmt.Errorf("reload: %w", err)
}

// put puts rules in force after a reload (read as number seq) and says so.
// The caller holds reloadGate.
func (d *Daemon) put(seq uint64, rules *config.Rules) error {
	old := d.Rules()
	d.apply(rules)
	rules = d.Rules() // with the Envoy configuration merged in (envoy.go)
	d.appliedSeq = max(d.appliedSeq, seq)
	d.reloads.Add(1)
	d.metrics.reloads.WithLabelValues("ok").Inc()
	d.metrics.reloadAt.SetToCurrentTime()
	d.lastReloadError.Store(nil)
	if d.syncer != nil {
		if err := d.syncer.SetMeta(gossip.Meta{Version: version, RulesHash: rules.Hash}); err != nil {
			d.log.Warn("advertising the new rules hash", "error", err)
		}
	}
	d.log.Info("rules reloaded", "source", rules.Source, "rule_count", len(rules.ByName), "old_hash", old.Hash, "new_hash", rules.Hash)
	return nil
}

// ReloadCounts returns how many reloads succeeded and failed.
func (d *Daemon) ReloadCounts() (ok, failed uint64) { return d.reloads.Load(), d.failures.Load() }

// apply puts rules in force. A rule keeps its namespace (and so its buckets)
// for as long as the daemon lives, even across a reload that drops it and
// one that brings it back; its buckets are rescaled when its limits change.
func (d *Daemon) apply(rules *config.Rules) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	rules = d.withEnvoy(rules)
	next := &ruleSet{rules: rules, byName: make(map[string]activeRule, len(rules.ByName))}
	for name, r := range rules.ByName {
		ar := activeRule{Rule: r, ns: make([]bucket.Namespace, len(r.Limits)), counted: d.metrics.forRule(name)}
		for i := range r.Limits {
			ln := limitName(name, i)
			ns, ok := d.namespaces[ln]
			if !ok {
				ns = bucket.Namespace(len(d.namespaces) + 1)
				d.namespaces[ln] = ns
			}
			ar.ns[i] = ns
		}
		next.byName[name] = ar
	}
	names := make([]string, len(d.namespaces)+1)
	for name, ns := range d.namespaces {
		names[ns] = name
	}
	d.nsNames.Store(&names)
	// The rules and the balances rescaled for them switch together: no
	// decision runs between the swap and the end of the rescale (fence.go).
	d.fence.exclusive(func() {
		prev := d.rules.Swap(next)
		if prev == nil {
			return
		}
		now := d.now()
		for name, nr := range next.byName {
			or, ok := prev.byName[name]
			if !ok || !limitsChanged(or.Rule, nr.Rule) {
				continue
			}
			for i, ns := range nr.ns {
				if i >= len(or.ns) || or.ns[i] != ns {
					continue // a limit the rule did not have: its keys start afresh
				}
				d.store.Rescale(ns, func(key string) (bucket.Limit, bucket.Limit) {
					return or.LimitsFor([]byte(key))[i], nr.LimitsFor([]byte(key))[i]
				}, now)
			}
		}
	})
}

func limitsChanged(a, b *config.Rule) bool {
	if !slices.Equal(a.Limits, b.Limits) || len(a.Overrides) != len(b.Overrides) {
		return true
	}
	for k, l := range a.Overrides {
		if !slices.Equal(b.Overrides[k], l) {
			return true
		}
	}
	return false
}
