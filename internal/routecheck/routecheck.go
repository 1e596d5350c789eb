// Package routecheck holds the rules a route's limits must obey, written
// once for the two places routes are built: the proxy's routes file
// (config.ParseProxyRoutes and ProxyRoutes.CheckRules, which add the file,
// line and column) and the HTTP middleware services configure in code
// (httplimit.New, which adds the route). Each function checks one field and
// returns an error saying what is wrong with it, or nil; the caller prefixes
// where it is. It imports the standard library only, so clientlib may use it.
package routecheck

import (
	"fmt"
	"math"
	"time"
)

// Rule checks a limit's rule name: it must be given.
func Rule(rule string) error {
	if rule == "" {
		return fmt.Errorf("rule is missing")
	}
	return nil
}

// Cost checks a limit's cost: 0 means 1, a negative cost is refused.
func Cost(cost int64) error {
	if cost < 0 {
		return fmt.Errorf("cost %d is negative", cost)
	}
	return nil
}

// Shape checks a route's shaping bounds: both must be above zero.
func Shape(maxWait time.Duration, maxQueue int) error {
	if maxWait <= 0 || maxQueue <= 0 {
		return fmt.Errorf("shaping needs max_wait and max_queue above zero (got %s and %d)", maxWait, maxQueue)
	}
	return nil
}

// Elastic checks a route's elastic allowance: a finite extra share and a
// p99 target above zero, and a finite error-rate target not below zero.
func Elastic(extra float64, maxP99 time.Duration, maxErrorRate float64) error {
	if extra <= 0 || maxP99 <= 0 || maxErrorRate < 0 {
		return fmt.Errorf("elastic needs extra and max_p99 above zero and max_error_rate not below zero")
	}
	// NaN passes the comparisons above (and YAML writes it .nan).
	if !finite(extra) || !finite(maxErrorRate) {
		return fmt.Errorf("elastic extra and max_error_rate must be finite numbers")
	}
	return nil
}

// Known checks that a limit's rule exists among the rules it will be
// decided under.
func Known(rule string, known bool) error {
	if !known {
		return fmt.Errorf("rule %q is not defined", rule)
	}
	return nil
}

// WithinBurst checks that one request's cost (0 means 1) fits the rule's
// burst: a cost above it would refuse every request.
func WithinBurst(rule string, cost, burst int64) error {
	if cost = max(cost, 1); cost > burst {
		return fmt.Errorf("cost %d exceeds the burst %d of rule %q: every request would be refused", cost, burst, rule)
	}
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
