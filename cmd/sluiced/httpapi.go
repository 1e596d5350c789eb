package main

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/clientlib/httplimit"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
	"github.com/sluicelabs/sluice/daemon/httpapi"
)

// startHTTPAPI serves the HTTP decision API (--http-listen): /v1/check on
// the daemon's own buckets, /v1/auth through the forward-auth routes,
// bounded by the socket's caps, its outcomes on the daemon's /metrics. When
// the daemon's rules change (file watch, rules URL) the routes are read and
// checked again; routes that no longer fit stay in force, logged at ERROR.
func startHTTPAPI(ctx context.Context, d *daemon.Daemon, s config.Settings, log hclog.Logger) (*httpapi.Server, error) {
	events := httplimit.NewEvents(log.Warn, 0, nil)
	srv, err := httpapi.New(httpapi.Config{
		Decider: d, Limiter: d.Local(), Rules: d.Rules, RoutesPath: s.HTTPRoutes,
		MaxBody: s.MaxFrameBytes, MaxBatch: s.MaxBatch, MaxKeyLen: s.MaxKeyLen, MaxConns: s.HTTPMaxConns,
		AllowedHosts: s.HTTPAllowedHosts,
		FailOpen:     clientlib.NewFailOpenLog(log.Warn, 0, false, nil),
		Events:       events,
		Log:          log,
	})
	if err != nil {
		return nil, err
	}
	if err := srv.Listen(s.HTTPAddr); err != nil {
		return nil, err
	}
	count := func(endpoint, outcome, help string, f func(httpapi.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_httpapi_requests_total", Help: help,
			ConstLabels: prometheus.Labels{"endpoint": endpoint, "outcome": outcome}},
			func() float64 { return float64(f(srv.Stats())) })
	}
	const help = "HTTP decision API answers, by endpoint and outcome (failed_open: the daemon could not decide and admitted)."
	d.MetricsRegisterer().MustRegister(
		count("check", "allowed", help, func(s httpapi.Stats) uint64 { return s.CheckAllowed }),
		count("check", "denied", help, func(s httpapi.Stats) uint64 { return s.CheckDenied }),
		count("check", "failed_open", help, func(s httpapi.Stats) uint64 { return s.FailedOpen }),
		count("auth", "allowed", help, func(s httpapi.Stats) uint64 { return s.AuthAllowed }),
		count("auth", "denied", help, func(s httpapi.Stats) uint64 { return s.AuthDenied }),
		count("auth", "other", help, func(s httpapi.Stats) uint64 { return s.AuthOther }),
		count("any", "invalid", help, func(s httpapi.Stats) uint64 { return s.Invalid }),
		count("any", "bad_host", help, func(s httpapi.Stats) uint64 { return s.BadHost }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_httpapi_auth_failed_open_total",
			Help: "Forward-auth requests admitted unlimited because the daemon could not decide."},
			func() float64 { return float64(events.Undecided()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_httpapi_auth_invalid_total",
			Help: "Forward-auth requests answered 500: a route the limiter refuses (cost above the burst, unknown rule under unknown_rule: deny)."},
			func() float64 { return float64(events.Invalid()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_httpapi_auth_unknown_rule_total",
			Help: "Forward-auth requests admitted unlimited because their rule is unknown and unknown_rule is allow."},
			func() float64 { return float64(events.UnknownRule()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_httpapi_shed_total",
			Help: "Connections to the HTTP decision API closed at once at its connection cap."},
			func() float64 { return float64(srv.Stats().Shed) }),
	)
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		last := d.Rules()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if now := d.Rules(); now != last {
				last = now
				_ = srv.Reload() // logged
			}
		}
	}()
	return srv, nil
}
