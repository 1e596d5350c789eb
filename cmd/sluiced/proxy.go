package main

import (
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/clientlib/httplimit"
	"github.com/sluicelabs/sluice/ipc"
	"github.com/sluicelabs/sluice/proxy"
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
	p, err := proxy.Start(proxy.Config{
		Listen: c.String("listen"), Upstream: c.String("upstream"), RoutesPath: c.String("routes"),
		Limiter: client, Log: log, Events: events, Check: proxy.InspectCheck(rulesClient),
	})
	if err != nil {
		return err
	}
	defer p.Shutdown()
	// The decision client learns that the daemon is gone when a request
	// finds it so; the routes client, asking every --routes-check-interval,
	// notices it on an idle proxy too.
	daemonUp := func() bool { return client.Up() && rulesClient.Up() }
	reg := prometheus.NewRegistry()
	p.RegisterMetrics(reg, daemonUp)
	if addr := c.String("metrics-addr"); addr != "" {
		stopMetrics, err := proxy.ServeMetrics(addr, reg, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	log.Info("proxy serving", "socket", sock)
	ctx, stop := handleSignals(p.Reload)
	defer stop()
	go p.WatchDaemon(ctx, daemonUp, sock, c.Duration("routes-check-interval"))
	select {
	case err := <-p.Served():
		return err
	case <-ctx.Done():
		return nil
	}
}

// waitUp waits until the client has a connection, or until deadline.
func waitUp(c *clientlib.Client, deadline time.Time) {
	for !c.Up() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}
