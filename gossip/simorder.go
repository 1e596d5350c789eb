package gossip

import (
	"cmp"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
)

// Map order in simulations. A simulated syncer must repeat itself with the
// same seed (testcluster/sim), but Go randomizes map iteration: which
// counters share a packet, the order packets are sent in (the simulated
// network draws each one's delay and loss in that order) and which
// contributors an answer budget reaches first would differ from run to run.
// inOrder iterates a map as range does in production, and in a simulation
// in key order rotated to start at a random entry drawn from the syncer's
// seeded generator: what depends on map iteration starting at a random
// entry (an answer budget reaching a different rest each round) still does.

// inOrder yields m's entries: in map order when rnd is nil (production),
// else sorted by compare and rotated to start at an entry drawn from rnd.
// Entries deleted while iterating a sorted map are skipped once deleted;
// entries added are not visited.
func inOrder[K comparable, V any](rnd *rand.Rand, m map[K]V, compare func(a, b K) int) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if rnd == nil {
			for k, v := range m {
				if !yield(k, v) {
					return
				}
			}
			return
		}
		keys := make([]K, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		if len(keys) == 0 {
			return
		}
		slices.SortFunc(keys, compare)
		start := rnd.IntN(len(keys))
		for i := range keys {
			k := keys[(start+i)%len(keys)]
			if v, ok := m[k]; ok && !yield(k, v) {
				return
			}
		}
	}
}

// simRand is the generator inOrder rotates with: the syncer's own in a
// simulation, nil (map order) in production.
func (s *Syncer) simRand() *rand.Rand {
	if s.sortedLocked() {
		return s.rnd
	}
	return nil
}

// sortedLocked reports whether the syncer iterates its maps in key order:
// in a simulation, unless SimulateMapOrder was called.
func (s *Syncer) sortedLocked() bool { return s.simulated && !s.mapOrder }

// SimulateMapOrder makes a simulated syncer iterate its maps in map order,
// as in production, instead of in seeded key order: its runs no longer
// repeat with a seed, and it no longer pays for sorting each map it
// iterates. For measuring what the syncer's code costs in production
// (testcluster/sim replays one node's inputs into a syncer on its own).
// Call it before driving the syncer.
func (s *Syncer) SimulateMapOrder() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mapOrder = true
}

func comparePendingKeys(a, b pendingKey) int {
	return cmp.Or(cmp.Compare(a.origin, b.origin), cmp.Compare(a.rule, b.rule), cmp.Compare(a.key, b.key),
		cmp.Compare(a.window, b.window), cmp.Compare(a.epoch, b.epoch))
}

func compareAggKeys(a, b aggKey) int {
	return cmp.Or(cmp.Compare(a.rule, b.rule), cmp.Compare(a.key, b.key), cmp.Compare(a.window, b.window))
}

func compareHotKeys(a, b [2]string) int {
	return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
}

var compareNames = strings.Compare
