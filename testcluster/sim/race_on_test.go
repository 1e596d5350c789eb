//go:build race

package sim

// raceEnabled: the race detector slows the simulation several times over.
const raceEnabled = true
