package gossip

import "time"

// A clean stop in owner mode loses nothing.
//
// Two things could be lost when a node leaves (Syncer.Leave) in owner
// mode, both on a loaded machine, where the syncer's rounds lag behind
// memberlist's own goroutines:
//   - A contributor's last counters: sent once by the daemon's flush, then
//     repeated every round, but an owner that has taken the contributor's
//     departure (memberlist's leave message) refuses them, from a node that
//     is no longer a member. What the owner had counted before stays; the
//     rest was lost for good (the survivors never heard of it).
//   - An owner's last answers: the owner acknowledged a counter (so its
//     contributor stops sending it) but had not yet told the others, or
//     told them in packets they take only from the key's owner or replica
//     on their own ring: once a survivor has taken the owner's departure
//     its answers are refused. The key's next owner never sees that
//     consumption (it learns from counters not yet acknowledged), so the
//     survivors never showed it.
//
// So, before a node says it is leaving, it settles: it waits, bounded by
// part of Leave's timeout, until its own counters have all been
// acknowledged by their owners, and every aggregate it owns has answered
// its contributors with the latest total and (for contributors that send
// heard messages, ownerrepeat.go) heard them confirm it. Until it says it
// is leaving it is a full member and the owner of its keys, so what it
// sends is taken. Once settled, and until it is gone, it counts (and
// acknowledges) no more counters sent to it as an owner: their senders keep
// them and send them to the key's next owner (or, after ownerFailover
// unanswered rounds, to the replica), which counts them; what it counted
// before it has told. Nothing changes on the wire: a node of an earlier version
// simply leaves at once, as before.

// leaveSettleShare is the part of Leave's timeout spent settling at most;
// the rest is memberlist's (advertising the departure, then leaving).
const leaveSettleShare = 2

// settleBeforeLeave waits until this node has nothing unsettled in owner
// mode (see above), for at most max, polling every gossip interval (the
// rounds go on meanwhile). It returns whether it settled.
func (s *Syncer) settleBeforeLeave(max time.Duration) bool {
	if !s.ownerMode() {
		return true
	}
	deadline := time.Now().Add(max)
	tick := time.NewTicker(s.cfg.GossipInterval)
	defer tick.Stop()
	for {
		s.mu.Lock()
		settled := s.ownerSettledLocked()
		s.mu.Unlock()
		if settled {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		select {
		case <-s.stop:
			return false
		case <-tick.C:
		}
	}
}

// ownerSettledLocked reports whether every counter of this node's own has
// been acknowledged by its key's owner, and every aggregate this node owns
// has told each contributor that is still a member the latest total (and
// heard it confirmed, from a contributor that confirms). Caller holds s.mu.
func (s *Syncer) ownerSettledLocked() bool {
	for k := range s.pending {
		if k.origin == s.self {
			return false
		}
	}
	for _, o := range s.owner.mine {
		if o.dirty {
			return false
		}
		for name, sub := range o.subs {
			if name == s.self {
				continue
			}
			if _, ok := s.peers[name]; !ok {
				continue // gone: it hears nothing more of this node anyway
			}
			if sub.needAck || sub.sent != o.total-sub.contrib {
				return false
			}
			if sub.heardAcks && sub.told < sub.sent {
				return false
			}
		}
	}
	return true
}
