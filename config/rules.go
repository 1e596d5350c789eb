package config

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice/bucket"
)

//go:embed default_rules.yaml
var defaultRulesYAML []byte

// DefaultRulesYAML returns the embedded default rules file's text.
func DefaultRulesYAML() []byte { return bytes.Clone(defaultRulesYAML) }

// DefaultRulesSource is the Source of the embedded default rules.
const DefaultRulesSource = "embedded:default_rules.yaml"

// DefaultRules returns the rules embedded in the binary.
func DefaultRules() *Rules {
	r, err := ParseRules(DefaultRulesSource, defaultRulesYAML)
	if err != nil {
		panic(fmt.Sprintf("embedded default rules are invalid: %v", err))
	}
	return r
}

// NoRules returns an empty rule set that admits every check as an unknown
// rule: what a daemon holds when it has no rules to enforce (see
// daemon.NoRulesSource).
func NoRules(source string) *Rules {
	r := &Rules{Source: source, UnknownRule: UnknownRuleAllow, ByName: map[string]*Rule{}}
	r.Hash = hashRules(r)
	return r
}

// UnknownRulePolicy is what a check naming a rule that does not exist gets.
type UnknownRulePolicy int

const (
	// UnknownRuleAllow admits checks of unknown rules (the default: fail open).
	UnknownRuleAllow UnknownRulePolicy = iota
	// UnknownRuleDeny refuses them with the unknown-rule status.
	UnknownRuleDeny
)

func (p UnknownRulePolicy) String() string {
	if p == UnknownRuleDeny {
		return "deny"
	}
	return "allow"
}

// Rule is a named set of limits applied per key, with optional per-key
// overrides. Most rules have one limit; a rule with several (10/s and
// 1000/day) admits a request only if every limit does, and then charges all.
type Rule struct {
	Name string
	// Limits holds at least one limit, each with its algorithm.
	Limits []bucket.Limit
	// Overrides replaces Limits for particular keys; each holds as many
	// limits as the rule, of the same algorithms.
	Overrides map[string][]bucket.Limit
	// Shadow decides and counts but never denies: a request the limit would
	// refuse is admitted (and not charged), and the reply says so.
	Shadow bool
	// SoftPercent admits requests up to this share of the burst below zero
	// (charging them), counted apart from ordinary admissions.
	SoftPercent float64
}

// LimitsFor returns the limits that apply to key: its override's, or the
// rule's. It does not allocate; the slice must not be modified.
func (r *Rule) LimitsFor(key []byte) []bucket.Limit {
	if len(r.Overrides) > 0 {
		if l, ok := r.Overrides[string(key)]; ok {
			return l
		}
	}
	return r.Limits
}

// LimitFor returns the first of the limits that apply to key (the only one,
// for most rules). It does not allocate.
func (r *Rule) LimitFor(key []byte) bucket.Limit { return r.LimitsFor(key)[0] }

// Rules is a validated rule set. It is immutable once parsed.
type Rules struct {
	// Source names where the rules came from: a path, or DefaultRulesSource.
	Source string
	// UnknownRule is the policy for checks naming no rule here.
	UnknownRule UnknownRulePolicy
	// ByName holds the rules by name.
	ByName map[string]*Rule
	// Hash identifies the rules' content (not their formatting), so nodes can
	// tell whether they enforce the same rules.
	Hash string
	// Envoy, when set, is the envoyproxy/ratelimit configuration whose
	// translated rules ByName holds too (see WithEnvoy).
	Envoy *Envoy
}

// Names returns the rule names in sorted order.
func (r *Rules) Names() []string {
	names := make([]string, 0, len(r.ByName))
	for n := range r.ByName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// MaxRulesBytes caps a rules document, from a file or a rules service, so
// a runaway generator or a wrong path (a log file, /dev/zero) cannot make the
// daemon read without end.
const MaxRulesBytes = 4 << 20

// ErrRulesTooLarge reports a rules document larger than MaxRulesBytes.
var ErrRulesTooLarge = errors.New("rules document too large")

// LoadRules reads and validates the rules file at path.
func LoadRules(path string) (*Rules, error) {
	data, err := ReadRulesFile(path)
	if err != nil {
		return nil, err
	}
	return ParseRules(path, data)
}

// ReadRulesFile reads the rules file at path, refusing one larger than
// MaxRulesBytes (with an error naming the file and the cap, wrapping
// ErrRulesTooLarge) without reading more than one byte past the cap.
func ReadRulesFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load rules: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxRulesBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load rules %s: %w", path, err)
	}
	if len(data) > MaxRulesBytes {
		return nil, fmt.Errorf("load rules %s: %w: larger than the cap of %d bytes", path, ErrRulesTooLarge, MaxRulesBytes)
	}
	return data, nil
}

// Limits on names, so a rules file cannot make the daemon hold absurd strings.
const (
	maxRuleNameLen = 128
	maxRules       = 10_000
	maxOverrides   = 100_000
	maxLimits      = 8 // limits in one rule
)

var ruleNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

// ParseRules validates a rules file's contents. source names the file in
// errors. Every problem found is reported, each as a *FieldError naming the
// line and field; the returned error wraps them all.
func ParseRules(source string, data []byte) (*Rules, error) {
	p := &parser{source: source}
	rules := p.parse(data)
	if len(p.errs) > 0 {
		return nil, fmt.Errorf("invalid rules: %w", errors.Join(p.errs...))
	}
	rules.Source = source
	rules.Hash = hashRules(rules)
	return rules, nil
}

// FieldError is one problem in a rules file.
type FieldError struct {
	File   string
	Line   int
	Column int
	Field  string // dotted path, e.g. rules.api.burst
	Msg    string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Column, e.Field, e.Msg)
}

type parser struct {
	source string
	errs   []error
}

func (p *parser) fail(n *yaml.Node, field, format string, args ...any) {
	line, col := 1, 1
	if n != nil {
		line, col = n.Line, n.Column
	}
	p.errs = append(p.errs, &FieldError{File: p.source, Line: line, Column: col, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) parse(data []byte) *Rules {
	rules := &Rules{ByName: map[string]*Rule{}}
	var doc yaml.Node
	if !p.document(data, &doc) {
		return rules
	}
	if len(doc.Content) == 0 {
		p.fail(nil, "", "file is empty: expected a mapping with a rules: section")
		return rules
	}
	root := doc.Content[0]
	p.fields(root, "", func(key string, v *yaml.Node) {
		switch key {
		case "unknown_rule":
			switch v.Value {
			case "allow":
				rules.UnknownRule = UnknownRuleAllow
			case "deny":
				rules.UnknownRule = UnknownRuleDeny
			default:
				p.fail(v, "unknown_rule", "must be allow or deny, got %q", v.Value)
			}
		case "rules":
			p.entries(v, "rules", func(name string, kn, rv *yaml.Node) {
				path := "rules." + name
				switch {
				case len(name) > maxRuleNameLen:
					p.fail(kn, path, "rule name longer than %d bytes", maxRuleNameLen)
					return
				case !ruleNamePattern.MatchString(name):
					p.fail(kn, path, "rule name must start with a letter or digit and use only letters, digits and . _ : -")
					return
				case len(rules.ByName) >= maxRules:
					p.fail(kn, path, "more than %d rules", maxRules)
					return
				}
				if r := p.rule(name, rv, path); r != nil {
					rules.ByName[name] = r
				}
			})
		default:
			p.fail(v, key, "unknown field (known: unknown_rule, rules)")
		}
	})
	return rules
}

// document parses data into doc, reporting a syntax error (false) with
// its line.
func (p *parser) document(data []byte, doc *yaml.Node) bool {
	err := yaml.Unmarshal(data, doc)
	if err == nil {
		return true
	}
	// yaml.v3 reports syntax errors as "yaml: line N: msg".
	line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, m, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				line, msg = l, m
			}
		}
	}
	p.errs = append(p.errs, &FieldError{File: p.source, Line: line, Column: 1, Msg: "yaml syntax: " + msg})
	return false
}

// fields walks a mapping node, rejecting non-mappings and duplicate keys.
func (p *parser) fields(n *yaml.Node, path string, each func(key string, v *yaml.Node)) {
	p.entries(n, path, func(key string, _, v *yaml.Node) { each(key, v) })
}

func (p *parser) entries(n *yaml.Node, path string, each func(key string, kn, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "expected a mapping, got %s", kindName(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := k.Value
		if path != "" {
			field = path + "." + k.Value
		}
		if seen[k.Value] {
			p.fail(k, field, "defined more than once")
			continue
		}
		seen[k.Value] = true
		each(k.Value, k, v)
	}
}

// known returns a mapping's fields by name, reporting any field not in names.
func (p *parser) known(n *yaml.Node, path string, names ...string) map[string]*yaml.Node {
	got := map[string]*yaml.Node{}
	p.fields(n, path, func(key string, v *yaml.Node) {
		if !slices.Contains(names, key) {
			field := key
			if path != "" {
				field = path + "." + key
			}
			p.fail(v, field, "unknown field (known: %s)", strings.Join(names, ", "))
			return
		}
		got[key] = v
	})
	return got
}

func (p *parser) rule(name string, n *yaml.Node, path string) *Rule {
	before := len(p.errs)
	f := p.known(n, path, "rate", "burst", "algorithm", "limits", "overrides", "shadow", "soft_percent")
	if len(p.errs) > before {
		return nil
	}
	var specs []limitSpec
	switch limitsNode := f["limits"]; {
	case limitsNode != nil && (f["rate"] != nil || f["burst"] != nil || f["algorithm"] != nil):
		p.fail(limitsNode, path+".limits", "give either limits: or rate/burst/algorithm, not both")
		return nil
	case limitsNode != nil:
		specs = p.limitList(limitsNode, path+".limits", nil)
	case f["rate"] == nil:
		p.fail(n, path+".rate", "missing: every rule needs a rate such as 100/1s (or a limits: list)")
		return nil
	default:
		if spec, ok := p.limit(f["rate"], f["burst"], f["algorithm"], bucket.AlgoTokenBucket, path); ok {
			specs = []limitSpec{spec}
		}
	}
	if len(p.errs) > before {
		return nil
	}
	r := &Rule{Name: name, Limits: make([]bucket.Limit, len(specs))}
	for i, s := range specs {
		r.Limits[i] = s.lim
	}
	if v := f["shadow"]; v != nil {
		switch v.Value {
		case "true":
			r.Shadow = true
		case "false":
		default:
			p.fail(v, path+".shadow", "must be true or false, got %q", v.Value)
			return nil
		}
	}
	if v := f["soft_percent"]; v != nil {
		pct, err := strconv.ParseFloat(v.Value, 64)
		if err != nil || !(pct >= 0 && pct <= 1000) { // NaN fails both comparisons
			p.fail(v, path+".soft_percent", "must be a number from 0 to 1000, got %q", v.Value)
			return nil
		}
		r.SoftPercent = pct
	}
	if overridesNode := f["overrides"]; overridesNode != nil {
		r.Overrides = map[string][]bucket.Limit{}
		p.entries(overridesNode, path+".overrides", func(key string, kn, v *yaml.Node) {
			opath := path + ".overrides." + key
			if key == "" {
				p.fail(kn, opath, "override key is empty")
				return
			}
			if len(r.Overrides) >= maxOverrides {
				p.fail(kn, opath, "more than %d overrides", maxOverrides)
				return
			}
			if ol := p.override(v, opath, specs); ol != nil {
				r.Overrides[key] = ol
			}
		})
	}
	if len(p.errs) > before {
		return nil
	}
	return r
}

// limitSpec is a parsed limit and the node its rate came from, which an
// override that changes only the burst reuses.
type limitSpec struct {
	lim      bucket.Limit
	rateNode *yaml.Node
}

// limitList parses a rule's limits: list, or an override's when base holds
// the rule's limits (an override changes rates and bursts, not algorithms).
func (p *parser) limitList(n *yaml.Node, path string, base []limitSpec) []limitSpec {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.fail(n, path, "expected a list of limits such as [{rate: 10/1s}, {rate: 1000/1d, algorithm: fixed_window}], got %s", kindName(n))
		return nil
	}
	if len(n.Content) > maxLimits {
		p.fail(n, path, "%d limits; a rule holds at most %d", len(n.Content), maxLimits)
		return nil
	}
	if base != nil && len(n.Content) != len(base) {
		p.fail(n, path, "%d limits; the rule has %d and an override gives a rate (or burst) for each, in order", len(n.Content), len(base))
		return nil
	}
	specs := make([]limitSpec, 0, len(n.Content))
	for i, ln := range n.Content {
		lpath := fmt.Sprintf("%s[%d]", path, i)
		if base != nil {
			f := p.known(ln, lpath, "rate", "burst")
			if spec, ok := p.overrideLimit(ln, f, lpath, base[i]); ok {
				specs = append(specs, spec)
			}
			continue
		}
		f := p.known(ln, lpath, "rate", "burst", "algorithm")
		if f["rate"] == nil {
			if ln.Kind == yaml.MappingNode {
				p.fail(ln, lpath+".rate", "missing: every limit needs a rate such as 100/1s")
			}
			continue
		}
		if spec, ok := p.limit(f["rate"], f["burst"], f["algorithm"], bucket.AlgoTokenBucket, lpath); ok {
			specs = append(specs, spec)
		}
	}
	if len(specs) != len(n.Content) {
		return nil
	}
	return specs
}

// override parses one key's override of a rule whose limits are base.
func (p *parser) override(n *yaml.Node, path string, base []limitSpec) []bucket.Limit {
	if len(base) == 0 {
		return nil // the rule's own limits were bad: already reported
	}
	var specs []limitSpec
	if len(base) > 1 {
		f := p.known(n, path, "limits")
		if f["limits"] == nil {
			if n.Kind == yaml.MappingNode {
				p.fail(n, path+".limits", "missing: the rule has %d limits, so an override gives limits: with a rate (or burst) for each", len(base))
			}
			return nil
		}
		specs = p.limitList(f["limits"], path+".limits", base)
	} else {
		f := p.known(n, path, "rate", "burst")
		spec, ok := p.overrideLimit(n, f, path, base[0])
		if !ok {
			return nil
		}
		specs = []limitSpec{spec}
	}
	if specs == nil {
		return nil
	}
	out := make([]bucket.Limit, len(specs))
	for i, s := range specs {
		out[i] = s.lim
	}
	return out
}

// overrideLimit parses an override's rate and burst for a limit of the rule;
// either may be left out (the rule's rate is kept; the burst defaults as usual).
func (p *parser) overrideLimit(n *yaml.Node, f map[string]*yaml.Node, path string, base limitSpec) (limitSpec, bool) {
	if f["rate"] == nil && f["burst"] == nil {
		if n.Kind == yaml.MappingNode {
			p.fail(n, path, "an override needs a rate or a burst")
		}
		return limitSpec{}, false
	}
	rate := f["rate"]
	if rate == nil {
		rate = base.rateNode // an override of the burst alone keeps the rule's rate
	}
	return p.limit(rate, f["burst"], nil, base.lim.Algorithm(), path)
}

// limit parses a rate, an optional burst and an optional algorithm (def when absent).
func (p *parser) limit(rateNode, burstNode, algoNode *yaml.Node, def bucket.Algorithm, path string) (limitSpec, bool) {
	count, period, err := ParseRate(rateNode.Value)
	if err != nil || rateNode.Kind != yaml.ScalarNode {
		if err == nil {
			err = fmt.Errorf("rate must be text such as 100/1s, got %s", kindName(rateNode))
		}
		p.fail(rateNode, path+".rate", "%v", err)
		return limitSpec{}, false
	}
	algo := def
	if algoNode != nil {
		a, err := bucket.ParseAlgorithm(algoNode.Value)
		if err != nil || algoNode.Kind != yaml.ScalarNode {
			p.fail(algoNode, path+".algorithm", "unknown algorithm %q (known: %s)", algoNode.Value, algorithmList())
			return limitSpec{}, false
		}
		algo = a
	}
	burst := count
	if burstNode != nil {
		if !algo.HasBurst() {
			p.fail(burstNode, path+".burst", "%s has no burst: it admits the rate's count per period", algo)
			return limitSpec{}, false
		}
		b, err := strconv.ParseInt(burstNode.Value, 10, 64)
		if err != nil || burstNode.Kind != yaml.ScalarNode || b <= 0 {
			p.fail(burstNode, path+".burst", "must be a positive whole number, got %q", burstNode.Value)
			return limitSpec{}, false
		}
		burst = b
	}
	lim, err := bucket.NewLimitOf(algo, count, period, burst)
	if err != nil {
		p.fail(rateNode, path, "%v", err)
		return limitSpec{}, false
	}
	return limitSpec{lim: lim, rateNode: rateNode}, true
}

func algorithmList() string {
	var names []string
	for _, a := range bucket.Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// maxPeriodDays is the most days a time.Duration can hold.
const maxPeriodDays = math.MaxInt64 / int64(24*time.Hour)

// ParseRate parses "COUNT/PERIOD": a positive whole count and a period that is
// a Go duration ("1s", "500ms", "1h30m") or a bare unit ("s", "m", "h", "d" or
// "second", "minute", "hour", "day"), e.g. "100/1s", "5000/1h", "10/m".
func ParseRate(s string) (count int64, period time.Duration, err error) {
	cs, ps, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("rate %q: want COUNT/PERIOD, e.g. 100/1s", s)
	}
	count, err = strconv.ParseInt(strings.TrimSpace(cs), 10, 64)
	if err != nil || count <= 0 {
		return 0, 0, fmt.Errorf("rate %q: count must be a positive whole number", s)
	}
	ps = strings.TrimSpace(ps)
	switch ps {
	case "s", "sec", "second":
		period = time.Second
	case "m", "min", "minute":
		period = time.Minute
	case "h", "hour":
		period = time.Hour
	case "d", "day":
		period = 24 * time.Hour
	default:
		if d, ok := strings.CutSuffix(ps, "d"); ok {
			days, derr := strconv.ParseInt(d, 10, 64)
			if derr == nil && days > 0 {
				// A duration holds about 292 years: more days would wrap
				// around to a wrong (even short) period.
				if days > maxPeriodDays {
					return 0, 0, fmt.Errorf("rate %q: period longer than %d days", s, maxPeriodDays)
				}
				period = time.Duration(days) * 24 * time.Hour
				break
			}
		}
		period, err = time.ParseDuration(ps)
		if err != nil || period <= 0 {
			return 0, 0, fmt.Errorf("rate %q: period must be a positive duration such as 1s, 1m, 1h or 1d", s)
		}
	}
	return count, period, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Value == "" {
			return "nothing"
		}
		return fmt.Sprintf("the value %q", n.Value)
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	default:
		return "a mapping"
	}
}

// hashRules fingerprints the rules' meaning: sorted names, limits and overrides.
func hashRules(r *Rules) string {
	h := sha256.New()
	fmt.Fprintf(h, "unknown=%s\n", r.UnknownRule)
	for _, name := range r.Names() {
		rule := r.ByName[name]
		fmt.Fprintf(h, "%s=%s shadow=%v soft=%g\n", name, limitsString(rule.Limits), rule.Shadow, rule.SoftPercent)
		keys := make([]string, 0, len(rule.Overrides))
		for k := range rule.Overrides {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(h, "%s[%q]=%s\n", name, k, limitsString(rule.Overrides[k]))
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// limitsString formats limits for the rules hash: a single limit exactly as
// before rules could hold several, so a rules file's hash does not change
// across versions unless its meaning does.
func limitsString(ls []bucket.Limit) string {
	if len(ls) == 1 {
		return ls[0].String()
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.String()
	}
	return "[" + strings.Join(parts, "; ") + "]"
}
