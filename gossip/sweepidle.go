package gossip

import "time"

// Sweeping idle entries out of a bounded map.
//
// Several of the owner design's per-key maps are bounded by MaxSeen and
// forget what has been idle for a TTL: the failover charge pairs
// (ownerchargeonce.go, swept once per subscription TTL) and the replica's
// echo pairs (owneraggreplica.go, swept when full). Both wrote the same
// sweep loop out by hand; sweepIdle is that loop, once. It only deletes:
// when to sweep and what to do when the map is still full stay with the
// caller, as they differ. Which entries go does not depend on the map's
// iteration order (every entry idle for more than ttl goes, no other), so
// the result is the same as the loops it replaced. Tested by
// TestSweepIdle; its callers' sweep-and-cap semantics, which passed
// before and after it, by TestChargePairsSweptAndCapped and
// TestEchoPairsSweptWhenFull.

// sweepIdle deletes from m every entry whose last use, last(v), is more
// than ttl before now. last must be cheap and must not touch m; a function
// literal that captures nothing keeps the sweep free of allocations.
func sweepIdle[K comparable, V any](m map[K]V, now, ttl time.Duration, last func(V) time.Duration) {
	for k, v := range m {
		if now-last(v) > ttl {
			delete(m, k)
		}
	}
}
