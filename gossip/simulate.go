package gossip

import (
	"cmp"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// Simulation: a syncer run without memberlist, its network or its own
// goroutines, so that one process can run thousands of them against a
// virtual clock (testcluster/sim). The simulator plays memberlist: it calls
// the delegate and the event delegate Simulate returns as memberlist would
// (a packet arrived, a push-pull state to give or merge, a member joined or
// left), and calls the syncer's periodic work itself (Flush each gossip
// interval, PruneSeen each SeenTTL). Everything else is the production
// code: the counters, their coalescing, fan-out or relaying, the seen
// table, allowances and push-pull adoption.

// ErrSimulate is returned by Simulate on a syncer already started (or
// simulated, or shut down).
var ErrSimulate = errors.New("gossip: simulate needs a syncer that was never started")

// Simulate makes the syncer run over m instead of memberlist, on the clock
// now (its age is counted from the first reading), its random choices
// (a relayed round's targets) seeded with seed, and returns the
// callbacks memberlist would make into it. It starts nothing: the caller
// drives it. Not for production: a simulated syncer has no transport, so
// the sender guard (senderguard.go), which screens real packets, is off.
func (s *Syncer) Simulate(m Membership, now func() time.Time, seed uint64) (memberlist.Delegate, memberlist.EventDelegate, error) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.life != created || s.ml.Load() != nil {
		return nil, nil, ErrSimulate
	}
	s.life = running
	s.simulated = true
	s.now = now
	s.rnd = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s.born = now()
	s.ml.Store(&membershipRef{m})
	s.watchStalls() // stalllate.go
	return (*delegate)(s), (*events)(s), nil
}

// PruneSeen forgets counters no packet has mentioned since the previous
// prune: what the syncer does every SeenTTL (a simulator calls it).
func (s *Syncer) PruneSeen() { s.pruneSeen() }

// eachPendingLocked calls fn for each pending counter: in map order, or,
// in a simulation, in key order, so that which counters share a packet
// repeats with the seed. fn may drop the entry it is given. Caller holds
// s.mu.
func (s *Syncer) eachPendingLocked(fn func(k pendingKey, p *pendingCounter)) {
	if !s.sortedLocked() {
		for k, p := range s.pending {
			fn(k, p)
		}
		return
	}
	keys := make([]pendingKey, 0, len(s.pending))
	for k := range s.pending {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, comparePendingKeys)
	for _, k := range keys {
		if p, ok := s.pending[k]; ok {
			fn(k, p)
		}
	}
}

// eachSeenLocked calls fn for each counter heard, until fn returns false:
// in map order, or, in a simulation, in key order (a push-pull state lists
// them in that order, and a receiver pays for a gap from their allowances
// in it). Caller holds s.mu.
func (s *Syncer) eachSeenLocked(fn func(k counterKey, sr *seenRange) bool) {
	if !s.sortedLocked() {
		for k, sr := range s.seen {
			if !fn(k, sr) {
				return
			}
		}
		return
	}
	keys := make([]counterKey, 0, len(s.seen))
	for k := range s.seen {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b counterKey) int {
		return cmp.Or(cmp.Compare(a.origin, b.origin), cmp.Compare(a.rule, b.rule), cmp.Compare(a.key, b.key))
	})
	for _, k := range keys {
		if !fn(k, s.seen[k]) {
			return
		}
	}
}
