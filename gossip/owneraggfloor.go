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
// new aggregator since (heardSlot.base, in no numbering).
// TestHandedOnAfterFailoverIsChargedOnce.
//
// The group's own consumption since that owner first answered it is in
// that owner's aggregate too, not in what it told the group: the floor
// left it charged here once more (the same run: +96; +79 with the replica
// killed too). That owner's answers to the group acknowledge the group's
// sum it counted (ackUsed): the floor also holds what they acknowledged
// between its first answer and its last (aggGroup.altFirst, altLast), a
// part of what it counted, so nothing the others consumed is left
// uncharged. The same runs after: +16 and +18, the node's drift before the
// kill (+11 at 8 s); the simulator's test shape +78 / +76 -> +13 / +14
// (TestHandedOnAfterFailoverIsNotChargedItsGroupsOwn,
// TestOwnerAndReplicaKilledAdmitAsOwnerKilled).

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

// noteAlt notes, at an answer of sender to group g, the group's sum it
// acknowledged counting (ackUsed), if sender is not the owner whose
// numbering the group took.
func (g *aggGroup) noteAlt(sender string, ackUsed uint64) {
	if !g.upSet || sender == g.upFrom {
		return
	}
	if sender != g.altFrom {
		g.altFrom, g.altFirst, g.altLast = sender, ackUsed, ackUsed
	}
	g.altLast = max(g.altLast, ackUsed)
}

// altCounted is the group's own consumption that alt counted in its
// aggregate since its first answer to g: in what alt's answers to this
// node's own counter tell, not in what it told the group (0 when alt is
// not the other owner that answered g last).
func (g *aggGroup) altCounted(alt string) uint64 {
	if alt == "" || alt != g.altFrom {
		return 0
	}
	return g.altLast - min(g.altLast, g.altFirst)
}
