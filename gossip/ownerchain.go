package gossip

// A key whose owner and replica are both silent fails over to the third.
//
// A node fails a key over to its replica when its owner leaves its
// counters unanswered for ownerFailover rounds (ownerfailover.go). When the
// replica crashes too before memberlist declares either dead (seconds at
// hundreds of members: 4·log10 N probe intervals), nobody counted the key:
// the nodes that use it heard no other consumption, and an aggregator,
// once its owner's last balance was older than aggBalanceFresh, told its
// group its own balance (owneraggbalance.go): every group admitted the
// whole limit. 300 simulated nodes, the hot key's owner killed at 8 s and
// its replica at 9 s (testcluster sim --kill-replica-at): 512-527% of the
// allowed over 30 s (seeds 1-3), 17 times the limit a second for 9 s;
// 100 nodes: 321-325%. Without aggregation (30 nodes) the nodes held their
// last share, and the key's next owner then counted the whole silence at
// once: every node was charged it again and the cluster admitted nothing
// for 5 s (75.2%). That is also why holding every node to its last share
// while nobody counts (the other way considered) is not enough: the
// consumption of the silence is still counted once the ring moves, on top
// of the shares that already held the nodes to the limit; a node cannot
// tell which part of what the next owner tells it its share already paid.
//
// So the failover is a chain of the key's first three members in ring
// order: while failed over to the replica, a node whose counters the
// replica leaves unanswered for ownerFailover rounds (judged as the
// owner's: from the first send it did not answer, by this node's rounds)
// sends them to the third member as well. The third is the key's owner on
// the ring without the first two: when the cluster declares both dead the
// ring makes it the owner, and its aggregate, already counting, goes on
// (it counts from the highest it counted: nothing twice). While at the
// third:
//   - counters still go to the owner and to the replica: the owner's
//     aggregate covers all, and the replica's all it counted before and
//     all the third counts;
//   - only the owner's answers acknowledge (acksLocked, as for the
//     replica's), and only the owner's end the wait for it: before, an
//     answer of the replica (or of the third, once the ring made it the
//     replica of a dead owner) restarted the wait, and a node whose
//     failover had ended after its hold never failed over again (300
//     simulated nodes: 1,448 admitted in the second before the ring
//     dropped the replica, TestOnlyTheOwnersAnswersEndTheWaitForIt);
//   - the third counts from where the replica counted (chainCounter: the
//     replica's answers' acknowledgement, kept beside the owner's), not
//     from the owner's last acknowledgement: the replica told the others
//     what lies below, and the third counted the replica's whole failover
//     again and was charged it (the replica killed 7 s after the owner,
//     300 nodes: the third's balance 690 tokens below the key's held every
//     node to nothing for 6 s: 72% of the allowed);
//   - a node charges the largest of the owner's account, the replica's,
//     and the replica's until the third first answered plus the third's
//     since (ownerchargeonce.go, chargePair.most): a late owner or replica
//     that answers again never charges the failover twice; the third,
//     counting the failed-over counters itself, pairs its counting with
//     the owner's and the replica's answers as a replica does
//     (replicaChargeLocked, aggEchoLocked);
//   - the replica's answer ends the chain (it lives: back to it), the
//     owner's the whole failover;
//   - an aggregator's group counter fails over the same way (it is routed
//     by ownerForLocked) and the third counts it (groupCountLocked).
//
// A third that aggregates a group of the key holds that group's aggregate
// under the key, so it refuses failed-over counters (chainRefusesLocked):
// once every member speaks protoChainAgg the third is none of the key's
// aggregators (ownerchainagg.go; before, 10-16% of keys at 100-300
// members, counted by nobody until the ring dropped both); in a cluster
// with older members such a key still is. A third that dies too is
// walked past once every member speaks protoChainWalk (ownerchainwalk.go:
// the chain goes on to the key's next member, one destination at a time).
//
// After: 300 nodes, owner and replica killed 1 s apart, 93.4-94.0% of the
// allowed (seeds 1-3; 93.7% with the owner alone killed, 93.5% with
// nothing killed), worst 1 s window +0 to +10; 100 nodes 93.5-93.9%, the
// worst window that of the run without failure (the first second); 30
// nodes 93.3-93.5%; churn 0.1/min: 93.3-97.4%. Runs without a kill, or
// with the owner alone killed, are byte-identical.
// (TestOwnerAndReplicaDeadFailOverToTheThird,
// TestLateReplicaEndsTheChainAndChargesOnce, TestThirdAnswersOnlyWhenChained.)
//
// Who may act: a node takes the third's answers only while its own
// counters of the key go, or lately went, to that member (chainFromLocked:
// the failover's record names it): the ring's third before this node found
// the owner and the replica silent, or any other member, is refused
// (ownerRefused), and the third's answers acknowledge nothing. The third
// counts what it is sent as an owner does (kind 4 is counted by any member
// it reaches, as before; a group counter now by the owner, replica or
// third, from a member the ring names an aggregator of the key), within
// each origin's allowance: a lying peer moves the third's own balance by
// what it could have admitted, as it can the owner's and the replica's.
// A lying third is bounded as an owner (heardLocked, boundViewLocked), and
// only while this node finds the first two silent.
// Memory: two fields of the failover record (at most MaxSeen), two of the
// charge pair (at most MaxSeen), one word per pending counter and group.

// chainRoutesLocked returns the third member of (rule, key), k, if this
// node's counters of it go there now, "" otherwise; call it while they go
// to the replica (failoverRoutesLocked). It starts the wait for the
// replica's answer at the first send, and moves to the third once
// ownerFailover rounds passed without one. Caller holds s.mu.
func (s *Syncer) chainRoutesLocked(k [2]string, replica string) string {
	st := &s.owner
	f, ok := st.failover[k]
	if !ok || replica == s.self {
		return "" // the replica's own counters are counted here
	}
	third := st.ring.third(k[0], k[1])
	if third == s.self && s.groupHereLocked(aggKey{k[0], k[1], 0}) {
		third = "" // its aggregate of the key is its group's (below)
	}
	switch {
	case third == "":
		f.third, f.sent = "", 0
	case f.third != "" && s.chainKeepsLocked(k, f.third):
		f = s.chainWalkOnLocked(k, f) // ownerchainwalk.go: past a silent third
	case f.sent == 0 || f.third != "":
		f.third, f.sent = "", st.round // the ring named another third: wait anew
	case st.round-f.sent >= ownerFailover:
		f.third, f.tsent = third, st.round
	}
	st.failover[k] = f
	return f.third
}

// chainCounter is counter c as sent to a key's third (toThird) or counted
// there: from counted, where the replica (or the third) counted it
// without acknowledging it, when that lies above its prev. The replica
// counted and told the others what lies below; counted from the owner's
// acknowledgement, the third counted the replica's whole failover again
// and was charged it (300 simulated nodes, the replica killed 7 s after
// the owner: the third's balance fell 690 tokens below the key's, and
// its views held every node to nothing for 6 s: 72% of the allowed).
func chainCounter(c Counter, counted uint64, toThird bool) Counter {
	if toThird {
		c.Prev = min(c.Used, max(c.Prev, counted))
	}
	return c
}

// chainCountedLocked notes, for this node's own pending counter, how far a
// replica's or third's answer a, which acknowledges nothing, counted it.
// Caller holds s.mu.
func (s *Syncer) chainCountedLocked(a ownerAnswer) {
	if p, ok := s.pending[pendingKey{counterKey{s.self, a.rule, a.key}, a.window, a.ackEpoch}]; ok {
		p.rack = max(p.rack, a.ackUsed)
	}
}

// chainHeardLocked notes an answer of k from sender: from the key's
// replica on this node's ring, it lives, so counters go back to it, and
// the wait for its next answer starts at the next send; from the chain
// member the counters go to past it, the wait for that one's starts anew
// (ownerchainwalk.go). Caller holds s.mu.
func (s *Syncer) chainHeardLocked(k [2]string, sender, owner, replica string) {
	f, ok := s.owner.failover[k]
	if !ok || f.owner != owner {
		return
	}
	switch {
	case sender == replica && (f.sent != 0 || f.third != ""):
		f.sent, f.third, f.tsent = 0, "", 0
	case sender == f.third && f.third != "" && f.tsent != 0:
		f.tsent = 0 // the chain's member lives: the walk waits from the next send (ownerchainwalk.go)
	default:
		return
	}
	s.owner.failover[k] = f
}

// chainFromLocked reports whether sender is the third member this node's
// counters of (rule, key) go to, or went to in a failover whose replica's
// answers may still come (ownerfailover.go keeps the record that long):
// its answers are taken as the replica's are. Caller holds s.mu.
func (s *Syncer) chainFromLocked(rule, key, sender string) bool {
	f, ok := s.owner.failover[[2]string{rule, key}]
	return ok && f.third != "" && f.third == sender
}

// chainThirdLocked returns the third member this node failed k over to
// lately ("" if none): its answers pair with the owner's and the
// replica's (ownerchargeonce.go). Caller holds s.mu.
func (s *Syncer) chainThirdLocked(k aggKey) string {
	return s.owner.failover[[2]string{k.rule, k.key}].third
}

// thirdHereLocked reports whether this node is the third member of k on
// its ring, counting what the failed-over nodes send it. Caller holds
// s.mu.
func (s *Syncer) thirdHereLocked(k aggKey) bool {
	return s.chainHereLocked(k) // ownerchainwalk.go: or a member past it the chain walks to
}

// groupHereLocked reports whether this node aggregates a group of k: its
// aggregate of k is that group's, which counts no failed-over counters;
// as the key's third it refuses them (the chain stops at the replica, as
// before), and its own counters do not move to it. Caller holds s.mu.
func (s *Syncer) groupHereLocked(k aggKey) bool {
	g := s.owner.agg.groups[k]
	return g != nil && g.o == s.owner.mine[k] && g.o != nil
}

// chainRefusesLocked reports whether a counter of k sent to this node as
// an owner is refused because this node is only k's third and aggregates
// a group of it (groupHereLocked). Caller holds s.mu.
func (s *Syncer) chainRefusesLocked(k aggKey) bool {
	return s.groupHereLocked(k) && s.thirdHereLocked(k)
}
