// Package proxy is Sluice's HTTP reverse proxy, the library behind `sluiced
// proxy` (deciding over the daemon's socket) and `sluiced --proxy-listen`
// (deciding inside the daemon): it reads a routes file (config.ProxyRoutes),
// builds the httplimit.Middleware the file describes (NewMiddleware, the one
// mapping between the two), serves it in front of an upstream, reloads it,
// checks it against the daemon's rules as they change, and exports its
// state as Prometheus series.
//
// It is not the middleware itself (clientlib/httplimit, which services
// embed without this package's dependencies), nor the routes file's format
// (config). The commands only parse flags and wire it up.
package proxy
