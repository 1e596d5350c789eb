package ruledoc

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// CheckName reports whether name is a valid team or rule name; what names
// the kind of name in the error.
func CheckName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s name is empty", what)
	case len(name) > rulesapi.MaxNameLen:
		return fmt.Errorf("%s name %q is longer than %d bytes", what, name, rulesapi.MaxNameLen)
	case !rulesapi.ValidName(name):
		// DNS-label style, so that "<team>.<rule>" is always a valid
		// daemon rule name and splits back at its one dot.
		return fmt.Errorf("%s name %q: use lowercase letters, digits and inner dashes only (like a DNS label)", what, name)
	}
	return nil
}

// ServedName is a rule's name in the served document.
func ServedName(team, rule string) string { return team + "." + rule }

// lineBreaks turns every line break YAML knows (CR LF, CR, NEL, LS, PS)
// into LF, so that Compose indents every line the parser will see: a break
// it did not split on would start a line at column 0, outside the rule.
var lineBreaks = strings.NewReplacer("\r\n", "\n", "\r", "\n", "\u0085", "\n", "\u2028", "\n", "\u2029", "\n")

// NormalizeSpec makes every line break LF, trims the spec's surrounding
// blank space and ends it with one newline.
func NormalizeSpec(spec string) string {
	return strings.TrimSpace(lineBreaks.Replace(spec)) + "\n"
}

// Entry is one rule of a document: its name in the document and its spec.
type Entry struct {
	Name string
	Spec string
}

// Compose writes a rules document holding entries, in order, each spec
// indented under its name (so a problem's line in a spec is its line in
// the document less the lines before it). No entries give "rules: {}".
func Compose(entries []Entry) string {
	if len(entries) == 0 {
		return "rules: {}\n"
	}
	var b strings.Builder
	b.WriteString("rules:\n")
	for _, e := range entries {
		b.WriteString("  " + e.Name + ":\n")
		for line := range strings.SplitSeq(strings.TrimSuffix(NormalizeSpec(e.Spec), "\n"), "\n") {
			if line == "" {
				b.WriteString("\n")
				continue
			}
			b.WriteString("    " + line + "\n")
		}
	}
	return b.String()
}

// ServedDocument composes the document daemons are served from every
// team's rules (sorted by team and name by the caller) and validates it
// with the daemon's parser: it is never returned invalid. The error of an
// invalid document lists its problems.
func ServedDocument(rules []rulesapi.Rule) (string, *config.Rules, error) {
	entries := make([]Entry, len(rules))
	for i, r := range rules {
		entries[i] = Entry{Name: ServedName(r.Team, r.Name), Spec: r.Spec}
	}
	doc := Compose(entries)
	if len(doc) > config.MaxRulesBytes {
		return "", nil, fmt.Errorf("served document: %w: %d bytes, over the daemon's cap of %d", config.ErrRulesTooLarge, len(doc), config.MaxRulesBytes)
	}
	parsed, err := config.ParseRules("sluice-rules", []byte(doc))
	if err != nil {
		return "", nil, fmt.Errorf("served document: %w", err)
	}
	// The document holds exactly the rules it was composed from: no spec
	// added, hid or renamed one (another team's, say).
	if len(parsed.ByName) != len(entries) {
		return "", nil, fmt.Errorf("served document: %d rules parsed from %d stored", len(parsed.ByName), len(entries))
	}
	for _, e := range entries {
		if parsed.ByName[e.Name] == nil {
			return "", nil, fmt.Errorf("served document: rule %s missing after parsing", e.Name)
		}
	}
	return doc, parsed, nil
}

// InvalidError is rules the daemon's parser refused.
type InvalidError struct {
	Problems []rulesapi.FieldProblem
}

func (e *InvalidError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "invalid rules: " + strings.Join(parts, "; ")
}

// fieldErrors returns every *config.FieldError err holds.
func fieldErrors(err error) []*config.FieldError {
	var out []*config.FieldError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		var fe *config.FieldError
		if errors.As(err, &fe) && fe == err {
			out = append(out, fe)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	if len(out) == 0 {
		var fe *config.FieldError
		if errors.As(err, &fe) {
			out = append(out, fe)
		}
	}
	return out
}

// problems maps the parser's errors to problems naming the rule (as
// ruleOf returns it for the document's name) and the field within it,
// with lines and columns moved by lineShift and colShift.
func problems(err error, ruleOf func(docName string) string, lineShift, colShift int) []rulesapi.FieldProblem {
	var out []rulesapi.FieldProblem
	for _, fe := range fieldErrors(err) {
		p := rulesapi.FieldProblem{Line: fe.Line + lineShift, Column: fe.Column + colShift, Message: fe.Msg}
		if p.Line < 1 || p.Column < 1 {
			p.Line, p.Column = 0, 0
		}
		if rest, ok := strings.CutPrefix(fe.Field, "rules."); ok {
			// rest is "<name>" or "<name>.<field...>"; a document name
			// holds at most one dot (team.rule), which ruleOf resolves.
			name, field := splitName(rest, ruleOf)
			p.Rule, p.Field = ruleOf(name), field
		} else if fe.Field != "" {
			p.Field = fe.Field
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		out = append(out, rulesapi.FieldProblem{Message: err.Error()})
	}
	return out
}

// splitName splits "name.field.path" at the end of the longest prefix
// ruleOf knows (it returns "" for names it does not).
func splitName(s string, ruleOf func(string) string) (name, field string) {
	for i := len(s); i > 0; i-- {
		if i < len(s) && s[i] != '.' && s[i] != '[' {
			continue
		}
		if ruleOf(s[:i]) != "" {
			return s[:i], strings.TrimPrefix(s[i:], ".")
		}
	}
	name, field, _ = strings.Cut(s, ".")
	return name, field
}

// ParseSpec validates one rule's spec as the daemon would, as the rule
// rule of team. It returns the parsed rule, or an *InvalidError whose lines
// are the spec's own.
func ParseSpec(team, rule, spec string) (*config.Rule, error) {
	if err := CheckName("rule", rule); err != nil {
		return nil, &InvalidError{Problems: []rulesapi.FieldProblem{{Rule: rule, Message: err.Error()}}}
	}
	served := ServedName(team, rule)
	doc := Compose([]Entry{{Name: served, Spec: spec}})
	parsed, err := config.ParseRules("rule "+rule, []byte(doc))
	if err != nil {
		ruleOf := func(n string) string {
			if n == served {
				return rule
			}
			return ""
		}
		return nil, &InvalidError{Problems: problems(err, ruleOf, -2, -4)}
	}
	// Exactly the one rule: a spec that reached outside its rule (it
	// cannot, being indented line by line, but this is the check that
	// counts) would define others.
	r := parsed.ByName[served]
	if r == nil || len(parsed.ByName) != 1 {
		return nil, &InvalidError{Problems: []rulesapi.FieldProblem{{Rule: rule, Message: "the spec must define this rule's fields only"}}}
	}
	return r, nil
}

// ParseTeamDocument validates a team's rules file (its own rule names under
// "rules:", nothing else) and splits it into one spec per rule, sorted by
// name. Problems name the rule and field, with the document's lines.
func ParseTeamDocument(team, document string) ([]Entry, map[string]*config.Rule, error) {
	parsed, err := config.ParseRules("team "+team, []byte(document))
	if err != nil {
		// The team's names hold no dot (CheckName): the rule is the
		// first element of the field's path.
		ruleOf := func(n string) string {
			if strings.ContainsAny(n, ".[") {
				return ""
			}
			return n
		}
		return nil, nil, &InvalidError{Problems: problems(err, ruleOf, 0, 0)}
	}
	var invalid []rulesapi.FieldProblem
	if hasTopKey(document, "unknown_rule") {
		invalid = append(invalid, rulesapi.FieldProblem{Field: "unknown_rule", Message: "unknown_rule is the service's, not a team's: leave it out"})
	}
	if len(parsed.ByName) > rulesapi.MaxRulesPerTeam {
		invalid = append(invalid, rulesapi.FieldProblem{Field: "rules", Message: fmt.Sprintf("%d rules; a team holds at most %d", len(parsed.ByName), rulesapi.MaxRulesPerTeam)})
	}
	for _, name := range parsed.Names() {
		if err := CheckName("rule", name); err != nil {
			invalid = append(invalid, rulesapi.FieldProblem{Rule: name, Message: err.Error()})
		}
	}
	if len(invalid) > 0 {
		return nil, nil, &InvalidError{Problems: invalid}
	}
	specs, err := splitSpecs(document)
	if err != nil {
		return nil, nil, &InvalidError{Problems: []rulesapi.FieldProblem{{Message: err.Error()}}}
	}
	entries := make([]Entry, 0, len(parsed.ByName))
	for _, name := range parsed.Names() {
		entries = append(entries, Entry{Name: name, Spec: specs[name]})
	}
	return entries, parsed.ByName, nil
}

func hasTopKey(document, key string) bool {
	var doc yaml.Node
	if yaml.Unmarshal([]byte(document), &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return false
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == key {
			return true
		}
	}
	return false
}

// splitSpecs returns each rule's body under "rules:" re-encoded as YAML.
func splitSpecs(document string) (map[string]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(document), &doc); err != nil {
		return nil, fmt.Errorf("split document: %w", err)
	}
	out := map[string]string{}
	if len(doc.Content) == 0 {
		return out, nil
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "rules" {
			continue
		}
		rules := root.Content[i+1]
		for j := 0; j+1 < len(rules.Content); j += 2 {
			var b bytes.Buffer
			enc := yaml.NewEncoder(&b)
			enc.SetIndent(2)
			body := rules.Content[j+1]
			if body.Style&yaml.FlowStyle != 0 {
				body.Style &^= yaml.FlowStyle // a block mapping under the name
			}
			if err := enc.Encode(body); err != nil {
				return nil, fmt.Errorf("split document: rule %s: %w", rules.Content[j].Value, err)
			}
			enc.Close()
			out[rules.Content[j].Value] = NormalizeSpec(b.String())
		}
	}
	return out, nil
}

// TeamDocument composes a team's rules file (its own names) from its rules.
func TeamDocument(rules []rulesapi.Rule) string {
	entries := make([]Entry, len(rules))
	for i, r := range rules {
		entries[i] = Entry{Name: r.Name, Spec: r.Spec}
	}
	return Compose(entries)
}

// ParseTeamRules parses stored rules (valid by construction) by their
// team's names, for comparing versions.
func ParseTeamRules(rules []rulesapi.Rule) (map[string]*config.Rule, error) {
	parsed, err := config.ParseRules("stored", []byte(TeamDocument(rules)))
	if err != nil {
		return nil, fmt.Errorf("parse stored rules: %w", err)
	}
	return parsed.ByName, nil
}
