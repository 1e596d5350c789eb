package gossip

import "time"

// The replica of an aggregated key charges a failover once.
//
// A key's aggregators (owneragg.go) fail over to its replica when the
// owner stops answering their group counters (ownerfailover.go): the
// replica counts the groups in its aggregate and is charged what they add
// (receiveAggGroup), as an owner is. The replica also uses the key, as any
// member does, through its own aggregator, whose group fails over to the
// replica too: that aggregator's view of the others then comes from the
// replica's answers, and it tells the replica what the replica itself
// counted and was charged already; and that aggregator's group counter
// carries the replica's own consumption and what the aggregator told it of
// its group. The replica was charged the failover twice until memberlist
// declared the owner dead and the ring made it the owner (300 simulated
// nodes, the owner killed at 5 s: the replica ended 550 tokens over what
// the others admitted, and, owner then, told every node its balance: the
// cluster admitted 75.7% of the limit; 12 bare syncers with the owner dead
// for 200 rounds: 4,199 charged for the others' 2,000,
// TestReplicaOfAnAggregatedKeyIsChargedOnce).
//
// So, while a replica hears a key through an aggregator (it took an answer
// from it within an active TTL):
//   - its aggregator's group counters charge it nothing: they hold its own
//     consumption and its group's, which the aggregator's answers tell it
//     (as they do at any time);
//   - the rest it counts (other groups, failed-over users) pairs with that
//     aggregator's answers, as a node that failed a key over pairs its
//     owner's and replica's answers (ownerchargeonce.go): from its first
//     charge for what it counted, it is charged the larger of what it
//     counted and what the aggregator's answers carry, not their sum, for
//     as long as the aggregator's group is counted here (its answers echo
//     this node's counting then). An aggregator whose group is not counted
//     here (it still reaches the owner, or the replica is an earlier owner
//     after a membership change and the aggregator is on the new ring)
//     tells another account: its answers are charged whole.
//
// A pair never charges less than what this node counted (a lying
// aggregator gains nothing by telling less; a lying group counter moves
// what it counts, bounded as always, groupCountLocked); what its own
// aggregator's group consumed reaches it through that aggregator's
// answers alone, as it does outside a failover (a lying aggregator makes
// its users admit more, by its group's consumption, whatever happens). The
// pair ends once this node has counted nothing of the key for an active
// TTL, or the ring makes it the owner (it then takes no aggregator's
// answers, aggOwnedHereLocked), or it stops hearing that aggregator.

// echoPairs holds, per key this node replicates and hears through an
// aggregator, what it counted and what the aggregator's answers told
// since it started counting; at most MaxSeen.
type echoPairs map[aggKey]*echoPair

// echoPair is a key's account on a replica that hears it through an
// aggregator: counted is what its aggregate counted (and would charge)
// since it started counting, told what the aggregator's answers added
// while its group was counted here, charged what it charged of both.
type echoPair struct {
	counted, told, charged uint64
	last                   time.Duration // its last counting, since born
}

// due returns what lifts the larger of counted and told above what the
// pair charged, and notes it charged.
func (p *echoPair) due() uint64 {
	due := max(p.told, p.counted) - min(max(p.told, p.counted), p.charged)
	p.charged += due
	return due
}

// aggEchoLocked returns the aggregator this node hears key k through
// while it replicates k ("" if it does not, or owns k, or its aggregator
// told it nothing for an active TTL): its counting of k pairs with that
// aggregator's answers. Caller holds s.mu.
func (s *Syncer) aggEchoLocked(k aggKey, now time.Duration) string {
	owner, replica := s.owner.ring.owners(k.rule, k.key)
	if owner == s.self || replica != s.self && !s.thirdHereLocked(k) { // the third counts as the replica does (ownerchain.go)
		return ""
	}
	u := s.owner.agg.hot[[2]string{k.rule, k.key}]
	if u == nil || u.heardFrom == "" || u.heardFrom == s.self {
		return ""
	}
	if h := s.owner.heard[k]; h != nil {
		for _, sl := range h.slots {
			if sl.owner == u.heardFrom && now-sl.at <= s.activeTTL() {
				return u.heardFrom
			}
		}
	}
	return ""
}

// echoingLocked reports whether aggregator agg's group of k was counted
// in this node's aggregate within an active TTL: its view comes from this
// node's answers. Caller holds s.mu.
func (s *Syncer) echoingLocked(k aggKey, agg string, now time.Duration) bool {
	o := s.owner.mine[k]
	if o == nil {
		return false
	}
	sub := o.subs[aggGroupPrefix+agg]
	return sub != nil && sub.agg != nil && sub.agg.group && now-sub.agg.heard <= s.activeTTL()
}

// countedChargeLocked returns what of tokens, counted into this node's
// aggregate of k from origin (an aggregator's group counter, or a
// failed-over user's counter), it charges: all of it, but while it
// replicates k and hears k through an aggregator, nothing of that
// aggregator's own group (its answers tell this node that group's
// consumption, and the rest is this node's own) and of the others only
// what lifts the larger of its counting and the aggregator's answers
// since it started counting. Caller holds s.mu.
func (s *Syncer) countedChargeLocked(k aggKey, origin string, tokens uint64, now time.Duration) uint64 {
	if tokens == 0 {
		return 0
	}
	agg := s.aggEchoLocked(k, now)
	switch {
	case agg == "":
		delete(s.owner.pairs.echo, k)
		return tokens
	case origin == agg:
		return 0
	}
	p := s.owner.pairs.echo[k]
	if p != nil && now-p.last > s.activeTTL() {
		p = nil // counted nothing for a while: a new account
	}
	if p == nil {
		if len(s.owner.pairs.echo) >= s.cfg.MaxSeen {
			sweepIdle(s.owner.pairs.echo, now, s.activeTTL(), func(p *echoPair) time.Duration { return p.last })
			if len(s.owner.pairs.echo) >= s.cfg.MaxSeen {
				return tokens
			}
		}
		if s.owner.pairs.echo == nil {
			s.owner.pairs.echo = echoPairs{}
		}
		p = &echoPair{}
		s.owner.pairs.echo[k] = p
	}
	p.counted += tokens
	p.last = now
	return p.due()
}

// echoChargeLocked returns what of tokens, charged by an answer of k from
// aggregator sender, this node charges: all of it, but while sender's
// group is counted here and this node counts k (countedChargeLocked), only
// what lifts the larger of the two. Caller holds s.mu.
func (s *Syncer) echoChargeLocked(k aggKey, sender string, tokens uint64, now time.Duration) uint64 {
	p := s.owner.pairs.echo[k]
	if p == nil || tokens == 0 {
		return tokens
	}
	if now-p.last > s.activeTTL() || s.aggEchoLocked(k, now) != sender {
		delete(s.owner.pairs.echo, k)
		return tokens
	}
	if !s.echoingLocked(k, sender, now) {
		return tokens // another account: the owner's, through the aggregator
	}
	p.told += tokens
	return p.due()
}
