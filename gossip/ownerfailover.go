package gossip

// A failover must not split a key's accounting.
//
// A node whose counters for a key go unanswered for ownerFailover rounds
// sends them to the key's replica (owner.go, ownerForLocked). An owner that
// is only late (a loaded machine, a lossy network) is still alive, and its
// other contributors keep sending to it: the key then had two aggregates
// that did not share. The failed-over nodes' consumption was counted at
// the replica only, and the replica's acknowledgements raised their
// counters' prev, so the owner never counted it even after the failover
// ended (it counts from the prev up); and the failover lasted
// ownerFailoverHold rounds, about 10 s. Ten nodes under 10-30% loss on a
// loaded 2-core machine admitted 106-114% of the limit
// (TestOwnerModeUnderLoss, 4 of 14 loaded runs).
//
// So, while failed over:
//   - a node sends its counters to the owner as well as to the replica
//     (the replica, failing over for its own counters, counts them in its
//     aggregate and sends them to the owner too): the owner misses nothing
//     of a node's consumption, whatever the replica counts;
//   - only the owner's answers acknowledge a node's counters (drop them, or
//     raise their prev); the replica's are charged as before but
//     acknowledge nothing, for as long as the replica may still answer
//     (failoverMuteRounds after the failover ends): a counter's prev stays
//     what the owner acknowledged, and the owner counts from there;
//   - an answer from the owner ends the failover at once: a late owner is
//     back as soon as one of its answers arrives;
//   - the same holds for an aggregator's group counter (owneragg.go,
//     writeGroupCounterLocked and aggHeardLocked): before, it went to the
//     replica alone and the replica's answers acknowledged it, so a late
//     owner never counted the groups' consumption of the failover (12
//     nodes, the owner 150 rounds late: each charged 2,874-3,264 tokens
//     of the others' 4,202, TestLateOwnerCountsTheFailedOverGroups), and
//     an owner silent longer than an active TTL answered no group again:
//     the failover lasted its whole hold.
//
// The price: what a failed-over node consumes is counted at both
// aggregates; the nodes that hear both charge the larger of the two
// accounts, not their sum (ownerchargeonce.go: before, they were charged it
// twice and admitted less for as long as the failover lasted, as long as a
// stalled owner stayed late). An owner that is really dead does not
// answer: the failover lasts until the ring drops it, as before, and the
// replica's aggregate is the key's only one; the node's counters to the
// dead owner cost a packet a round (fewer once unanswered: ownerBackoff).
// No message changes: an owner or replica of an earlier version sees
// counters, as before. When the replica is silent too, the counters go on
// to the key's third member (ownerchain.go).

// failoverRoutesLocked reports whether the counters of key k, whose owner
// on the ring is owner, go to the replica now; it ends the failover when
// its hold is over, and forgets it when the ring names another owner or
// its answers can no longer come (failoverMuteRounds). The replica's
// answers do not stop the wait for the owner's (ackFromLocked), so a
// failover that ends starts that wait anew. Caller holds s.mu.
func (s *Syncer) failoverRoutesLocked(k [2]string, owner string) bool {
	st := &s.owner
	f, ok := st.failover[k]
	switch {
	case !ok:
		return false
	case f.owner != owner:
		s.failoverMovedLocked(k, f, true) // ownerfailovermove.go
		delete(st.failover, k)
		delete(st.waiting, k) // a new owner: ownerFailover rounds from now
		// ownerchainwalk.go: unless the chain's member still is one.
		return s.chainCarriedLocked(k, f, owner)
	case f.ended == 0 && st.round-f.at < ownerFailoverHold:
		s.failoverMovedLocked(k, f, false) // ownerfailovermove.go: the replica may have moved
		return true
	case f.ended == 0:
		f.ended = st.round
		st.failover[k] = f
		delete(st.waiting, k) // the owner again: ownerFailover rounds from now
	case st.round-f.ended > s.failoverMuteRounds():
		delete(st.failover, k)
	}
	return false
}

// failoverRoomLocked reports whether a failover of k can be recorded: one
// is already (ended: it is replaced), or fewer than MaxSeen are. Caller
// holds s.mu.
func (s *Syncer) failoverRoomLocked(k [2]string) bool {
	_, ok := s.owner.failover[k]
	return ok || len(s.owner.failover) < s.cfg.MaxSeen
}

// failoverAlsoLocked returns the owner of (rule, key) while this node's
// counters of it go to the replica (to) instead, and the replica too while
// they go to the third member (ownerchain.go); "" for neither: they are
// sent them too. Call it after ownerForLocked. Caller holds s.mu.
func (s *Syncer) failoverAlsoLocked(rule, key, to string) (also [2]string) {
	f, ok := s.owner.failover[[2]string{rule, key}]
	if !ok || f.ended != 0 {
		return also
	}
	if f.owner != to && f.owner != s.self {
		also[0] = f.owner
	}
	if f.third != "" && f.third == to {
		if _, replica := s.owner.ring.owners(rule, key); replica != s.self && replica != to {
			also[1] = replica
		}
	}
	return also
}

// failoverMuteRounds is how long after a failover ends the replica's
// answers still acknowledge nothing: twice subTTL, the longest the replica
// keeps answering a contributor after its last counter.
func (s *Syncer) failoverMuteRounds() uint64 {
	return 2 * uint64(s.subTTL()/s.cfg.GossipInterval)
}

// ackFromLocked applies the acknowledgement of an answer from sender, the
// key's owner (owner) or replica: the owner's acknowledges this node's
// counters, and ends a failover from it; the replica's does only when the
// key was not failed over lately. Caller holds s.mu.
func (s *Syncer) ackFromLocked(a ownerAnswer, sender, owner string) {
	k := [2]string{a.rule, a.key}
	if f, ok := s.owner.failover[k]; ok && f.owner == owner && sender == owner && f.ended == 0 {
		f.ended = max(1, s.owner.round) // the owner lives: back to it
		s.owner.failover[k] = f
	}
	if s.acksLocked(a.rule, a.key, sender, owner) {
		w, waiting := s.owner.waiting[k]
		s.ackLocked(a)
		if waiting && sender != owner {
			s.owner.waiting[k] = w // only the owner's answers end the wait for them (ownerchain.go)
		}
		return
	}
	s.chainCountedLocked(a) // ownerchain.go
}

// acksLocked reports whether an answer of (rule, key) from sender, the
// key's owner (owner) or replica, acknowledges what this node sent: the
// owner's always, the replica's only when the key was not failed over
// from owner lately (a failed-over aggregator's group counter too: the
// owner counts it from what it acknowledged). Caller holds s.mu.
func (s *Syncer) acksLocked(rule, key, sender, owner string) bool {
	f, ok := s.owner.failover[[2]string{rule, key}]
	return !ok || f.owner != owner || sender == owner
}

// ownNew returns what of this node's own counter c its aggregate sub has
// not counted yet, and notes it counted: what lies above c's prev and, in
// the epoch counted last, above the highest counted. A counter of the
// replica's own during a failover is counted here and stays pending for
// the owner, its prev what the owner acknowledged: counted once however
// often it comes, and after the ring makes this node the owner. A counter
// of an epoch left behind is counted from its prev, as it always was.
func ownNew(sub *ownerSub, c Counter) uint64 {
	base := c.Prev
	switch {
	case c.Epoch == sub.epoch:
		base = max(base, sub.hi)
		sub.hi = max(sub.hi, c.Used)
	case c.Epoch > sub.epoch:
		sub.epoch, sub.hi = c.Epoch, c.Used
	}
	return c.Used - min(c.Used, base)
}
