package gossip

import (
	"time"
)

// MemberStates counts the members in each state as this node sees them,
// this node included.
type MemberStates struct {
	// Alive counts the members memberlist believes alive, and Suspect
	// those it suspects of having failed. memberlist tells suspicion to no
	// event and no race-free call (Members returns pointers into node
	// states its failure detector rewrites without a lock the caller can
	// take): only its census gauge carries it, through go-metrics. With a
	// CensusSink (Config.Census), Suspect is that gauge's count as of the
	// last push-pull exchange, and Alive the members memberlist counts now
	// less those; without one, Suspect is 0 and a suspected member counts
	// as alive until it is declared dead.
	Alive   int `json:"alive"`
	Suspect int `json:"suspect"`
	// Dead and Left count the members declared dead, or that announced
	// their leave, within memberlist's GossipToTheDeadTime (30 s in its LAN
	// profile): as long as memberlist keeps them in its own list before it
	// reaps them.
	Dead int `json:"dead"`
	Left int `json:"left"`
	// At is when the census was taken: it is counted afresh at each call.
	At time.Time `json:"at"`
}

// MemberStates returns the census of member states, taken now from
// memberlist (the members it counts alive) and from its join and leave
// events (dead and left); false before Start and after Shutdown. Each
// syncer counts its own: nothing is shared between syncers in one process.
func (s *Syncer) MemberStates() (MemberStates, bool) {
	if s.list() == nil || s.stopped() {
		return MemberStates{}, false
	}
	now := s.clock()
	out := MemberStates{Alive: s.NumAlive(), At: now}
	if c := s.cfg.Census; c != nil {
		if n, ok := c.suspect(s.censusID); ok {
			out.Suspect = min(n, out.Alive)
			out.Alive -= out.Suspect
		}
	}
	s.mu.Lock()
	for _, f := range s.failed {
		if now.Sub(f.since) > s.mlc.GossipToTheDeadTime {
			continue // memberlist has forgotten it (or is about to)
		}
		if f.left {
			out.Left++
		} else {
			out.Dead++
		}
	}
	s.mu.Unlock()
	return out, true
}
