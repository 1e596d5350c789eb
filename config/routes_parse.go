package config

// Parsing a routes file: a walk over the YAML nodes, like the rules
// parser's, so that every problem is reported at once as a *FieldError
// naming file, line, column and field, in the file's own terms (never a Go
// type or field name).

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice/internal/routecheck"
)

// ParseProxyRoutes parses a routes file's contents. source names the file
// in errors. Every problem found is reported, each as a *FieldError; the
// returned error wraps them all and ErrInvalidRoutes. An empty file is no
// routes.
func ParseProxyRoutes(source string, data []byte) (*ProxyRoutes, error) {
	p := &parser{source: source}
	r := &ProxyRoutes{source: source}
	var doc yaml.Node
	if p.document(data, &doc) && len(doc.Content) > 0 {
		p.routesFile(doc.Content[0], r)
	}
	if len(p.errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRoutes, errors.Join(p.errs...))
	}
	return r, nil
}

// routesFile reads the top level of a routes file into r.
func (p *parser) routesFile(root *yaml.Node, r *ProxyRoutes) {
	f := p.present(root, "", "identity", "headers", "default", "routes")
	if n := f["identity"]; n != nil {
		p.identity(n, &r.Identity)
	}
	if n := f["headers"]; n != nil {
		r.Headers = p.stringList(n, "headers")
		for i, h := range r.Headers {
			if h != "legacy" && h != "draft" {
				p.fail(n.Content[i], fmt.Sprintf("headers[%d]", i), "%q is not legacy or draft", h)
			}
		}
	}
	if n := f["default"]; n != nil {
		r.Default, r.pos.def = p.limits(n, "default")
	}
	if n := f["routes"]; n != nil && p.sequence(n, "routes") {
		for i, rn := range n.Content {
			rt, lp := p.route(rn, fmt.Sprintf("routes[%d]", i))
			r.Routes = append(r.Routes, rt)
			r.pos.routes = append(r.pos.routes, lp)
			r.pos.routeAt = append(r.pos.routeAt, filePos{rn.Line, rn.Column})
		}
	}
}

func (p *parser) identity(n *yaml.Node, id *ProxyIdentity) {
	f := p.present(n, "identity", "header", "client_ip", "trusted_proxies", "forwarded_header", "anonymous")
	id.Header = p.str(f["header"], "identity.header")
	if v := f["client_ip"]; v != nil {
		b := p.boolean(v, "identity.client_ip")
		id.ClientIP = &b
	}
	if v := f["trusted_proxies"]; v != nil {
		id.TrustedProxies = p.stringList(v, "identity.trusted_proxies")
	}
	id.ForwardedHeader = p.str(f["forwarded_header"], "identity.forwarded_header")
	if h := id.ForwardedHeader; h != "" && !strings.EqualFold(h, "X-Forwarded-For") && !strings.EqualFold(h, "Forwarded") {
		p.fail(f["forwarded_header"], "identity.forwarded_header", "%q is not X-Forwarded-For or Forwarded", h)
	}
	id.Anonymous = p.str(f["anonymous"], "identity.anonymous")
}

func (p *parser) route(n *yaml.Node, path string) (ProxyRoute, []limitPos) {
	var rt ProxyRoute
	var lp []limitPos
	f := p.present(n, path, "match", "limits", "shape", "elastic")
	if n.Kind != yaml.MappingNode {
		return rt, nil
	}
	rt.Match = p.str(f["match"], path+".match")
	if rt.Match == "" {
		p.fail(n, path+".match", "missing: every route needs a pattern to match")
	}
	if v := f["limits"]; v != nil {
		rt.Limits, lp = p.limits(v, path+".limits")
	}
	if v := f["shape"]; v != nil {
		sf := p.present(v, path+".shape", "max_wait", "max_queue")
		if v.Kind == yaml.MappingNode {
			rt.Shape = &ProxyShape{MaxWait: p.duration(sf["max_wait"], path+".shape.max_wait"), MaxQueue: int(p.integer(sf["max_queue"], path+".shape.max_queue"))}
			if err := routecheck.Shape(rt.Shape.MaxWait, rt.Shape.MaxQueue); err != nil {
				p.fail(v, path+".shape", "%s", err)
			}
		}
	}
	if v := f["elastic"]; v != nil {
		ef := p.present(v, path+".elastic", "extra", "max_p99", "max_error_rate", "window")
		if v.Kind == yaml.MappingNode {
			e := &ProxyElastic{
				Extra: p.float(ef["extra"], path+".elastic.extra"), MaxP99: p.duration(ef["max_p99"], path+".elastic.max_p99"),
				MaxErrorRate: p.float(ef["max_error_rate"], path+".elastic.max_error_rate"), Window: p.duration(ef["window"], path+".elastic.window"),
			}
			rt.Elastic = e
			if err := routecheck.Elastic(e.Extra, e.MaxP99, e.MaxErrorRate); err != nil {
				p.fail(v, path+".elastic", "%s", err)
			}
		}
	}
	return rt, lp
}

// limits reads a list of limits and where each is written.
func (p *parser) limits(n *yaml.Node, path string) ([]ProxyLimit, []limitPos) {
	if !p.sequence(n, path) {
		return nil, nil
	}
	out := make([]ProxyLimit, len(n.Content))
	pos := make([]limitPos, len(n.Content))
	for i, ln := range n.Content {
		lpath := fmt.Sprintf("%s[%d]", path, i)
		at := filePos{ln.Line, ln.Column}
		pos[i] = limitPos{at: at, rule: at, cost: at}
		f := p.present(ln, lpath, "rule", "cost", "per_route")
		if ln.Kind != yaml.MappingNode {
			continue
		}
		l := &out[i]
		l.Rule = p.str(f["rule"], lpath+".rule")
		if v := f["rule"]; v != nil {
			pos[i].rule = filePos{v.Line, v.Column}
		}
		if err := routecheck.Rule(l.Rule); err != nil {
			p.fail(ln, lpath+".rule", "%s", err)
		}
		if v := f["cost"]; v != nil {
			pos[i].cost = filePos{v.Line, v.Column}
			l.Cost = p.integer(v, lpath+".cost")
			if err := routecheck.Cost(l.Cost); err != nil {
				p.fail(v, lpath+".cost", "%s", err)
			}
		}
		if v := f["per_route"]; v != nil {
			l.PerRoute = p.boolean(v, lpath+".per_route")
		}
	}
	return out, pos
}

// present is known without the fields set to null: in a routes file, as
// when it was decoded into the structs, null means not given.
func (p *parser) present(n *yaml.Node, path string, names ...string) map[string]*yaml.Node {
	f := p.known(n, path, names...)
	for k, v := range f {
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			delete(f, k)
		}
	}
	return f
}

// sequence reports whether n is a sequence, reporting it when not.
func (p *parser) sequence(n *yaml.Node, path string) bool {
	if n.Kind != yaml.SequenceNode {
		p.fail(n, path, "expected a list, got %s", kindName(n))
		return false
	}
	return true
}

// scalar reports whether n is a single value, reporting it when not.
func (p *parser) scalar(n *yaml.Node, path, want string) bool {
	if n.Kind != yaml.ScalarNode {
		p.fail(n, path, "expected %s, got %s", want, kindName(n))
		return false
	}
	return true
}

// str reads a string; a missing node (nil) or null is "".
func (p *parser) str(n *yaml.Node, path string) string {
	if n == nil || n.Tag == "!!null" || !p.scalar(n, path, "a string") {
		return ""
	}
	return n.Value
}

// stringList reads a list of strings.
func (p *parser) stringList(n *yaml.Node, path string) []string {
	if !p.sequence(n, path) {
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, v := range n.Content {
		out = append(out, p.str(v, fmt.Sprintf("%s[%d]", path, i)))
	}
	return out
}

func (p *parser) boolean(n *yaml.Node, path string) bool {
	var b bool
	if !p.scalar(n, path, "true or false") {
		return false
	}
	if n.Tag != "!!bool" || n.Decode(&b) != nil {
		p.fail(n, path, "expected true or false, got %q", n.Value)
	}
	return b
}

// integer reads a whole number; a missing node is 0.
func (p *parser) integer(n *yaml.Node, path string) int64 {
	var i int64
	if n == nil || !p.scalar(n, path, "a whole number") {
		return 0
	}
	if n.Tag != "!!int" || n.Decode(&i) != nil {
		p.fail(n, path, "expected a whole number, got %q", n.Value)
	}
	return i
}

// float reads a number; a missing node is 0.
func (p *parser) float(n *yaml.Node, path string) float64 {
	var f float64
	if n == nil || !p.scalar(n, path, "a number") {
		return 0
	}
	if (n.Tag != "!!float" && n.Tag != "!!int") || n.Decode(&f) != nil {
		p.fail(n, path, "expected a number, got %q", n.Value)
	}
	return f
}

// duration reads a Go duration such as 500ms or 2s; a missing node is 0.
func (p *parser) duration(n *yaml.Node, path string) time.Duration {
	if n == nil || !p.scalar(n, path, "a duration such as 500ms or 2s") {
		return 0
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		p.fail(n, path, "expected a duration such as 500ms or 2s, got %q", n.Value)
	}
	return d
}
