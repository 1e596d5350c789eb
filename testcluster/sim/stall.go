package sim

// A stalled node (Config.Stall): a daemon starved of CPU for a second or
// two on a loaded machine (seen in sluiced's process tests: a 1.8 s
// stall at the start of a loaded run, after which two of ten nodes
// admitted nothing for 4 s). While it stalls, everything that would run on
// it (a gossip round, a request, a packet or push-pull state that reached
// it) waits until the stall ends, in order; a periodic event (a round, the
// next request) resumes its period from there, as a ticker that dropped
// the ticks it missed.

// stalled reports whether e would run on a node stalled now.
func (s *Sim) stalled(e event) bool {
	w := s.cfg.Stall
	if w.To <= w.From || s.now < int64(w.From) || s.now >= int64(w.To) || int(e.node) >= w.Split {
		return false
	}
	switch e.kind {
	case evPacket, evState, evRequest, evRound, evPushPull, evPrune:
		return true
	}
	return false
}
