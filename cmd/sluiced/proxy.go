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
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/clientlib/httplimit"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/ipc"
)

// defaultRoutes limits every request by client IP under the rule "default",
// which the embedded rules define.
var defaultRoutes = config.ProxyRoutes{Default: []config.ProxyLimit{{Rule: "default"}}}

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
			&cli.BoolFlag{Name: "fail-closed", EnvVars: []string{"SLUICE_PROXY_FAIL_CLOSED"}, Usage: "answer 429 instead of passing requests when the daemon cannot decide"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"SLUICE_LOG_LEVEL"}, Usage: "trace, debug, info, warn or error"},
		},
		Action: runProxy,
	}
}

func runProxy(c *cli.Context) error {
	log := hclog.New(&hclog.LoggerOptions{Name: "sluiced-proxy", Level: hclog.LevelFromString(c.String("log-level")), Output: os.Stderr})
	client := clientlib.New(clientlib.Options{SocketPath: c.String("socket"), Timeout: c.Duration("decision-timeout"), FailClosed: c.Bool("fail-closed"), Name: "sluiced-proxy"})
	defer client.Close()
	p, err := startProxy(c.String("listen"), c.String("upstream"), c.String("routes"), client, log)
	if err != nil {
		return err
	}
	log.Info("proxy serving", "socket", c.String("socket"))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
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
			return p.shutdown()
		}
	}
}

// proxyServer is a running HTTP proxy: in its own process (sluiced proxy,
// deciding over the socket) or inside the daemon (deciding in-process).
type proxyServer struct {
	srv    *http.Server
	proxy  *httplimit.Proxy
	load   func() (*httplimit.Middleware, error)
	log    hclog.Logger
	served chan error
}

func startProxy(listen, upstreamURL, routesPath string, lim httplimit.Limiter, log hclog.Logger) (*proxyServer, error) {
	upstream, err := url.Parse(upstreamURL)
	if err != nil || upstream.Scheme == "" || upstream.Host == "" {
		return nil, fmt.Errorf("proxy upstream %q: want a URL such as http://127.0.0.1:8080", upstreamURL)
	}
	load := func() (*httplimit.Middleware, error) {
		routes := &defaultRoutes
		if routesPath != "" {
			var err error
			if routes, err = config.LoadProxyRoutes(routesPath); err != nil {
				return nil, err
			}
		}
		return middleware(routes, lim)
	}
	m, err := load()
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p := &proxyServer{proxy: httplimit.NewProxy(upstream, m), load: load, log: log, served: make(chan error, 1)}
	p.srv = &http.Server{Handler: p.proxy, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := p.srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			p.served <- fmt.Errorf("proxy: %w", err)
		}
	}()
	log.Info("proxy serving", "listen", l.Addr().String(), "upstream", upstream.String(), "routes", routesPath)
	return p, nil
}

// reload re-reads the routes file; a bad one keeps the routes in force.
func (p *proxyServer) reload() {
	m, err := p.load()
	if err != nil {
		p.log.Error("routes reload failed; keeping the last good routes", "error", err)
		return
	}
	p.proxy.SetMiddleware(m)
	p.log.Info("routes reloaded")
}

func (p *proxyServer) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.srv.Shutdown(ctx)
}

// middleware builds the HTTP limiter a routes file describes.
func middleware(r *config.ProxyRoutes, lim httplimit.Limiter) (*httplimit.Middleware, error) {
	trusted, err := httplimit.ParsePrefixes(r.Identity.TrustedProxies)
	if err != nil {
		return nil, err
	}
	cfg := httplimit.Config{
		Limiter: lim,
		Identity: httplimit.Identity{
			Header:         r.Identity.Header,
			ClientIP:       r.Identity.ClientIP == nil || *r.Identity.ClientIP,
			TrustedProxies: trusted,
			Anonymous:      r.Identity.Anonymous,
		},
		Default: limits(r.Default),
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
