package proxy

import (
	"github.com/sluicelabs/sluice/clientlib/httplimit"
	"github.com/sluicelabs/sluice/config"
)

// NewMiddleware builds the HTTP limiter a routes file describes, deciding
// with lim and counting what it cannot limit in events (nil: its own). It is
// the one mapping from the routes file's terms to httplimit's.
func NewMiddleware(r *config.ProxyRoutes, lim httplimit.Limiter, events *httplimit.Events) (*httplimit.Middleware, error) {
	trusted, err := httplimit.ParsePrefixes(r.Identity.TrustedProxies)
	if err != nil {
		return nil, err
	}
	cfg := httplimit.Config{
		Limiter: lim,
		Identity: httplimit.Identity{
			Header:          r.Identity.Header,
			ClientIP:        r.Identity.ClientIP == nil || *r.Identity.ClientIP,
			TrustedProxies:  trusted,
			ForwardedHeader: r.Identity.ForwardedHeader,
			Anonymous:       r.Identity.Anonymous,
		},
		Default: limits(r.Default),
		Events:  events,
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

// limits maps a routes file's limits to httplimit's.
func limits(in []config.ProxyLimit) []httplimit.Limit {
	out := make([]httplimit.Limit, len(in))
	for i, l := range in {
		out[i] = httplimit.Limit{Rule: l.Rule, Cost: l.Cost, PerRoute: l.PerRoute}
	}
	return out
}
