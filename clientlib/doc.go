// Package clientlib is the small client a service embeds to ask its local
// sluiced daemon for rate-limit decisions over a Unix socket.
//
// It is built to never be the outage. Every call returns within a short
// deadline (Options.Timeout, 5 ms by default). If the daemon is absent, dead,
// slow or answers nonsense, the call returns a Decision marked FailedOpen and
// allowed (or denied, if Options.FailClosed is set), and the failure is
// counted in Stats. While the daemon is known to be down, calls return at once
// without dialling; a background loop reconnects with capped exponential
// backoff and jitter and restores service when the daemon returns.
//
// A Client is safe for concurrent use and multiplexes all callers over a few
// persistent connections (Options.Conns), pipelining requests and matching
// replies by id. Decisions on the happy path allocate nothing.
//
// It depends only on the standard library and the msgpack wire format in
// package ipc, so any Go service can import it cheaply.
package clientlib
