package daemon

import "github.com/sluicelabs/sluice/config"

// RuleBurst returns the most tokens one request may take under rule (the
// smallest burst of its limits) in the rules now in force, and whether the
// rule exists. With it, httplimit.New refuses routes that could never be
// admitted (httplimit.RuleChecker).
func (l Local) RuleBurst(rule string) (int64, bool) { return config.RuleBurst(l.d.Rules(), rule) }

// RuleBurst is Local's RuleBurst (see there).
func (e *Embedded) RuleBurst(rule string) (int64, bool) { return e.d.Local().RuleBurst(rule) }
