package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/clientlib/httplimit"
	"github.com/sluicelabs/sluice/config"
)

// InspectCheck returns a Config.Check that checks routes against the daemon's rules over the socket:
// one INSPECT per rule named, which says whether the rule exists and its
// burst (of its first limit).
func InspectCheck(c *clientlib.Client) func(*config.ProxyRoutes) error {
	return func(r *config.ProxyRoutes) error {
		if !c.Up() {
			return clientlib.ErrDaemonDown
		}
		return r.CheckRules(func(rule string) (int64, bool, error) {
			in, err := c.Inspect(context.Background(), rule, "sluice-proxy:routes-check")
			if err != nil {
				return 0, false, err
			}
			return int64(in.Burst), in.Known, nil
		})
	}
}

// Config is what a proxy is started from.
type Config struct {
	// Listen is the address to serve on; Upstream the service's URL.
	Listen, Upstream string
	// RoutesPath is the routes file; empty: config.DefaultProxyRoutes.
	RoutesPath string
	// Limiter decides: a clientlib.Client, or the daemon's in-process one.
	Limiter httplimit.Limiter
	// Log receives the proxy's lines.
	Log hclog.Logger
	// Events counts and logs what the middleware cannot limit.
	Events *httplimit.Events
	// Check checks routes against the rules: an error wrapping
	// config.ErrInvalidRoutes refuses them; any other error means the
	// rules could not be read (the daemon not reachable) and the routes
	// are taken unchecked, to be checked later.
	Check func(*config.ProxyRoutes) error
}

// Server is a running HTTP proxy: in its own process (sluiced proxy,
// deciding over the socket) or inside the daemon (deciding in-process).
// Its methods may be called from any goroutine.
type Server struct {
	cfg    Config
	srv    *http.Server
	proxy  *httplimit.Proxy
	served chan error

	mu     sync.Mutex // serialises reloads and checks; guards routes and lastProblem
	routes *config.ProxyRoutes
	// lastProblem is the last check's error text, so a recheck logs a
	// problem when it appears or changes, not every interval.
	lastProblem string
	unchecked   atomic.Bool // the routes in force have not been checked against the rules
	invalid     atomic.Bool // the routes in force failed their last check
}

// Start reads the routes (cfg.RoutesPath, or config.DefaultProxyRoutes),
// checks them with cfg.Check, builds their middleware and serves it on
// cfg.Listen in front of cfg.Upstream. Serving errors arrive on Served.
func Start(cfg Config) (*Server, error) {
	upstream, err := url.Parse(cfg.Upstream)
	if err != nil || upstream.Scheme == "" || upstream.Host == "" {
		return nil, fmt.Errorf("proxy upstream %q: want a URL such as http://127.0.0.1:8080", cfg.Upstream)
	}
	p := &Server{cfg: cfg, served: make(chan error, 1)}
	routes, err := p.load()
	if err != nil {
		return nil, err
	}
	if err := p.checkNew(routes); err != nil {
		return nil, fmt.Errorf("proxy routes: %w", err)
	}
	m, err := NewMiddleware(routes, p.cfg.Limiter, p.cfg.Events)
	if err != nil {
		return nil, err
	}
	p.routes = routes
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p.proxy = httplimit.NewProxy(upstream, m)
	p.srv = &http.Server{Handler: p.proxy, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := p.srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			p.served <- fmt.Errorf("proxy: %w", err)
		}
	}()
	cfg.Log.Info("proxy serving", "listen", l.Addr().String(), "upstream", upstream.String(), "routes", cfg.RoutesPath)
	return p, nil
}

// load reads the routes file (or the default routes).
func (p *Server) load() (*config.ProxyRoutes, error) {
	if p.cfg.RoutesPath == "" {
		return config.DefaultProxyRoutes(), nil
	}
	return config.LoadProxyRoutes(p.cfg.RoutesPath)
}

// checkNew checks routes about to be put in force: invalid routes are an
// error; routes that cannot be checked yet are accepted, marked unchecked,
// with a warning.
func (p *Server) checkNew(routes *config.ProxyRoutes) error {
	if p.cfg.Check == nil {
		return nil
	}
	err := p.cfg.Check(routes)
	switch {
	case err == nil:
		p.unchecked.Store(false)
		p.invalid.Store(false)
		p.lastProblem = ""
		return nil
	case errors.Is(err, config.ErrInvalidRoutes):
		return err
	}
	p.unchecked.Store(true)
	p.cfg.Log.Warn("routes not checked against the daemon's rules yet (it cannot be asked); they will be once it can", "routes", routes.Source(), "error", err)
	return nil
}

// Reload re-reads the routes file; a file that does not parse, or names
// rules the daemon does not have, or costs more than a rule's burst, keeps
// the routes in force.
func (p *Server) Reload() {
	p.mu.Lock()
	defer p.mu.Unlock()
	routes, err := p.load()
	if err == nil {
		err = p.checkNew(routes)
	}
	var m *httplimit.Middleware
	if err == nil {
		m, err = NewMiddleware(routes, p.cfg.Limiter, p.cfg.Events)
	}
	if err != nil {
		p.cfg.Log.Error("routes reload failed; keeping the last good routes", "error", err)
		return
	}
	p.routes = routes
	p.proxy.SetMiddleware(m)
	p.cfg.Log.Info("routes reloaded")
}

// Recheck checks the routes in force against the rules as they are now (the
// daemon's rules may have changed, or it was not reachable before). Routes
// found invalid stay in force (there are no better ones) and are logged at
// ERROR, with file and line, when the problem appears or changes.
func (p *Server) Recheck() {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.cfg.Check(p.routes)
	switch {
	case err == nil:
		if p.unchecked.Load() || p.invalid.Load() {
			p.cfg.Log.Info("routes checked against the daemon's rules: valid", "routes", p.routes.Source())
		}
		p.unchecked.Store(false)
		p.invalid.Store(false)
		p.lastProblem = ""
	case errors.Is(err, config.ErrInvalidRoutes):
		p.unchecked.Store(false)
		p.invalid.Store(true)
		if msg := err.Error(); msg != p.lastProblem {
			p.lastProblem = msg
			p.cfg.Log.Error("the routes in force do not fit the daemon's rules; fix the routes file and reload", "error", err)
		}
	}
}

// WatchDaemon follows the decision client's connection (which learns that
// the daemon is gone when a request finds it so): it logs when the daemon is
// lost and found, checks the routes once it can and whenever it is found
// again, and rechecks them every interval while connected, since the
// daemon's rules may change under them.
func (p *Server) WatchDaemon(ctx context.Context, up func() bool, socket string, interval time.Duration) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	wasUp, lastCheck := up(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		isUp := up()
		reconnected := isUp && !wasUp
		switch {
		case reconnected:
			p.cfg.Log.Info("connected to the daemon", "socket", socket)
		case !isUp && wasUp:
			p.cfg.Log.Warn("lost the daemon; requests are not decided (fail open or closed) until it is back", "socket", socket)
		}
		wasUp = isUp
		// A daemon found again may have restarted with other rules.
		if isUp && (reconnected || p.unchecked.Load() || time.Since(lastCheck) >= interval) {
			p.Recheck()
			lastCheck = time.Now()
		}
	}
}

// Served delivers the error that stopped the server, if it stops by itself.
func (p *Server) Served() <-chan error { return p.served }

// Shutdown stops the server, waiting up to 10 s for requests in flight.
func (p *Server) Shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.srv.Shutdown(ctx)
}
