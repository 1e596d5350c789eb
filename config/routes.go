package config

import (
	"fmt"
	"os"
	"time"
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

// DefaultProxyRoutes are the routes of a proxy given no routes file: every
// request limited by client IP under the rule "default", which the embedded
// rules define.
func DefaultProxyRoutes() *ProxyRoutes {
	return &ProxyRoutes{Default: []ProxyLimit{{Rule: "default"}}, source: "the default routes (no routes file given)"}
}
