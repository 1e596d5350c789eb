package gossip

// The relay queue. In clusters above FanoutLimit, a counter that was news
// to this node is queued (queueLocked) and sent to GossipNodes random
// members for a few rounds. What a peer sends is not proof of what its
// origin said: a keyed rogue, or anyone on a plain cluster, can name a real
// origin, a real key and an epoch up to maxEpochAhead in the future. Two
// rules keep such forgeries from silencing real origins:
//   - Each (origin, rule, key, window, epoch) has its own entry (see
//     pendingKey): a newer epoch, real or forged, never replaces another
//     generation's entry, so the origin's real counters go on being relayed
//     (before, one forged newer epoch took the key's only entry, and the
//     real, older-epoch counters after it were not queued at all).
//   - Admission is shared by origin: one origin's relayed entries may take
//     at most relayOriginShare of MaxPending, and all origins this node
//     does not know as members (made-up names) together relayUnknownShare.
//     Forged entries under one name then crowd out only that name's relays,
//     not every origin's. What is not relayed is repaired by push-pull.

// Relay queue shares, as fractions of MaxPending.
const (
	relayOriginShare  = 8  // one origin: at most MaxPending/8 entries
	relayUnknownShare = 32 // origins not members, together: MaxPending/32
)

// relayShares counts relayed entries pending, by origin. An origin is
// classed as unknown (not a member) when its first entry is queued, and
// stays so while it has entries. Under the syncer's mu.
type relayShares struct {
	byOrigin map[string]relayCount
	unknown  int // entries of origins classed unknown
}

type relayCount struct {
	n       int
	unknown bool
}

// relayLocked queues a counter heard from a peer for relaying, within the
// origin's share. Caller holds s.mu.
func (s *Syncer) relayLocked(origin string, c Counter, transmits int) {
	k := pendingKey{counterKey{origin, c.Rule, c.Key}, c.Window, c.Epoch}
	if _, ok := s.pending[k]; ok {
		s.queueLocked(origin, c, transmits) // coalesces: no new entry
		return
	}
	r := &s.relay
	rc, ok := r.byOrigin[origin]
	if !ok {
		rc.unknown = !s.knownOriginLocked(origin)
	}
	limit := max(1, s.cfg.MaxPending/relayOriginShare)
	if rc.n >= limit || rc.unknown && r.unknown >= max(1, s.cfg.MaxPending/relayUnknownShare) {
		s.stats.RelaysDropped.Add(1)
		return
	}
	before := len(s.pending)
	s.queueLocked(origin, c, transmits)
	if len(s.pending) == before {
		s.stats.RelaysDropped.Add(1) // at MaxPending
		return
	}
	if r.byOrigin == nil {
		r.byOrigin = map[string]relayCount{}
	}
	rc.n++
	r.byOrigin[origin] = rc
	if rc.unknown {
		r.unknown++
	}
}

// knownOriginLocked reports whether origin is a member, live or gone away.
// Caller holds s.mu.
func (s *Syncer) knownOriginLocked(origin string) bool {
	if _, ok := s.peers[origin]; ok {
		return true
	}
	_, ok := s.failed[origin]
	return ok
}

// dropPendingLocked removes a pending entry (sent often enough, or reset),
// giving back its origin's share. Caller holds s.mu.
func (s *Syncer) dropPendingLocked(k pendingKey) {
	if _, ok := s.pending[k]; !ok {
		return
	}
	delete(s.pending, k)
	r := &s.relay
	rc, ok := r.byOrigin[k.origin]
	if !ok || k.origin == s.self {
		return
	}
	if rc.unknown {
		r.unknown--
	}
	if rc.n--; rc.n <= 0 {
		delete(r.byOrigin, k.origin)
		return
	}
	r.byOrigin[k.origin] = rc
}
