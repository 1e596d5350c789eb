package gossip

// Push-pull: memberlist's periodic full-state exchange over TCP. This
// node's state is its balances and what it has charged of others'
// counters (localState); a peer's is merged in mergeState (adopt.go).

// stateBudget bounds a push-pull state (memberlist allows 20 MiB).
const stateBudget = 8 << 20

// localState is this node's push-pull state: the ledger's balances (half
// of stateBudget at most) and, for those keys, the counters heard from
// others (the other half).
func (s *Syncer) localState() []byte {
	var entries []stateEntry
	size := 0
	s.ledger.Snapshot(func(c Counter, balance float64) bool {
		size += entryOverhead + len(c.Rule) + len(c.Key) + 9
		if size > stateBudget/2 {
			return false
		}
		entries = append(entries, stateEntry{c: c, balance: balance})
		return true
	})
	// What this node has charged of others' counters for those keys: a
	// receiver adopting a balance must not charge them again.
	listed := make(map[[2]string]bool, len(entries))
	for _, e := range entries {
		listed[[2]string{e.c.Rule, e.c.Key}] = true
	}
	var seen []seenEntry
	size = 0
	s.mu.Lock()
	s.eachSeenLocked(func(k counterKey, sr *seenRange) bool {
		if !listed[[2]string{k.rule, k.key}] {
			return true
		}
		if size += entryOverhead + len(k.origin) + len(k.rule) + len(k.key); size > stateBudget/2 {
			return false
		}
		seen = append(seen, seenEntry{origin: k.origin, c: Counter{Rule: k.rule, Key: k.key, Epoch: sr.cur.epoch, Window: sr.cur.window, Used: sr.cur.hi}})
		return true
	})
	s.mu.Unlock()
	return encodeState(s.self, entries, seen)
}
