// Package daemon is sluiced's composition root: it builds the bucket store,
// rules and IPC server from settings, makes each decision (reading the clock
// once per request), reloads rules without losing balances, and shuts down
// gracefully.
//
// A Daemon's life follows serf's agent (lifecycle.go): New validates and
// loads the rules, binding nothing and starting no goroutine; Start binds
// the socket, the admin and metrics endpoints and the gossip port, then
// serves; Leave sends the last counts and tells the cluster; Shutdown stops
// serving gracefully and waits for everything Start began (idempotent, safe
// before Start and after a failed one). Run does all four. A daemon runs
// once. Embedded has the same life, without the socket and endpoints.
//
// It holds no process-wide state: signals, flags and go-metrics' global sink
// belong to cmd/sluiced, which calls Run and Reload.
package daemon
