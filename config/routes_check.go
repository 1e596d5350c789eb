package config

import (
	"errors"
	"fmt"

	"github.com/sluicelabs/sluice/internal/routecheck"
)

// ErrInvalidRoutes is wrapped by CheckRules' error when a routes file names
// a rule that does not exist or costs more than a rule's burst.
var ErrInvalidRoutes = errors.New("invalid routes")

// RuleLookup says whether a rule exists and the most tokens one request may
// take under it (its burst). An error means the rules could not be read
// (a daemon not reachable): nothing is known either way.
type RuleLookup func(rule string) (burst int64, known bool, err error)

// RuleBurst returns the most tokens one request may take under the named
// rule of rs (the smallest burst of the rule's limits; per-key overrides are
// not considered), and whether the rule exists.
func RuleBurst(rs *Rules, name string) (int64, bool) {
	r, ok := rs.ByName[name]
	if !ok || len(r.Limits) == 0 {
		return 0, false
	}
	burst := r.Limits[0].Burst()
	for _, l := range r.Limits[1:] {
		burst = min(burst, l.Burst())
	}
	return burst, true
}

// RulesLookup looks rules up in rs.
func RulesLookup(rs *Rules) RuleLookup {
	return func(rule string) (int64, bool, error) {
		b, ok := RuleBurst(rs, rule)
		return b, ok, nil
	}
}

// CheckRules checks every limit of the routes against the rules lookup
// knows: a limit naming a rule that does not exist, or costing more than the
// rule's burst, would leave its route unlimited or refuse every request on
// it, so each is reported as a *FieldError naming the file, line and column,
// all joined under ErrInvalidRoutes. If lookup fails, CheckRules returns its
// error (wrapped), and no *FieldError: the routes are neither good nor bad.
// Each rule is looked up once.
func (r *ProxyRoutes) CheckRules(lookup RuleLookup) error {
	type answer struct {
		burst int64
		known bool
	}
	seen := map[string]answer{}
	var errs []error
	check := func(path string, limits []ProxyLimit, pos []limitPos) error {
		for i, l := range limits {
			a, ok := seen[l.Rule]
			if !ok {
				b, known, err := lookup(l.Rule)
				if err != nil {
					return fmt.Errorf("check routes %s against the rules: rule %q: %w", r.source, l.Rule, err)
				}
				a = answer{b, known}
				seen[l.Rule] = a
			}
			var p limitPos
			if i < len(pos) {
				p = pos[i]
			}
			field := fmt.Sprintf("%s[%d]", path, i)
			if err := routecheck.Known(l.Rule, a.known); err != nil {
				errs = append(errs, &FieldError{File: r.source, Line: max(p.rule.line, 1), Column: max(p.rule.col, 1), Field: field + ".rule",
					Msg: err.Error() + " in the daemon's rules"})
			} else if err := routecheck.WithinBurst(l.Rule, l.Cost, a.burst); err != nil {
				errs = append(errs, &FieldError{File: r.source, Line: max(p.cost.line, 1), Column: max(p.cost.col, 1), Field: field + ".cost",
					Msg: err.Error()})
			}
		}
		return nil
	}
	if err := check("default", r.Default, r.pos.def); err != nil {
		return err
	}
	for i, rt := range r.Routes {
		var pos []limitPos
		if i < len(r.pos.routes) {
			pos = r.pos.routes[i]
		}
		if err := check(fmt.Sprintf("routes[%d].limits", i), rt.Limits, pos); err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidRoutes, errors.Join(errs...))
	}
	return nil
}

// Source names the file the routes were read from ("" for routes built in code).
func (r *ProxyRoutes) Source() string { return r.source }
