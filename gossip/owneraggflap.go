package gossip

// An aggregator whose ring flaps it between aggregator and user (1,000
// members around 1,024 with churn: k, the key's aggregation points, moves
// as N crosses the square) hands its group on (aggHandOnLocked), hears the
// key through its new aggregator, and makes a group again when the ring
// names it once more. The owner goes on answering the handed group while it
// holds it active (every 20 ms): those answers charge nothing here (the new
// aggregator tells this node the same consumption: aggOwnAnswerLocked), but
// they advance the subscription they come on, the owner's aggregate's, and
// the re-made group's answers come on that same subscription (the same
// owner, the same gen). The re-made group's first answer then charged only
// above where the handed group's uncharged answers left it: what the
// others consumed between the new aggregator's last answer and the
// re-made group's first was charged nowhere (1,000 simulated nodes,
// 10%/min churn, seed 1: a node lost 22 then 47 tokens over two flaps; ~20
// nodes ended 41-63 tokens under what the others admitted:
// TestRegroupAfterAHandOnChargesWhatTheHandedGroupToldUncharged).
//
// So the node notes where that subscription stood when it last charged on
// it (aggUse.handedLast: its last after the hand-on's floor, raised by
// every answer on it that is not the handed group's), and the re-made
// group's first answer starts from there or from what its other
// aggregator told it, whichever is higher, lowering the subscription if
// the handed group's answers took it beyond: each token is charged once,
// by the other aggregator's answers or by the re-made group's. The same
// run after: min -63 -> +0 (max +14 -> +15); seeds 2-3, 300 nodes with the
// owner killed (seeds 1-10) and honest runs unchanged.

// aggHandedNoteLocked notes, at the hand-on of group g of k, the
// subscription its owner's answers came on and where it stands (after the
// hand-on's floor). Caller holds s.mu.
func (s *Syncer) aggHandedNoteLocked(k aggKey, u *aggUse, g *aggGroup) {
	u.handedGen, u.handedLast = g.upGen, 0
	if h := s.owner.heard[k]; h != nil {
		for _, sl := range h.slots {
			if sl.owner == g.upFrom && sl.gen == g.upGen {
				u.handedLast = sl.last
			}
		}
	}
}

// aggChargedOnLocked notes that a, an answer of sender that charged what it
// added (not a handed group's), took its subscription where it stands:
// if that is the subscription a handed group's answers came on, the
// re-made group starts from there at least. Caller holds s.mu, after
// heardLocked took the answer.
func (s *Syncer) aggChargedOnLocked(sender string, a ownerAnswer) {
	u := s.owner.agg.hot[[2]string{a.rule, a.key}]
	if u == nil || u.handed == 0 || u.handedFrom != sender || u.handedGen != a.gen || u.handedWindow != a.window {
		return
	}
	if h := s.owner.heard[aggKey{a.rule, a.key, a.window}]; h != nil {
		for _, sl := range h.slots {
			if sl.owner == sender && sl.gen == a.gen {
				u.handedLast = max(u.handedLast, sl.last)
			}
		}
	}
}

// aggRegroupFromLocked returns where the subscription (sender, gen) of k,
// standing at last, goes on from for the owner's first answer (others) to
// a group this node made again after handing one on: at most last, and at
// least where it last charged on it and what its other aggregator told it
// (any age: charged once already), at most others. Caller holds s.mu.
func (s *Syncer) aggRegroupFromLocked(k aggKey, sender string, gen, last, others uint64) uint64 {
	u := s.owner.agg.hot[[2]string{k.rule, k.key}]
	if u == nil || u.handed == 0 || u.handedFrom != sender || u.handedGen != gen || u.handedWindow != k.window {
		return last
	}
	from := u.handedLast
	if h := s.owner.heard[k]; h != nil && u.heardFrom != "" && u.heardFrom != sender && u.heardFrom != s.self {
		for _, sl := range h.slots {
			if sl.owner == u.heardFrom {
				from = max(from, min(sl.last, others))
			}
		}
	}
	return min(last, from)
}
