package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice/internal/routecheck"
)

// ProxyRoutes is the routes file of the HTTP proxy (sluiced proxy): how to
// identify clients and which limits apply to which requests.
type ProxyRoutes struct {
	Identity ProxyIdentity `yaml:"identity"`
	// Headers lists the header families to write: legacy, draft. Default both.
	Headers []string `yaml:"headers"`
	// Default limits apply to requests no route matches.
	Default []ProxyLimit `yaml:"default"`
	Routes  []ProxyRoute `yaml:"routes"`

	source string    // the file, for errors
	pos    routesPos // where each limit is written, for errors
}

// routesPos records where each limit of a routes file is written, so that a
// check against the rules (CheckRules) can name the file, line and column.
type routesPos struct {
	def     []limitPos
	routes  [][]limitPos // by route, then limit
	routeAt []filePos    // where each route starts
}

type limitPos struct{ at, rule, cost filePos }

type filePos struct{ line, col int }

// ProxyIdentity says how a client's key is built (see httplimit.Identity).
type ProxyIdentity struct {
	Header         string   `yaml:"header"`
	ClientIP       *bool    `yaml:"client_ip"` // default true
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ForwardedHeader is the one forwarding header the trusted proxies
	// write and the client address is read from: X-Forwarded-For (the
	// default) or Forwarded. The other is ignored, so a client cannot add
	// it to choose its key.
	ForwardedHeader string `yaml:"forwarded_header"`
	Anonymous       string `yaml:"anonymous"`
}

// ProxyLimit is one limit: a rule, its cost, and whether it is keyed per route.
type ProxyLimit struct {
	Rule     string `yaml:"rule"`
	Cost     int64  `yaml:"cost"`
	PerRoute bool   `yaml:"per_route"`
}

// ProxyRoute applies limits to requests matching a net/http.ServeMux pattern.
type ProxyRoute struct {
	Match  string       `yaml:"match"`
	Limits []ProxyLimit `yaml:"limits"`
	// Shape holds requests over the limit until their turn (leaky bucket).
	Shape *ProxyShape `yaml:"shape"`
	// Elastic admits a share over the limit while the upstream is healthy.
	Elastic *ProxyElastic `yaml:"elastic"`
}

// ProxyShape bounds shaping: the longest hold and the most requests held.
type ProxyShape struct {
	MaxWait  time.Duration `yaml:"max_wait"`
	MaxQueue int           `yaml:"max_queue"`
}

// ProxyElastic: extra share over the limit while p99 latency and error rate
// over the window stay under the targets.
type ProxyElastic struct {
	Extra        float64       `yaml:"extra"`
	MaxP99       time.Duration `yaml:"max_p99"`
	MaxErrorRate float64       `yaml:"max_error_rate"`
	Window       time.Duration `yaml:"window"`
}

// LoadProxyRoutes reads a routes file; unknown fields are errors naming the line.
func LoadProxyRoutes(path string) (*ProxyRoutes, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load routes: %w", err)
	}
	return ParseProxyRoutes(path, data)
}

// ParseProxyRoutes parses a routes file's contents.
func ParseProxyRoutes(source string, data []byte) (*ProxyRoutes, error) {
	var r ProxyRoutes
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil && !errors.Is(err, io.EOF) { // an empty file is no routes
		return nil, fmt.Errorf("invalid routes %s: %w", source, err)
	}
	pos := limitPositions(data)
	// at names a place in the file: "routes.yaml:7:9".
	at := func(p filePos) string { return fmt.Sprintf("%s:%d:%d", source, max(p.line, 1), max(p.col, 1)) }
	check := func(where string, limits []ProxyLimit, lp []limitPos) error {
		for i, l := range limits {
			var p limitPos
			if i < len(lp) {
				p = lp[i]
			}
			if err := routecheck.Rule(l.Rule); err != nil {
				return fmt.Errorf("invalid routes %s: %s limit %d: %w", at(p.at), where, i, err)
			}
			if err := routecheck.Cost(l.Cost); err != nil {
				return fmt.Errorf("invalid routes %s: %s limit %d: %w", at(p.cost), where, i, err)
			}
		}
		return nil
	}
	if err := check("default", r.Default, pos.def); err != nil {
		return nil, err
	}
	for i, rt := range r.Routes {
		var rp filePos
		var lp []limitPos
		if i < len(pos.routes) {
			rp, lp = pos.routeAt[i], pos.routes[i]
		}
		if rt.Match == "" {
			return nil, fmt.Errorf("invalid routes %s: route %d: match is missing", at(rp), i)
		}
		if err := check("route "+rt.Match, rt.Limits, lp); err != nil {
			return nil, err
		}
		if s := rt.Shape; s != nil {
			if err := routecheck.Shape(s.MaxWait, s.MaxQueue); err != nil {
				return nil, fmt.Errorf("invalid routes %s: route %s: %w", at(rp), rt.Match, err)
			}
		}
		if e := rt.Elastic; e != nil {
			if err := routecheck.Elastic(e.Extra, e.MaxP99, e.MaxErrorRate); err != nil {
				return nil, fmt.Errorf("invalid routes %s: route %s: %w", at(rp), rt.Match, err)
			}
		}
	}
	for _, h := range r.Headers {
		if h != "legacy" && h != "draft" {
			return nil, fmt.Errorf("invalid routes %s: headers: %q is not legacy or draft", source, h)
		}
	}
	if f := r.Identity.ForwardedHeader; f != "" && !strings.EqualFold(f, "X-Forwarded-For") && !strings.EqualFold(f, "Forwarded") {
		return nil, fmt.Errorf("invalid routes %s: identity: forwarded_header %q is not X-Forwarded-For or Forwarded", source, f)
	}
	r.source, r.pos = source, pos
	return &r, nil
}

// limitPositions finds where each limit is written in a routes file that
// has already decoded without error.
func limitPositions(data []byte) routesPos {
	var pos routesPos
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return pos
	}
	limits := func(seq *yaml.Node) []limitPos {
		if seq == nil || seq.Kind != yaml.SequenceNode {
			return nil
		}
		out := make([]limitPos, len(seq.Content))
		for i, n := range seq.Content {
			at := filePos{n.Line, n.Column}
			out[i] = limitPos{at: at, rule: at, cost: at}
			if v := mapValue(n, "rule"); v != nil {
				out[i].rule = filePos{v.Line, v.Column}
			}
			if v := mapValue(n, "cost"); v != nil {
				out[i].cost = filePos{v.Line, v.Column}
			}
		}
		return out
	}
	root := doc.Content[0]
	pos.def = limits(mapValue(root, "default"))
	if routes := mapValue(root, "routes"); routes != nil && routes.Kind == yaml.SequenceNode {
		for _, rt := range routes.Content {
			pos.routes = append(pos.routes, limits(mapValue(rt, "limits")))
			pos.routeAt = append(pos.routeAt, filePos{rt.Line, rt.Column})
		}
	}
	return pos
}

// mapValue returns the value of key in a mapping node, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// DefaultProxyRoutes are the routes of a proxy given no routes file: every
// request limited by client IP under the rule "default", which the embedded
// rules define.
func DefaultProxyRoutes() *ProxyRoutes {
	return &ProxyRoutes{Default: []ProxyLimit{{Rule: "default"}}, source: "the default routes (no routes file given)"}
}
