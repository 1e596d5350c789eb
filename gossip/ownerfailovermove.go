package gossip

// A failover the ring moves to a third member hands it what the replica
// counted.
//
// While a node fails a key over from its owner A to the replica B
// (ownerfailover.go), only A's answers acknowledge its counters: B's are
// charged but acknowledge nothing, so the prev of every counter, the group
// counters of the key's aggregators included (owneragg.go), stays what A
// last acknowledged, and A, if it was only late, counts from there. When
// A is dead, B's aggregate holds the failover and every node was charged
// it through B's answers. A member that joins then, whose name the ring
// puts before A's, becomes the owner C, A (not yet declared dead) its
// replica: the failover ends (the ring names another owner) and the node
// sends C its counters, prev still A's acknowledgement. C's aggregate,
// made anew, counted from there everything B had counted, and charged it
// to its own ledger and to every node a second time; and its own balance,
// the whole failover charged at once, was the view it told every node
// (300 simulated nodes, 10%/min churn, the owner killed at 8 s, seed 9:
// n00160.1 joined at 15.5 s; each aggregator was charged 679 tokens at
// C's first answers, every node ended 658-1,309 over what the others
// admitted, and the cluster admitted nothing for 5 s: 74.3% of the
// limit).
//
// So a node keeps, while failed over, the acknowledgements B's answers
// withheld (of its own counter and of its group's), and applies them when
// the ring names an owner other than A: C counts from what B counted. What
// B acknowledged B counted and answered, and A, had it counted it too, is
// no longer the owner: C counting it again was the failover twice. The
// same when a joiner takes B's place as the replica (the failover goes on
// to it, which counted everything B had, and the nodes' charge-once
// pairs, their replica gone, charged its answers whole: with the owner's
// move alone, 300 simulated nodes whose replica was churned out too, seed
// 30, ended ~9,500 tokens over each), and for B's own counters, which B counted in its
// own aggregate (ownerRoundLocked) and which went on to C with A's prev
// (five bare syncers, a joiner the owner: B's consumption during the
// failover charged to the three others twice, 588 for 468; 820 with no
// acknowledgement applied, 471 now). An answer of A forgets them (A counts
// from its own acknowledgements); a failover from A that starts again once
// its hold is over, A silent still, keeps them. What B acknowledged and
// had not yet told the others when it stopped answering (its last
// interval, at most) no one counts again: the cluster admits that much
// more. Tested by TestFailoverMovedToAJoinerCountsFromTheReplica and
// TestJoinerOwnerOfAFailedOverKeyChargesOnce.

// withheldAcks is the most acknowledgements of a replica a failover keeps:
// this node's own counter's and its group's, in a window or two.
const withheldAcks = 4

// withheldAck is an acknowledgement a replica's answer carried and this
// node did not apply: the replica counted up to used of the counter (or
// group counter) of epoch in window.
type withheldAck struct {
	from                string
	window, epoch, used uint64
}

// withholdLocked notes the acknowledgement of a, an answer of the replica
// (from) of a key failed over from its owner, which acknowledges nothing
// now (acksLocked). Caller holds s.mu.
func (s *Syncer) withholdLocked(a ownerAnswer, from string) {
	k := [2]string{a.rule, a.key}
	f, ok := s.owner.failover[k]
	if !ok || a.ackEpoch == 0 {
		return
	}
	oldest := 0
	for i := range f.withheld {
		w := &f.withheld[i]
		if w.from == from && w.window == a.window && w.epoch == a.ackEpoch {
			w.used = max(w.used, a.ackUsed)
			return
		}
		if w.window < f.withheld[oldest].window {
			oldest = i
		}
	}
	if len(f.withheld) < withheldAcks {
		f.withheld = append(f.withheld, withheldAck{from, a.window, a.ackEpoch, a.ackUsed})
	} else {
		f.withheld[oldest] = withheldAck{from, a.window, a.ackEpoch, a.ackUsed}
	}
	s.owner.failover[k] = f
}

// applyWithheldLocked applies the acknowledgements f, the failover of
// (rule, key) the ring just moved to another owner, withheld: to this
// node's own pending counter, and to its group of the key. Caller holds
// s.mu.
func (s *Syncer) applyWithheldLocked(rule, key string, f failover) {
	for _, w := range f.withheld {
		s.applyAckLocked(rule, key, w)
	}
	if f.selfCounted {
		s.ownCountedLocked(rule, key)
	}
}

// ownCountedLocked acknowledges this node's own pending counters of (rule,
// key) up to what its own aggregate counted of them: it was the replica a
// failover went to, and counted its own consumption (ownNew), which the
// failed-over nodes were told. Caller holds s.mu.
func (s *Syncer) ownCountedLocked(rule, key string) {
	for pk := range s.pending {
		if pk.origin != s.self || pk.rule != rule || pk.key != key {
			continue
		}
		o := s.owner.mine[aggKey{rule, key, pk.window}]
		if o == nil {
			continue
		}
		if sub := o.subs[s.self]; sub != nil && sub.epoch == pk.epoch {
			s.ackLocked(ownerAnswer{rule: rule, key: key, window: pk.window, ackEpoch: pk.epoch, ackUsed: sub.hi})
		}
	}
}

// replicaMovedLocked applies the acknowledgements the failover of k
// withheld from a replica the ring no longer names (a joiner took its
// place): the new replica counts from there. Caller holds s.mu, k failed
// over.
func (s *Syncer) replicaMovedLocked(k [2]string) {
	f := s.owner.failover[k]
	_, replica := s.owner.ring.owners(k[0], k[1])
	switch {
	case replica == s.self:
		if !f.selfCounted {
			f.selfCounted = true
			s.owner.failover[k] = f
		}
		return
	case f.selfCounted:
		f.selfCounted = false
		s.owner.failover[k] = f
		s.ownCountedLocked(k[0], k[1])
	}
	if len(f.withheld) == 0 {
		return
	}
	kept := f.withheld[:0]
	for _, w := range f.withheld {
		if w.from == replica {
			kept = append(kept, w)
			continue
		}
		s.applyAckLocked(k[0], k[1], w)
	}
	f.withheld = kept
	s.owner.failover[k] = f
}

// applyAckLocked applies a withheld acknowledgement w of (rule, key): to
// this node's own pending counter, and to its group of the key. Caller
// holds s.mu.
func (s *Syncer) applyAckLocked(rule, key string, w withheldAck) {
	s.ackLocked(ownerAnswer{rule: rule, key: key, window: w.window, ackEpoch: w.epoch, ackUsed: w.used})
	k := aggKey{rule, key, w.window}
	if g := s.owner.agg.groups[k]; g != nil && g.o == s.owner.mine[k] && g.epoch == w.epoch {
		g.acked = max(g.acked, w.used)
	}
}

// forgetWithheldLocked forgets the acknowledgements withheld by the
// failover of k when sender, whose answer acknowledged this node's
// counters, is the owner it failed over from. Caller holds s.mu.
func (s *Syncer) forgetWithheldLocked(k [2]string, sender string) {
	if f, ok := s.owner.failover[k]; ok && f.owner == sender && f.withheld != nil {
		f.withheld = nil
		s.owner.failover[k] = f
	}
}

// stillWithheldLocked returns what a failover of k from owner, ended and
// about to be replaced by a new one from the same owner, withheld: the
// new one keeps it. Caller holds s.mu.
func (s *Syncer) stillWithheldLocked(k [2]string, owner string) []withheldAck {
	if f, ok := s.owner.failover[k]; ok && f.owner == owner {
		return f.withheld
	}
	return nil
}
