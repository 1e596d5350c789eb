package gossip

// A member that hands its group on (aggHandOnLocked, owneraggswitch.go)
// after its key failed over: the group counts in the numbering of the
// owner whose first answer it took (aggGroup.upFrom), and the replica that
// counts the key during the failover numbers from the failover, hundreds
// of tokens below. When the ring then drops the dead owner, the replica
// becomes the owner and answers this node's own counter in its numbering;
// the floor of the hand-on (aggHandedFloorLocked) held only for the owner
// of the group's numbering, so that answer charged the whole failover
// again: the key's fourth member, an aggregator that the owner's
// declaration made the key's third (none of its aggregators,
// ownerchainagg.go), was charged 1,092 tokens at once and ended 1,108
// over what the others admitted (100 simulated nodes, the owner killed at
// 8 s, seed 2 of the third-aggregates key).
//
// So the hand-on also notes the other owner that answered the group last
// and the last others it told the group (every token of it charged here
// through the group), and that owner's answers to this node's own counter
// charge only what lies above it plus what this node charged through its
// new aggregator since (heardSlot.base, in no numbering). What it leaves:
// the group's own consumption since that owner first answered it is in
// that owner's aggregate, not in what it told the group, and is charged
// once more (it admits that much less, never more).
// TestHandedOnAfterFailoverIsChargedOnce.

// handedAltOf returns the owner other than from (the group's numbering)
// whose answer to the group h holds last, and the others it told. own
// slots (answers to this node's own counter) are not the group's.
func handedAltOf(h *heardKey, from string) (string, uint64) {
	var alt *heardSlot
	for i := range h.slots {
		sl := &h.slots[i]
		if sl.owner != "" && sl.owner != from && !sl.own && (alt == nil || sl.at > alt.at) {
			alt = sl
		}
	}
	if alt == nil {
		return "", 0
	}
	return alt.owner, alt.last
}

// aggHandedAltFloorLocked is where an answer of u.handedAlt to this node's
// own counter starts: the others it told the group this node handed on,
// and what this node charged through its aggregator since it switched
// there. Caller holds s.mu.
func (s *Syncer) aggHandedAltFloorLocked(k aggKey, u *aggUse) uint64 {
	var via uint64
	if h := s.owner.heard[k]; h != nil && u.heardFrom != "" && u.heardFrom != s.self && u.heardFrom != u.handedAlt {
		for _, sl := range h.slots {
			if sl.owner == u.heardFrom && !sl.own && s.sinceBorn()-sl.at <= s.activeTTL() {
				via = max(via, sl.last-min(sl.last, sl.base))
			}
		}
	}
	return u.handedAltUpTo + via
}
