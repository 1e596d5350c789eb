package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice/bucket"
)

// This file reads the configuration format of envoyproxy/ratelimit (one
// domain per file, nested descriptors of key and optional value, a
// rate_limit at any level) and translates it into Sluice rules: every
// descriptor with a rate_limit becomes a rule named EnvoyRulePrefix + a hash
// of its domain and descriptor path, with one fixed_window limit of
// requests_per_unit per unit (windows aligned to the Unix epoch, as
// ratelimit's are). What is supported is listed in EnvoyFields.

// EnvoyRulePrefix starts the name of every rule translated from an Envoy
// descriptor. '/' cannot appear in a rules file's rule names, so translated
// rules never collide with written ones.
const EnvoyRulePrefix = "envoy/"

// EnvoyUnits are the units a rate_limit may name, with their windows.
// ratelimit's month and year are refused: they are not fixed durations.
var EnvoyUnits = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
}

// Envoy is a validated envoyproxy/ratelimit configuration: descriptor trees
// by domain and the Sluice rules they translate into. It is immutable once
// parsed.
type Envoy struct {
	// Source is the file or directory it was read from.
	Source string
	// Rules are the translated rules, by name.
	Rules   map[string]*Rule
	domains map[string]*EnvoyNode
	// Hash identifies the configuration's meaning.
	Hash string
}

// EnvoyLimit is a descriptor's rate_limit.
type EnvoyLimit struct {
	// Rule is the translated rule's name; empty when Unlimited or when
	// RequestsPerUnit is 0 (every request over the limit, as in ratelimit).
	Rule            string
	RequestsPerUnit uint32
	// Unit is the lower-case unit name ("second", ..., "week").
	Unit      string
	Period    time.Duration
	Unlimited bool
	Shadow    bool
	// Name and Replaces: a matched limit whose Name another matched limit
	// of the same request replaces is not applied.
	Name     string
	Replaces []string
}

// EnvoyNode is one level of a domain's descriptor tree.
type EnvoyNode struct {
	// Limit is this descriptor's rate_limit, nil when it has none.
	Limit    *EnvoyLimit
	exact    map[envoyPair]*EnvoyNode
	anyValue map[string]*EnvoyNode
	prefixes []envoyPrefix
}

type envoyPair struct{ key, value string }

type envoyPrefix struct {
	key, prefix string
	node        *EnvoyNode
}

// EnvoyEntry is one entry of a request's descriptor.
type EnvoyEntry struct{ Key, Value string }

// Lookup finds the limit for a request descriptor's entries in domain, as
// envoyproxy/ratelimit does: at each level an entry matches a descriptor
// with its key and value first, then one whose value is a prefix ending in
// '*', then one with its key and no value; the limit applies only when the
// last entry lands on a descriptor with a rate_limit. Nil means no limit
// applies (the descriptor is OK). It does not allocate.
func (e *Envoy) Lookup(domain string, entries []EnvoyEntry) *EnvoyLimit {
	if e == nil {
		return nil
	}
	n := e.domains[domain]
	if n == nil {
		return nil
	}
	for i, en := range entries {
		next := n.child(en.Key, en.Value)
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			return next.Limit
		}
		n = next
	}
	return nil
}

func (n *EnvoyNode) child(key, value string) *EnvoyNode {
	if c := n.exact[envoyPair{key, value}]; c != nil {
		return c
	}
	for _, p := range n.prefixes {
		if p.key == key && strings.HasPrefix(value, p.prefix) {
			return p.node
		}
	}
	return n.anyValue[key]
}

// Domains returns the configured domains, sorted.
func (e *Envoy) Domains() []string { return slices.Sorted(maps.Keys(e.domains)) }

// WithEnvoy returns a copy of r holding e's translated rules as well, and e
// for the Envoy rate limit service to match requests against. A nil e
// returns r.
func (r *Rules) WithEnvoy(e *Envoy) *Rules {
	if e == nil {
		return r
	}
	out := *r
	out.ByName = make(map[string]*Rule, len(r.ByName)+len(e.Rules))
	maps.Copy(out.ByName, r.ByName)
	maps.Copy(out.ByName, e.Rules)
	out.Envoy = e
	sum := sha256.Sum256([]byte(hashRules(&out) + "\n" + e.Hash))
	out.Hash = hex.EncodeToString(sum[:])[:16]
	return &out
}

// envoyKnown are the descriptor fields read; envoyIgnored are accepted and
// ignored (they only shape ratelimit's own statistics); envoyRefused are
// ratelimit features Sluice does not implement, refused rather than
// silently misread.
var (
	envoyKnown   = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "value_to_metric"}
	envoyRefused = []string{"quota_mode", "share_threshold", "metadata"}
)

// LoadEnvoy reads an envoyproxy/ratelimit configuration: one file, or every
// *.yaml and *.yml file directly in a directory (sorted by name), one domain
// per file. Every problem in every file is reported, each as a *FieldError.
func LoadEnvoy(path string) (*Envoy, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load envoy config: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("load envoy config: %w", err)
		}
		files = files[:0]
		for _, ent := range ents {
			if ext := filepath.Ext(ent.Name()); !ent.IsDir() && (ext == ".yaml" || ext == ".yml") {
				files = append(files, filepath.Join(path, ent.Name()))
			}
		}
	}
	docs := make([]EnvoyFile, 0, len(files))
	for _, f := range files {
		data, err := ReadRulesFile(f)
		if err != nil {
			return nil, fmt.Errorf("load envoy config: %w", err)
		}
		docs = append(docs, EnvoyFile{Name: f, Data: data})
	}
	return ParseEnvoy(path, docs...)
}

// EnvoyFile is one configuration file's name and content.
type EnvoyFile struct {
	Name string
	Data []byte
}

// ParseEnvoy validates envoyproxy/ratelimit configuration files (one domain
// each) and translates them; source names them all (a directory or a file).
func ParseEnvoy(source string, files ...EnvoyFile) (*Envoy, error) {
	e := &Envoy{Source: source, Rules: map[string]*Rule{}, domains: map[string]*EnvoyNode{}}
	var errs []error
	h := sha256.New()
	for _, f := range files {
		p := &parser{source: f.Name}
		(&envoyParser{parser: p, e: e, hash: h}).file(f.Data)
		errs = append(errs, p.errs...)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid envoy config: %w", errors.Join(errs...))
	}
	e.Hash = hex.EncodeToString(h.Sum(nil))[:16]
	return e, nil
}

type envoyParser struct {
	*parser
	e    *Envoy
	hash interface{ Write([]byte) (int, error) }
}

func (p *envoyParser) file(data []byte) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if n, m, ok := strings.Cut(rest, ": "); ok {
				if l, err := strconv.Atoi(n); err == nil {
					line, msg = l, m
				}
			}
		}
		p.errs = append(p.errs, &FieldError{File: p.source, Line: line, Column: 1, Msg: "yaml syntax: " + msg})
		return
	}
	if len(doc.Content) == 0 {
		p.fail(nil, "", "file is empty: expected a mapping with domain: and descriptors:")
		return
	}
	f := p.known(doc.Content[0], "", "domain", "descriptors")
	dn := f["domain"]
	switch {
	case dn == nil:
		p.fail(doc.Content[0], "domain", "missing")
		return
	case dn.Kind != yaml.ScalarNode || dn.Value == "":
		p.fail(dn, "domain", "must be a non-empty string")
		return
	case p.e.domains[dn.Value] != nil:
		p.fail(dn, "domain", "domain %q is defined by another file too", dn.Value)
		return
	}
	root := &EnvoyNode{}
	p.e.domains[dn.Value] = root
	if ds := f["descriptors"]; ds != nil {
		p.descriptors(root, ds, "descriptors", dn.Value+"\x00")
	}
}

func (p *envoyParser) descriptors(parent *EnvoyNode, n *yaml.Node, path, id string) {
	if n.Kind != yaml.SequenceNode {
		p.fail(n, path, "expected a list of descriptors, got %s", kindName(n))
		return
	}
	for i, dn := range n.Content {
		p.descriptor(parent, dn, fmt.Sprintf("%s[%d]", path, i), id)
	}
}

func (p *envoyParser) descriptor(parent *EnvoyNode, n *yaml.Node, path, id string) {
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "expected a mapping, got %s", kindName(n))
		return
	}
	f := p.known(n, path, append(slices.Clone(envoyKnown), envoyRefused...)...)
	for _, name := range envoyRefused {
		if v := f[name]; v != nil {
			p.fail(v, path+"."+name, "not supported by sluice (supported: %s)", strings.Join(envoyKnown, ", "))
		}
	}
	kn, vn := f["key"], f["value"]
	if kn == nil || kn.Kind != yaml.ScalarNode || kn.Value == "" {
		at := n
		if kn != nil {
			at = kn
		}
		p.fail(at, path+".key", "must be a non-empty string")
		return
	}
	key, value := kn.Value, ""
	if vn != nil {
		if vn.Kind != yaml.ScalarNode {
			p.fail(vn, path+".value", "must be a string, got %s", kindName(vn))
			return
		}
		value = vn.Value
	}
	node := &EnvoyNode{}
	switch star := strings.Index(value, "*"); {
	case value == "":
		if parent.anyValue[key] != nil {
			p.fail(kn, path, "descriptor key %q without a value is defined twice at this level", key)
			return
		}
		if parent.anyValue == nil {
			parent.anyValue = map[string]*EnvoyNode{}
		}
		parent.anyValue[key] = node
	case star >= 0 && star != len(value)-1:
		p.fail(vn, path+".value", "only a trailing * (a prefix match) is supported, got %q", value)
		return
	case star >= 0:
		prefix := value[:star]
		for _, q := range parent.prefixes {
			if q.key == key && q.prefix == prefix {
				p.fail(vn, path, "descriptor %s=%s is defined twice at this level", key, value)
				return
			}
		}
		parent.prefixes = append(parent.prefixes, envoyPrefix{key: key, prefix: prefix, node: node})
	default:
		pair := envoyPair{key, value}
		if parent.exact[pair] != nil {
			p.fail(vn, path, "descriptor %s=%s is defined twice at this level", key, value)
			return
		}
		if parent.exact == nil {
			parent.exact = map[envoyPair]*EnvoyNode{}
		}
		parent.exact[pair] = node
	}
	id += key + "\x00" + value + "\x00"
	shadow := p.boolField(f["shadow_mode"], path+".shadow_mode")
	p.boolField(f["detailed_metric"], path+".detailed_metric")
	p.boolField(f["value_to_metric"], path+".value_to_metric")
	if rl := f["rate_limit"]; rl != nil {
		node.Limit = p.rateLimit(rl, path+".rate_limit", id, shadow)
	}
	if ds := f["descriptors"]; ds != nil {
		p.descriptors(node, ds, path+".descriptors", id)
	}
}

func (p *envoyParser) boolField(n *yaml.Node, path string) bool {
	if n == nil {
		return false
	}
	b, err := strconv.ParseBool(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		p.fail(n, path, "must be true or false, got %q", n.Value)
	}
	return b
}

func (p *envoyParser) rateLimit(n *yaml.Node, path, id string, shadow bool) *EnvoyLimit {
	f := p.known(n, path, "requests_per_unit", "unit", "unlimited", "name", "replaces")
	lim := &EnvoyLimit{Shadow: shadow, Unlimited: p.boolField(f["unlimited"], path+".unlimited")}
	if nn := f["name"]; nn != nil {
		if nn.Kind != yaml.ScalarNode {
			p.fail(nn, path+".name", "must be a string, got %s", kindName(nn))
		}
		lim.Name = nn.Value
	}
	if rn := f["replaces"]; rn != nil {
		if rn.Kind != yaml.SequenceNode {
			p.fail(rn, path+".replaces", "expected a list of {name: ...}, got %s", kindName(rn))
		} else {
			for i, r := range rn.Content {
				rf := p.known(r, fmt.Sprintf("%s.replaces[%d]", path, i), "name")
				if nn := rf["name"]; nn == nil || nn.Kind != yaml.ScalarNode || nn.Value == "" {
					p.fail(r, fmt.Sprintf("%s.replaces[%d].name", path, i), "must be a non-empty string")
				} else {
					lim.Replaces = append(lim.Replaces, nn.Value)
				}
			}
		}
	}
	un, rpu := f["unit"], f["requests_per_unit"]
	if lim.Unlimited {
		if un != nil {
			p.fail(un, path+".unit", "must not be set when unlimited is true")
		}
		fmt.Fprintf(p.hash, "%q name=%q replaces=%q unlimited\n", id, lim.Name, lim.Replaces)
		return lim
	}
	if un == nil {
		p.fail(n, path+".unit", "missing (one of second, minute, hour, day, week)")
		return nil
	}
	lim.Unit = strings.ToLower(un.Value)
	period, ok := EnvoyUnits[lim.Unit]
	if !ok || un.Kind != yaml.ScalarNode {
		p.fail(un, path+".unit", "unknown or unsupported unit %q (supported: second, minute, hour, day, week)", un.Value)
		return nil
	}
	lim.Period = period
	if rpu == nil {
		p.fail(n, path+".requests_per_unit", "missing")
		return nil
	}
	v, err := strconv.ParseUint(rpu.Value, 10, 32)
	if err != nil || rpu.Kind != yaml.ScalarNode {
		p.fail(rpu, path+".requests_per_unit", "must be a whole number from 0 to %d, got %q", uint32(1<<32-1), rpu.Value)
		return nil
	}
	lim.RequestsPerUnit = uint32(v)
	fmt.Fprintf(p.hash, "%q shadow=%v name=%q replaces=%q unlimited=%v %d/%s\n", id, shadow, lim.Name, lim.Replaces, lim.Unlimited, v, lim.Unit)
	if v == 0 {
		return lim // every request over the limit; nothing to count
	}
	if len(p.e.Rules) >= maxRules {
		p.fail(n, path, "more than %d rate limits", maxRules)
		return nil
	}
	bl, err := bucket.NewLimitOf(bucket.AlgoFixedWindow, int64(v), period, int64(v))
	if err != nil {
		p.fail(rpu, path, "%v", err)
		return nil
	}
	sum := sha256.Sum256([]byte(id))
	lim.Rule = EnvoyRulePrefix + hex.EncodeToString(sum[:8])
	p.e.Rules[lim.Rule] = &Rule{Name: lim.Rule, Limits: []bucket.Limit{bl}, Shadow: shadow}
	return lim
}
