//go:build !race

package ipc

// raceEnabled: the race detector makes goroutine stacks and the runtime larger.
const raceEnabled = false
