// Package daemon is sluiced's composition root: it builds the bucket store,
// rules and IPC server from settings, makes each decision (reading the clock
// once per request), reloads rules without losing balances, and shuts down
// gracefully.
//
// It holds no process-wide state: signals and flags belong to cmd/sluiced,
// which calls Run and Reload.
package daemon
