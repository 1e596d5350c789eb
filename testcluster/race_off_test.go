//go:build !race

package testcluster

// raceEnabled: the race detector slows every node several times over.
const raceEnabled = false
