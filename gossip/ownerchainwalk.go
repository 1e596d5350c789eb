package gossip

import "slices"

// A key's chain failover walks the ring past every silent member.
//
// The chain (ownerchain.go) sent a key's counters to its third member once
// its owner and replica both left them unanswered, and stopped there. When
// the third crashed too before memberlist declared any of the three dead,
// nobody counted the key, as before the chain: every group admitted on its
// aggregator's own balance. 300 simulated nodes, the hot key's owner,
// replica and third killed at 8, 9 and 10 s (testcluster sim
// --kill-third-at): 498.7-506.7% of the allowed over 30 s (seeds 1-3), 16
// times the limit a second; 100 nodes 296.7-302.5%; 1,000 nodes 389.4%;
// 30 nodes (no aggregation) held their last shares and were then charged
// the whole silence at once: nothing admitted for 4 s, 80.9-81.0%.
//
// So the chain's last member is not the third but whichever member the
// walk reached: a node whose counters the chain member it sends them to
// (its failover record's third) leaves unanswered for ownerFailover
// rounds, judged as the replica's (from the first send it did not answer,
// by this node's rounds), moves them on to the key's next member in ring
// order (chainNextLocked), up to chainMax members from the key's hash.
// That is the order in which the ring hands the key on as the cluster
// declares the dead: the member the walk reached is, once every member
// before it is declared dead, the key's owner, and counts on from what it
// counted. Everything else is the third's, unchanged:
//   - a node sends to at most one member past the replica at a time (the
//     owner and the replica are still sent to): the walk moves that one
//     destination on, it adds none;
//   - the next member counts from where the last one counted (chainCounter
//     with the pending counter's rack, the highest any chain member's
//     answer told counted), and a node charges the replica's account up to
//     the chain's first answer, then each member's on from the last one's
//     (chargeChainLocked: the chain's sum continues, baseB);
//   - answers are taken only from the member this node's own failover
//     record names (chainFromLocked): a member the walk left, or any member
//     the node did not walk to, is refused, as before;
//   - the replica's answer ends the chain, the owner's the failover;
//   - when the ring drops a dead member before the member reached, the
//     failover carries over to it at once (chainCarriedLocked).
//
// Aggregation: an aggregation point skips the owner, replica and third
// (ownerchainagg.go) but not the members past them: the walk skips a
// member its ring names one of the key's aggregators (its aggregate of
// the key is its group's), so it never sends a failed-over counter to an
// aggregator, and a member past the third counts failed-over counters,
// group counters included, only while it aggregates no group of the key
// (chainHereLocked). Skipping every member up to chainMax instead would
// move up to 5 more of a key's aggregators in honest runs.
//
// Mixed versions: a member of an earlier version counts a plain counter
// sent to it, but not a group counter past the third, nor pairs its own
// counting with the owner's answers; so the walk goes past the third only
// when every member advertises protoChainWalk (aggState.walk, decided per
// ring with thirdOut). With one older member the chain stops at the third
// as before.
//
// After, same runs (kills at 8/9/10 s): 300 nodes 93.4-93.5% (worst 1 s
// window +17..+201, in the second the ring drops the owner, as the double
// kill's +197 there), 100 nodes 93.5-93.6% (worst window that of the first
// second), 30 nodes 93.4-93.5% (no window over), 1,000 nodes 93.3%; 300
// nodes with 10%/min churn 92.9% (before 502.9%).
// Runs without a kill, with the owner alone killed (churn 0.1), with loss,
// and owner and replica killed (300 nodes, seeds 1-3) are byte-identical.
// (TestWalkPassesTheSilentThird, TestWalkTakesAnswersOnlyFromItsMember,
// TestRingNthIsTheNextOwner, testcluster/sim
// TestOwnerReplicaAndThirdKilledAdmitAsOwnerKilled.)

// protoChainWalk is the delegate protocol version of nodes whose chain
// failover walks past a silent third (and that count failed-over counters
// as a chain member past it).
const protoChainWalk = protoChainAgg + 1

// chainMax is how many members from a key's hash its chain may walk:
// owner, replica, third and five more. It bounds the ring walks of
// depth; a cluster that loses a key's first eight members (fewer when
// some of them aggregate the key: the walk skips those) before declaring
// any is not covered.
const chainMax = 8

// chainMembers fills m with the first chainMax distinct members (their
// node indexes) after (rule, key)'s hash in ring order and returns how
// many it found. It allocates nothing.
func (r *ownerRing) chainMembers(rule, key string, m *[chainMax]int32) int {
	if r.size() == 0 {
		return 0
	}
	at := r.search(keyHash(rule, key))
	n := 0
	for j := 0; j < len(r.points) && n < len(m) && n < r.size(); j++ {
		if node := r.points[(at+j)%len(r.points)].node; !slices.Contains(m[:n], node) {
			m[n] = node
			n++
		}
	}
	return n
}

// depth returns name's place in (rule, key)'s chain (0: owner, 1:
// replica, 2: third, …), -1 when it is not among its chainMax members.
func (r *ownerRing) depth(rule, key, name string) int {
	var m [chainMax]int32
	for i := range r.chainMembers(rule, key, &m) {
		if r.names[m[i]] == name {
			return i
		}
	}
	return -1
}

// nth returns the i-th member of (rule, key) in ring order (0: its owner),
// "" past the ring's members or chainMax.
func (r *ownerRing) nth(rule, key string, i int) string {
	var m [chainMax]int32
	if n := r.chainMembers(rule, key, &m); i >= 0 && i < n {
		return r.names[m[i]]
	}
	return ""
}

// ChainOf returns the i-th member of (rule, key) in ring order on this
// node's ring (0: its owner, 1: its replica, 2: its third, the chain
// failover's members, ownerchain.go); "" past chainMax or the ring's
// members. Tests and tools use it to find the member to watch or kill.
func (s *Syncer) ChainOf(rule, key string, i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshRingLocked()
	return s.owner.ring.nth(rule, key, i)
}

// chainWalkLocked reports whether chains walk past the third: every
// member speaks protoChainWalk. Caller holds s.mu.
func (s *Syncer) chainWalkLocked() bool {
	s.aggDecideLocked()
	return s.owner.agg.walk
}

// chainKeepsLocked reports whether member, which this node's counters of
// k go to past the replica, still may: the ring's third, or (walking) a
// member past it within chainMax. Caller holds s.mu.
func (s *Syncer) chainKeepsLocked(k [2]string, member string) bool {
	d := s.owner.ring.depth(k[0], k[1], member)
	return d == 2 || d > 2 && s.chainWalkLocked()
}

// chainNextLocked returns the member after member in k's chain that the
// walk may move to: not one of the key's aggregators on this node's ring;
// "" if none is left within chainMax. Caller holds s.mu.
func (s *Syncer) chainNextLocked(k [2]string, member string) string {
	r := s.owner.ring
	var m [chainMax]int32
	n := r.chainMembers(k[0], k[1], &m)
	var aggs []string
	if s.aggCapableLocked() {
		_, _, aggs = r.aggregatorsOf(k[0], k[1], s.aggThirdOutLocked()) // only when the walk moves: not a hot path
	}
	past := false
	for i := range n {
		name := r.names[m[i]]
		switch {
		case name == member:
			past = true
		case past && i > 2 && !slices.Contains(aggs, name):
			return name
		}
	}
	return ""
}

// chainWalkOnLocked moves f's chain member on when it left this node's
// counters unanswered for ownerFailover rounds (f.tsent: the first send it
// did not answer), and walking is on. Caller holds s.mu.
func (s *Syncer) chainWalkOnLocked(k [2]string, f failover) failover {
	st := &s.owner
	switch {
	case f.third == s.self:
		f.tsent = 0 // counted here
	case f.tsent == 0:
		f.tsent = st.round
	case st.round-f.tsent >= ownerFailover && s.chainWalkLocked():
		if next := s.chainNextLocked(k, f.third); next != "" {
			f.third, f.tsent = next, st.round
		}
	}
	return f
}

// chainHereLocked reports whether this node counts k's failed-over
// counters as a member of its chain past the replica: the third, or
// (walking) a member past it within chainMax that aggregates no group of
// it. Caller holds s.mu.
func (s *Syncer) chainHereLocked(k aggKey) bool {
	switch d := s.owner.ring.depth(k.rule, k.key, s.self); {
	case d == 2:
		return true
	case d > 2:
		return s.chainWalkLocked() && !s.groupHereLocked(k)
	}
	return false
}

// chainCarriedLocked keeps a failover f that reached a member past the
// replica when the ring names k another owner, owner: if that member is
// still past the new replica (the ring dropped a dead member before it),
// the counters go on to it at once, the new owner and replica sent to as
// well, and the new owner's answer ends the failover as any owner's.
// Without it every node waited for the new owner (the old replica, as
// silent) and then for the new replica (the old third) for ownerFailover
// rounds each (0.64 s at 20 ms rounds): nobody counted the key, and every
// group admitted on its aggregator's balance (100 simulated nodes, owner,
// replica and third killed: 176-284 admitted in the second the ring
// dropped the owner, then 3-5; after, no second above 105). It reports whether the counters go there. Caller
// holds s.mu.
func (s *Syncer) chainCarriedLocked(k [2]string, f failover, owner string) bool {
	if f.third == "" || f.ended != 0 || f.third == owner || !s.chainWalkLocked() || s.owner.ring.depth(k[0], k[1], f.third) < 2 {
		return false
	}
	s.owner.failover[k] = failover{at: s.owner.round, owner: owner, sent: s.owner.round, third: f.third}
	return true
}
