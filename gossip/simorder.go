package gossip

import (
	"cmp"
	"iter"
	"slices"
	"strings"
)

// Map order in simulations. A simulated syncer must repeat itself with the
// same seed (testcluster/sim), but Go randomizes map iteration: which
// counters share a packet, the order packets are sent in (the simulated
// network draws each one's delay and loss in that order) and which
// contributors an answer budget reaches first would differ from run to run.
// inOrder iterates a map as range does in production, and in key order in
// a simulation.

// inOrder yields m's entries: in map order, or sorted by compare when
// sorted is set (a simulation). Entries deleted or added while iterating a
// sorted map: a deleted one not yet reached is skipped, an added one is not
// visited.
func inOrder[K comparable, V any](sorted bool, m map[K]V, compare func(a, b K) int) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if !sorted {
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
		slices.SortFunc(keys, compare)
		for _, k := range keys {
			if v, ok := m[k]; ok && !yield(k, v) {
				return
			}
		}
	}
}

func comparePendingKeys(a, b pendingKey) int {
	return cmp.Or(cmp.Compare(a.origin, b.origin), cmp.Compare(a.rule, b.rule), cmp.Compare(a.key, b.key),
		cmp.Compare(a.window, b.window), cmp.Compare(a.epoch, b.epoch))
}

func compareAggKeys(a, b aggKey) int {
	return cmp.Or(cmp.Compare(a.rule, b.rule), cmp.Compare(a.key, b.key), cmp.Compare(a.window, b.window))
}

var compareNames = strings.Compare
