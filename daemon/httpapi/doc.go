// Package httpapi is sluiced's HTTP decision API, for services in any
// language and for reverse proxies, on a listener of its own
// (--http-listen; never the admin endpoint's):
//
//   - POST /v1/check takes JSON, {"checks": [{"rule": "api", "key":
//     "user:42", "cost": 1, "max_delay": 0.25}, ...]}, and answers as the
//     socket's CHECK does: the checks are decided together (admitted only if
//     all admit, then all charged), and the answer is {"allowed": bool,
//     "delay": seconds, "results": [{"rule", "status", "allowed", "limit",
//     "remaining", "retry_after", "reset_after", "period"}, ...]}, one result
//     per check in order, durations in seconds. cost defaults to 1 when
//     absent; max_delay (seconds) lets a check that would be refused be
//     admitted if its turn comes within it, the caller then waiting "delay".
//     A key longer than the daemon takes is replaced by its
//     clientlib.BoundedKey, as the Go client does, so it is limited, never
//     refused. A request that is itself invalid (not JSON, unknown fields,
//     no checks, too many, an empty key or rule, a cost below 1 or above the
//     rule's burst, a body over the frame cap) gets 400 (413, 415 or 405
//     where HTTP has a better code) with {"error": "..."}: never a pass.
//   - /v1/auth is a forward-auth endpoint for nginx auth_request, Traefik
//     forwardAuth and Caddy forward_auth: the original request is rebuilt
//     from the forwarded headers (method from X-Original-Method or
//     X-Forwarded-Method, path from X-Original-URI or X-Forwarded-Uri, host
//     from X-Forwarded-Host, the client from X-Forwarded-For or Forwarded
//     and the identity header as the routes file says), matched by the
//     proxy's routes file through proxy.NewMiddleware (the one mapping from
//     routes to limits), and answered 200 (admitted) or 429 with the headers
//     httplimit writes (RateLimit, RateLimit-Policy, X-Ratelimit-*,
//     Retry-After).
//
// Decisions are made on the daemon's own buckets, in process, never over
// the network. When the daemon cannot decide (an internal error), the
// request is admitted, counted and logged (failing open), as for every other
// caller; an invalid request is never admitted.
//
// Every input is bounded: the body by the socket's frame cap, the checks
// per request by the socket's batch cap, keys by the store's key length,
// headers by size and time, and open connections by a cap beyond which new
// ones are closed at once. The Host header must be an IP address, localhost
// or a configured name (else 421), so a web page re-pointed at the host by
// DNS rebinding cannot spend clients' tokens.
//
// It sits above package daemon, beside package proxy: it takes the daemon as
// an ipc.Decider and its in-process limiter as an httplimit.Limiter, and
// cmd/sluiced wires the two together.
//
// It is not the HTTP proxy (package proxy) nor the middleware services embed
// (clientlib/httplimit): it answers decisions, it forwards nothing.
package httpapi
