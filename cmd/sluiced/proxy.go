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
	upstream, err := url.Parse(c.String("upstream"))
	if err != nil || upstream.Scheme == "" || upstream.Host == "" {
		return fmt.Errorf("--upstream %q: want a URL such as http://127.0.0.1:8080", c.String("upstream"))
	}
	client := clientlib.New(clientlib.Options{SocketPath: c.String("socket"), Timeout: c.Duration("decision-timeout"), FailClosed: c.Bool("fail-closed"), Name: "sluiced-proxy"})
	defer client.Close()
	load := func() (*httplimit.Middleware, error) {
		routes := &defaultRoutes
		if path := c.String("routes"); path != "" {
			var err error
			if routes, err = config.LoadProxyRoutes(path); err != nil {
				return nil, err
			}
		}
		return middleware(routes, client)
	}
	m, err := load()
	if err != nil {
		return err
	}
	proxy := httplimit.NewProxy(upstream, m)
	l, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("proxy listen: %w", err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if m, err := load(); err != nil {
					log.Error("routes reload failed; keeping the last good routes", "error", err)
				} else {
					proxy.SetMiddleware(m)
					log.Info("routes reloaded")
				}
			}
		}
	}()
	log.Info("proxy serving", "listen", l.Addr().String(), "upstream", upstream.String(), "socket", c.String("socket"))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
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
