package sim

import "testing"

// skipHeavyUnderRace skips a run too heavy for the race detector: a
// simulation is one goroutine (doc.go), so the detector has nothing to
// find in it, and it slows the heaviest runs (relaying over tens of nodes,
// hundreds of nodes) to minutes, pushing the package toward go test's
// 10-minute limit on a loaded machine. .ci/run runs this package again
// without -race, where these runs are not skipped; the race detector
// covers the same code (gossip.Syncer, bucket.Store) in their own
// packages' tests and in the lighter runs here.
func skipHeavyUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("heavy single-goroutine simulation: runs without -race (.ci/run: go test ./testcluster/sim)")
	}
}
