package main

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluicelabs/sluice/clientlib/httplimit"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
	"github.com/sluicelabs/sluice/proxy"
)

// startBuiltInProxy starts the HTTP proxy inside the daemon (--proxy-listen):
// it decides in-process, checks its routes against the daemon's rules at
// start-up (refusing to start on a route naming an unknown rule or costing
// more than its rule's burst), at every reload, and whenever the rules
// change, and its series are served on the daemon's /metrics.
func startBuiltInProxy(ctx context.Context, listen, upstream, routes string, d *daemon.Daemon, log hclog.Logger) (*proxy.Server, error) {
	p, err := proxy.Start(proxy.Config{
		Listen: listen, Upstream: upstream, RoutesPath: routes,
		Limiter: d.Local(), Log: log, Events: httplimit.NewEvents(log.Warn, 0, nil),
		Check: func(r *config.ProxyRoutes) error { return r.CheckRules(config.RulesLookup(d.Rules())) },
	})
	if err != nil {
		return nil, err
	}
	p.RegisterMetrics(d.MetricsRegisterer(), func() bool { return true })
	go func() { // the daemon's rules may change under the routes (file watch, rules URL)
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
				p.Recheck()
			}
		}
	}()
	return p, nil
}
