package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/clientlib/httplimit"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/ipc"
)

func proxyCommand() *cli.Command {
	return &cli.Command{
		Name:  "proxy",
		Usage: "serve HTTP in front of a local service, limiting requests through the local daemon",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8081", EnvVars: []string{"SLUICE_PROXY_LISTEN"}, Usage: "address to serve on"},
			&cli.StringFlag{Name: "upstream", Required: true, EnvVars: []string{"SLUICE_PROXY_UPSTREAM"}, Usage: "the service, e.g. http://127.0.0.1:8080"},
			&cli.StringFlag{Name: "routes", EnvVars: []string{"SLUICE_PROXY_ROUTES"}, Usage: "routes file (YAML); default: every request limited by client IP under rule \"default\""},
			&cli.StringFlag{Name: "socket", Value: ipc.DefaultSocketPath(), EnvVars: []string{"SLUICE_SOCKET"}, Usage: "the daemon's socket"},
			&cli.DurationFlag{Name: "decision-timeout", Value: 5 * time.Millisecond, EnvVars: []string{"SLUICE_PROXY_DECISION_TIMEOUT"}, Usage: "how long a decision may take before the request is let through"},
			&cli.BoolFlag{Name: "fail-closed", EnvVars: []string{"SLUICE_PROXY_FAIL_CLOSED"}, Usage: "answer 503 (with Retry-After) instead of passing requests when the daemon cannot decide"},
			&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"SLUICE_PROXY_METRICS_ADDR"}, Usage: "serve Prometheus /metrics here (fail-opens by cause, daemon up, routes state); empty: off"},
			&cli.DurationFlag{Name: "connect-wait", Value: time.Second, EnvVars: []string{"SLUICE_PROXY_CONNECT_WAIT"}, Usage: "how long start-up waits for the daemon before serving without it (fail open) and warning"},
			&cli.DurationFlag{Name: "routes-check-interval", Value: 10 * time.Second, EnvVars: []string{"SLUICE_PROXY_ROUTES_CHECK_INTERVAL"}, Usage: "how often the routes are checked against the daemon's rules (which may change under them)"},
			&cli.DurationFlag{Name: "log-interval", Value: 10 * time.Second, EnvVars: []string{"SLUICE_PROXY_LOG_INTERVAL"}, Usage: "at most one fail-open (or invalid-request) line per cause per interval, with the count"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"SLUICE_LOG_LEVEL"}, Usage: "trace, debug, info, warn or error"},
		},
		Action: runProxy,
	}
}

func runProxy(c *cli.Context) error {
	log := hclog.New(&hclog.LoggerOptions{Name: "sluiced-proxy", Level: hclog.LevelFromString(c.String("log-level")), Output: os.Stderr})
	sock, failClosed := c.String("socket"), c.Bool("fail-closed")
	// The decision client logs its own fail-opens (naming its socket and why
	// it cannot reach it); the middleware's events only count them.
	client := clientlib.New(clientlib.Options{SocketPath: sock, Timeout: c.Duration("decision-timeout"), FailClosed: failClosed, Name: "sluiced-proxy",
		Log: log.Warn, LogInterval: c.Duration("log-interval")})
	defer client.Close()
	// Checking routes against the rules takes a few INSPECTs, which may
	// take longer than a decision is allowed to: their own connection.
	rulesClient := clientlib.New(clientlib.Options{SocketPath: sock, Timeout: 2 * time.Second, Conns: 1, Name: "sluiced-proxy-routes",
		Log: func(string, ...any) {}}) // the decision client says it all once
	defer rulesClient.Close()

	deadline := time.Now().Add(c.Duration("connect-wait"))
	waitUp(client, deadline)
	waitUp(rulesClient, deadline)
	if client.Up() {
		log.Info("connected to the daemon", "socket", sock)
	} else {
		what := "requests pass unlimited (fail open)"
		if failClosed {
			what = "requests get 503 (fail closed)"
		}
		log.Warn("daemon not reachable; "+what+" until it is, and the routes are checked against its rules once it is", "socket", sock)
	}
	events := httplimit.NewEvents(log.Warn, c.Duration("log-interval"), nil)
	events.FailOpen = clientlib.NewFailOpenLog(nil, c.Duration("log-interval"), false, nil)  // logged by the client
	events.FailClosed = clientlib.NewFailOpenLog(nil, c.Duration("log-interval"), true, nil) // likewise
	p, err := startProxy(proxyConfig{
		listen: c.String("listen"), upstream: c.String("upstream"), routesPath: c.String("routes"),
		lim: client, log: log, events: events, check: inspectCheck(rulesClient),
	})
	if err != nil {
		return err
	}
	defer p.shutdown()
	// The decision client learns that the daemon is gone when a request
	// finds it so; the routes client, asking every --routes-check-interval,
	// notices it on an idle proxy too.
	daemonUp := func() bool { return client.Up() && rulesClient.Up() }
	reg := prometheus.NewRegistry()
	registerProxyMetrics(reg, p, daemonUp)
	if addr := c.String("metrics-addr"); addr != "" {
		stopMetrics, err := serveMetrics(addr, reg, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	log.Info("proxy serving", "socket", sock)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go p.watchDaemon(ctx, daemonUp, sock, c.Duration("routes-check-interval"))
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			p.reload()
		case err := <-p.served:
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

// waitUp waits until the client has a connection, or until deadline.
func waitUp(c *clientlib.Client, deadline time.Time) {
	for !c.Up() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// inspectCheck checks routes against the daemon's rules over the socket:
// one INSPECT per rule named, which says whether the rule exists and its
// burst (of its first limit).
func inspectCheck(c *clientlib.Client) func(*config.ProxyRoutes) error {
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

// proxyConfig is what a proxy is started from.
type proxyConfig struct {
	listen, upstream, routesPath string
	lim                          httplimit.Limiter
	log                          hclog.Logger
	events                       *httplimit.Events
	// check checks routes against the rules: an error wrapping
	// config.ErrInvalidRoutes refuses them; any other error means the
	// rules could not be read (the daemon not reachable) and the routes
	// are taken unchecked, to be checked later.
	check func(*config.ProxyRoutes) error
}

// proxyServer is a running HTTP proxy: in its own process (sluiced proxy,
// deciding over the socket) or inside the daemon (deciding in-process).
type proxyServer struct {
	cfg    proxyConfig
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

func startProxy(cfg proxyConfig) (*proxyServer, error) {
	upstream, err := url.Parse(cfg.upstream)
	if err != nil || upstream.Scheme == "" || upstream.Host == "" {
		return nil, fmt.Errorf("proxy upstream %q: want a URL such as http://127.0.0.1:8080", cfg.upstream)
	}
	p := &proxyServer{cfg: cfg, served: make(chan error, 1)}
	routes, err := p.load()
	if err != nil {
		return nil, err
	}
	if err := p.checkNew(routes); err != nil {
		return nil, fmt.Errorf("proxy routes: %w", err)
	}
	m, err := p.middleware(routes)
	if err != nil {
		return nil, err
	}
	p.routes = routes
	l, err := net.Listen("tcp", cfg.listen)
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
	cfg.log.Info("proxy serving", "listen", l.Addr().String(), "upstream", upstream.String(), "routes", cfg.routesPath)
	return p, nil
}

// load reads the routes file (or the default routes).
func (p *proxyServer) load() (*config.ProxyRoutes, error) {
	if p.cfg.routesPath == "" {
		return config.DefaultProxyRoutes(), nil
	}
	return config.LoadProxyRoutes(p.cfg.routesPath)
}

// checkNew checks routes about to be put in force: invalid routes are an
// error; routes that cannot be checked yet are accepted, marked unchecked,
// with a warning.
func (p *proxyServer) checkNew(routes *config.ProxyRoutes) error {
	if p.cfg.check == nil {
		return nil
	}
	err := p.cfg.check(routes)
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
	p.cfg.log.Warn("routes not checked against the daemon's rules yet (it cannot be asked); they will be once it can", "routes", routes.Source(), "error", err)
	return nil
}

// reload re-reads the routes file; a file that does not parse, or names
// rules the daemon does not have, or costs more than a rule's burst, keeps
// the routes in force.
func (p *proxyServer) reload() {
	p.mu.Lock()
	defer p.mu.Unlock()
	routes, err := p.load()
	if err == nil {
		err = p.checkNew(routes)
	}
	var m *httplimit.Middleware
	if err == nil {
		m, err = p.middleware(routes)
	}
	if err != nil {
		p.cfg.log.Error("routes reload failed; keeping the last good routes", "error", err)
		return
	}
	p.routes = routes
	p.proxy.SetMiddleware(m)
	p.cfg.log.Info("routes reloaded")
}

// recheck checks the routes in force against the rules as they are now (the
// daemon's rules may have changed, or it was not reachable before). Routes
// found invalid stay in force (there are no better ones) and are logged at
// ERROR, with file and line, when the problem appears or changes.
func (p *proxyServer) recheck() {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.cfg.check(p.routes)
	switch {
	case err == nil:
		if p.unchecked.Load() || p.invalid.Load() {
			p.cfg.log.Info("routes checked against the daemon's rules: valid", "routes", p.routes.Source())
		}
		p.unchecked.Store(false)
		p.invalid.Store(false)
		p.lastProblem = ""
	case errors.Is(err, config.ErrInvalidRoutes):
		p.unchecked.Store(false)
		p.invalid.Store(true)
		if msg := err.Error(); msg != p.lastProblem {
			p.lastProblem = msg
			p.cfg.log.Error("the routes in force do not fit the daemon's rules; fix the routes file and reload", "error", err)
		}
	}
}

// watchDaemon follows the decision client's connection (which learns that
// the daemon is gone when a request finds it so): it logs when the daemon is
// lost and found, checks the routes once it can and whenever it is found
// again, and rechecks them every interval while connected, since the
// daemon's rules may change under them.
func (p *proxyServer) watchDaemon(ctx context.Context, up func() bool, socket string, interval time.Duration) {
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
			p.cfg.log.Info("connected to the daemon", "socket", socket)
		case !isUp && wasUp:
			p.cfg.log.Warn("lost the daemon; requests are not decided (fail open or closed) until it is back", "socket", socket)
		}
		wasUp = isUp
		// A daemon found again may have restarted with other rules.
		if isUp && (reconnected || p.unchecked.Load() || time.Since(lastCheck) >= interval) {
			p.recheck()
			lastCheck = time.Now()
		}
	}
}

func (p *proxyServer) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.srv.Shutdown(ctx)
}

// middleware builds the HTTP limiter a routes file describes.
func (p *proxyServer) middleware(r *config.ProxyRoutes) (*httplimit.Middleware, error) {
	trusted, err := httplimit.ParsePrefixes(r.Identity.TrustedProxies)
	if err != nil {
		return nil, err
	}
	cfg := httplimit.Config{
		Limiter: p.cfg.lim,
		Identity: httplimit.Identity{
			Header:          r.Identity.Header,
			ClientIP:        r.Identity.ClientIP == nil || *r.Identity.ClientIP,
			TrustedProxies:  trusted,
			ForwardedHeader: r.Identity.ForwardedHeader,
			Anonymous:       r.Identity.Anonymous,
		},
		Default: limits(r.Default),
		Events:  p.cfg.events,
	}
	if len(r.Headers) > 0 {
		var h httplimit.Headers
		for _, name := range r.Headers {
			if name == "legacy" {
				h |= httplimit.HeadersLegacy
			} else {
				h |= httplimit.HeadersDraft
			}
		}
		cfg.Headers = &h
	}
	for _, rt := range r.Routes {
		route := httplimit.Route{Pattern: rt.Match, Limits: limits(rt.Limits)}
		if s := rt.Shape; s != nil {
			route.Shape = &httplimit.Shape{MaxWait: s.MaxWait, MaxQueue: s.MaxQueue}
		}
		if e := rt.Elastic; e != nil {
			route.Elastic = &httplimit.Elastic{Extra: e.Extra, MaxP99: e.MaxP99, MaxErrorRate: e.MaxErrorRate, Window: e.Window}
		}
		cfg.Routes = append(cfg.Routes, route)
	}
	return httplimit.New(cfg)
}

func limits(in []config.ProxyLimit) []httplimit.Limit {
	out := make([]httplimit.Limit, len(in))
	for i, l := range in {
		out[i] = httplimit.Limit{Rule: l.Rule, Cost: l.Cost, PerRoute: l.PerRoute}
	}
	return out
}
