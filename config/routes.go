package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"gopkg.in/yaml.v3"
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
}

// ProxyIdentity says how a client's key is built (see httplimit.Identity).
type ProxyIdentity struct {
	Header         string   `yaml:"header"`
	ClientIP       *bool    `yaml:"client_ip"` // default true
	TrustedProxies []string `yaml:"trusted_proxies"`
	Anonymous      string   `yaml:"anonymous"`
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
	check := func(where string, limits []ProxyLimit) error {
		for i, l := range limits {
			if l.Rule == "" {
				return fmt.Errorf("invalid routes %s: %s limit %d: rule is missing", source, where, i)
			}
			if l.Cost < 0 {
				return fmt.Errorf("invalid routes %s: %s limit %d: cost %d is negative", source, where, i, l.Cost)
			}
		}
		return nil
	}
	if err := check("default", r.Default); err != nil {
		return nil, err
	}
	for i, rt := range r.Routes {
		if rt.Match == "" {
			return nil, fmt.Errorf("invalid routes %s: route %d: match is missing", source, i)
		}
		if err := check("route "+rt.Match, rt.Limits); err != nil {
			return nil, err
		}
		if s := rt.Shape; s != nil && (s.MaxWait <= 0 || s.MaxQueue <= 0) {
			return nil, fmt.Errorf("invalid routes %s: route %s: shape needs max_wait and max_queue above zero", source, rt.Match)
		}
		if e := rt.Elastic; e != nil && (e.Extra <= 0 || e.MaxP99 <= 0 || e.MaxErrorRate < 0) {
			return nil, fmt.Errorf("invalid routes %s: route %s: elastic needs extra and max_p99 above zero", source, rt.Match)
		}
		// YAML's .nan and .inf pass the comparisons above.
		if e := rt.Elastic; e != nil && (!finite(e.Extra) || !finite(e.MaxErrorRate)) {
			return nil, fmt.Errorf("invalid routes %s: route %s: elastic extra and max_error_rate must be finite numbers", source, rt.Match)
		}
	}
	for _, h := range r.Headers {
		if h != "legacy" && h != "draft" {
			return nil, fmt.Errorf("invalid routes %s: headers: %q is not legacy or draft", source, h)
		}
	}
	return &r, nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
