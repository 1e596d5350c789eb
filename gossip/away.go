package gossip

// How long a member was away. A member cut off from this node (dead to it,
// or on the other side of a partition) goes on admitting on its own side,
// and its first reports after it is back carry what it admitted meanwhile:
// its allowance for a key it reports first then is the rate for that long
// beyond its burst (see allowance.take). Its absence is counted from the
// last counters heard from it, not from when this node declared it dead:
// declaring takes the probes and the suspicion timeout, longer on a loaded
// machine, and an honest member admits all the while (a partition healed
// under load clamped honest reports as above their allowance). It is
// counted no earlier than detectionTime before it was declared gone: a
// member that sent no counters for an hour and then died for a second was
// away a second and the time failure detection took, not an hour.

import (
	"math"
	"time"

	"github.com/hashicorp/memberlist"
)

// heardFromLocked notes that a counters packet from a member (its sender,
// checked by the transport's sender guard) just reached this node. A
// push-pull state is not noted: its origin is not checked, and another's
// state in a member's name must not shorten that member's absence. Names that are not members are not noted (there
// is no bound on them); at most maxOrigins are held, pruned with the clock
// offsets. Caller holds s.mu.
func (s *Syncer) heardFromLocked(name string) {
	if name == s.self || !s.memberLocked(name) {
		return
	}
	if _, ok := s.heardAt[name]; !ok && len(s.heardAt) >= maxOrigins {
		return
	}
	if s.heardAt == nil {
		s.heardAt = map[string]time.Time{}
	}
	s.heardAt[name] = s.clock()
}

// pruneHeardLocked forgets when names that are no longer members were last
// heard. Caller holds s.mu.
func (s *Syncer) pruneHeardLocked() {
	for name := range s.heardAt {
		if !s.memberLocked(name) {
			delete(s.heardAt, name)
		}
	}
}

// goneSinceLocked is when a member that went away (f) was last reachable
// as far as this node can tell: the last counters it heard from it, at
// most when it declared it gone and no earlier than detectionTime before
// that. Caller holds s.mu.
func (s *Syncer) goneSinceLocked(f failedMember) time.Time {
	earliest := f.since.Add(-s.detectionTime())
	switch {
	case f.heard.After(f.since):
		return f.since
	case f.heard.After(earliest):
		return f.heard
	}
	return earliest
}

// detectionTime is about the longest memberlist takes to declare a member
// dead after it last answered: two probe intervals (a probe round to reach
// it, and one of margin), the probe's timeout, and the longest suspicion
// timeout at the current membership.
func (s *Syncer) detectionTime() time.Duration {
	mlc := s.mlc
	if mlc == nil {
		mlc = memberlist.DefaultLANConfig()
	}
	n := float64(max(1, s.members.Load()))
	scale := math.Max(1, math.Log10(n))
	suspicion := time.Duration(float64(mlc.SuspicionMult) * scale * float64(mlc.ProbeInterval))
	return 2*mlc.ProbeInterval + mlc.ProbeTimeout + time.Duration(max(1, mlc.SuspicionMaxTimeoutMult))*suspicion
}

// awayLocked is how long origin was away from this node (dead to it, or cut
// off) before it last rejoined, if it rejoined within rejoinGrace, or how
// long it has been away if it is still listed as failed (its counters can
// arrive before this node sees it rejoin), counted from goneSinceLocked: on
// its own side it could have admitted the rate for that long, and its first
// reports after the partition heals carry it. 0 for an origin that was
// never away. Caller holds s.mu.
func (s *Syncer) awayLocked(origin string, now time.Duration) time.Duration {
	if r, ok := s.rejoined[origin]; ok && now-r.at < rejoinGrace {
		return r.away
	}
	if f, ok := s.failed[origin]; ok {
		return max(0, s.clock().Sub(s.goneSinceLocked(f)))
	}
	return 0
}
