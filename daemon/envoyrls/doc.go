// Package envoyrls serves Envoy's rate limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over gRPC on
// Unix sockets and TCP, deciding every call in-process through the daemon's
// decision interface (Decider): no network on the request path, no gossip.
//
// A request's domain and each descriptor's entries are matched against the
// envoyproxy/ratelimit configuration in force (config.Envoy, the daemon's
// --envoy-config) exactly as ratelimit matches them: key and value before a
// trailing-'*' value prefix before key alone, nested level by level, the
// limit applying only when the descriptor's last entry lands on a
// rate_limit. A descriptor that matches nothing, or an unlimited one, is OK.
//
// All the limited descriptors of one call are decided together as one
// Sluice multi-check: each gets its own status, and the call is charged only
// if every one admits (a request Envoy refuses spends nothing; ratelimit
// instead counts every descriptor even when another refuses). Shadow-mode
// limits answer OK and are counted in the rule metrics. hits_addend (per
// descriptor, else per request; 0 means 1) is the cost.
//
// The Unix socket obeys the daemon's --allow-uid/--allow-gid (SO_PEERCRED
// at accept); a request is capped at MaxRequestBytes and a connection at
// MaxStreams calls in flight; a call is decided synchronously in memory, so
// it answers well within any deadline Envoy sets.
//
// It is not a client library and holds no buckets: the daemon decides.
package envoyrls
