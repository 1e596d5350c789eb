// Package httplimit puts Sluice in front of net/http handlers: it identifies
// the client of a request (API key, authenticated user, or client IP behind
// trusted proxies), matches the request to route rules (method and path
// pattern → limits and costs), asks a Limiter (a clientlib.Client, or an
// embedded daemon) for a decision, writes the rate-limit headers clients
// expect, and answers 429 with a problem-details body when throttled.
//
// A request the limiter does not limit in the ordinary way never passes
// unseen (see Events): when the limiter cannot decide it passes unlimited
// (fail open) or gets 503 with a Retry-After of 1 to 5 s (fail closed);
// when the limiter refuses it as invalid (a route costing more than its
// rule's burst, a rule the daemon does not know under unknown_rule: deny)
// it gets 500, "rate limit misconfigured", and is not served. Each is
// counted and logged, at most one line per kind per interval.
//
// It also offers the other side: Transport, an http.RoundTripper for callers
// of rate-limited APIs that waits as 429 and 503 responses ask and otherwise
// backs off with full jitter.
//
// It links the standard library and msgpack only: beyond clientlib, it uses
// package bucket (std only) for elastic allowances, which are this
// process's own token buckets by design, and Sluice's internal helpers for
// retry delays and route checks.
package httplimit
