//go:build !race

package clientlib

const raceEnabled = false
