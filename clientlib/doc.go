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
// Undecided calls are never silent. Each is counted by cause (Stats,
// Client.FailOpens) and logged through Options.Log (default: log/slog at
// Warn), at most one line per cause per Options.LogInterval, each line with
// the count since the last. When the socket cannot be reached or trusted,
// Decision.Err is a *ReachError that names the path, what was found there
// (missing, mode and owner against this process's uid and groups, nothing
// listening, refused by the daemon's allow-list, served by an untrusted
// uid) and how to fix it; each distinct reason is logged once. `sluice
// doctor` walks the same steps for an operator.
//
// Before trusting a connection the client reads the credentials of the
// process serving the socket (SO_PEERCRED, on Linux) and refuses one not
// running as root or this process's own uid (Options.DaemonUIDs,
// $SLUICE_DAEMON_UIDS): a local user cannot answer in the daemon's place.
//
// Options.Timeout bounds the whole call, writing included: a daemon that
// stops reading fills the socket buffer, and the call still returns at its
// deadline (the rest of a half-written frame is finished in the background,
// and callers fail at once while more than 1 MiB waits). A cancelled
// context ends a call at once in every state it can wait in. A connection
// that dies within a second of its handshake counts as a failed dial, so a
// daemon that accepts and then misbehaves is redialled with backoff. A
// request the daemon would refuse whole (more checks than its max_batch, a
// frame above its max_frame) is denied as invalid before it is queued, so it
// never costs the callers that share its connection.
//
// A Client is safe for concurrent use and multiplexes all callers over a few
// persistent connections (Options.Conns), pipelining requests and matching
// replies by id. Decisions on the happy path allocate nothing.
//
// It depends only on the standard library and the msgpack wire format in
// package ipc, so any Go service can import it cheaply. The protocol, and
// the behaviour required of any client (this one is the reference), are
// specified in docs/PROTOCOL.md.
package clientlib
