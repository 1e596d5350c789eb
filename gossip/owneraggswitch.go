package gossip

import "time"

// A user that switches aggregators (owneragg.go): its slot moved when the
// member count moved the key's aggregation points (k, the power of two at
// or above √N, changes as N crosses a square: 1,024 members at 1,000
// nodes, crashed members not yet declared dead included), or it failed
// over to the next slot's aggregator.

// aggSwitchLocked reports, for an answer about k that this node just took
// from its aggregator sender after answers of another (aggUse.cameFrom: the
// ring moved its slot, or a failover), the last others that other one told
// it, if that came after what sender last told it. Every aggregator tells
// its users the key in the owner's numbering (aggHeardLocked), so an
// answer from sender charges only what lies above it: a new aggregator's
// first answer tells the key's whole history to a user whose subscription
// it made before the owner first answered its group, and an old one's
// answer on the subscription a user comes back to tells it all the other
// one told it since (1,000 simulated nodes whose member count crossed
// 1,024, the aggregators' slots moving twice: 34 nodes charged the key's
// history, 1,212-1,270 tokens, then 442 charged 340-397 again). What is
// left: this node's own consumption through the other aggregator is in
// sender's numbering and not in what the other told it (charged once
// more, it admits that much less), and its own consumption through sender
// before it left is in what the other told it (not charged: it admits
// that much more). Caller holds s.mu.
func (s *Syncer) aggSwitchLocked(k aggKey, sender string) (uint64, bool) {
	u := s.owner.agg.hot[[2]string{k.rule, k.key}]
	if u == nil || u.cameFrom == "" {
		return 0, false
	}
	from := u.cameFrom
	u.cameFrom = ""
	h := s.owner.heard[k]
	if h == nil || from == s.self || from == sender {
		return 0, false // its own group's view: from the owner's answers (aggFirstLocked)
	}
	var last, since time.Duration = -1, -1
	var told uint64
	for _, sl := range h.slots {
		switch {
		case sl.owner == from && sl.at > last:
			last, told = sl.at, sl.last
		case sl.owner == sender:
			since = max(since, sl.at)
		}
	}
	return told, last > since
}

// aggOwnedHereLocked reports whether this node owns (rule, key) on its
// ring: a user whose key's owner died or left and who became its owner
// counts the key itself (the groups' counters, its own consumption), so it
// neither sends its counters through an aggregator nor takes an
// aggregator's answers, which would charge it everything a second time
// (100 simulated nodes under churn: a user that became the owner took its
// old aggregator's answers for 18 s and ended charged 1,951 tokens more
// than the others admitted). Caller holds s.mu, the ring refreshed.
func (s *Syncer) aggOwnedHereLocked(rule, key string) bool {
	owner, _ := s.owner.ring.owners(rule, key)
	return owner == s.self
}
