package ruledoc

import (
	"fmt"
	"maps"
	"slices"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// SameMeaning reports whether two parsed rules enforce the same limits.
func SameMeaning(a, b *config.Rule) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Shadow == b.Shadow && a.SoftPercent == b.SoftPercent &&
		slices.Equal(a.Limits, b.Limits) &&
		maps.EqualFunc(a.Overrides, b.Overrides, slices.Equal)
}

// Loosenings lists how after removes or loosens the limits of before by
// more than factor (>= 1), by rule name: a rule deleted, shadow turned on,
// a limit dropped, or a rate or an (effective) burst raised more than
// factor times, for the rule's own limits and for each override key.
// New rules and tighter limits are never listed. The list is sorted by rule.
func Loosenings(before, after map[string]*config.Rule, factor float64) []rulesapi.Loosening {
	var out []rulesapi.Loosening
	for _, name := range slices.Sorted(maps.Keys(before)) {
		b, a := before[name], after[name]
		if a == nil {
			out = append(out, rulesapi.Loosening{Rule: name, Reason: "rule deleted: its keys are no longer limited"})
			continue
		}
		if a.Shadow && !b.Shadow {
			out = append(out, rulesapi.Loosening{Rule: name, Reason: "shadow turned on: the rule no longer denies"})
			continue
		}
		out = append(out, compareLimits(name, "", b.Limits, a.Limits, b.SoftPercent, a.SoftPercent, factor)...)
		keys := map[string]bool{}
		for k := range b.Overrides {
			keys[k] = true
		}
		for k := range a.Overrides {
			keys[k] = true
		}
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			bl, al := b.LimitsFor([]byte(k)), a.LimitsFor([]byte(k))
			if _, inBefore := b.Overrides[k]; !inBefore {
				if _, inAfter := a.Overrides[k]; !inAfter {
					continue
				}
			}
			out = append(out, compareLimits(name, k, bl, al, b.SoftPercent, a.SoftPercent, factor)...)
		}
	}
	return out
}

// compareLimits compares a rule's (or a key's) limits, in order.
func compareLimits(rule, key string, before, after []bucket.Limit, softBefore, softAfter, factor float64) []rulesapi.Loosening {
	var out []rulesapi.Loosening
	if len(after) < len(before) {
		out = append(out, rulesapi.Loosening{Rule: rule, Key: key, Reason: fmt.Sprintf("%d of its %d limits dropped", len(before)-len(after), len(before))})
	}
	for i := range min(len(before), len(after)) {
		b, a := before[i], after[i]
		if f := a.PerSecond() / b.PerSecond(); f > factor {
			out = append(out, rulesapi.Loosening{Rule: rule, Key: key, Factor: round2(f),
				Reason: fmt.Sprintf("rate %d/%s -> %d/%s is %.3gx looser (factor %g)", b.Count(), b.Period(), a.Count(), a.Period(), f, factor)})
			continue
		}
		eb := float64(b.Burst()) * (1 + softBefore/100)
		ea := float64(a.Burst()) * (1 + softAfter/100)
		if f := ea / eb; f > factor {
			out = append(out, rulesapi.Loosening{Rule: rule, Key: key, Factor: round2(f),
				Reason: fmt.Sprintf("burst (with soft_percent) %.6g -> %.6g is %.3gx looser (factor %g)", eb, ea, f, factor)})
		}
	}
	return out
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }
