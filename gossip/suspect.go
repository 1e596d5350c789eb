package gossip

import (
	"maps"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// OriginUnknown is the origin under which Suspicious counts reports naming an
// origin that is not a member this node knows: the names a peer may make up
// are unbounded, the members are not.
const OriginUnknown = "(not a member)"

// logEvery is how often each rate-limited warning may be logged; the
// occurrences in between are counted and reported with the next one.
const logEvery = 10 * time.Second

// logLimiter logs a warning at most once per logEvery. It is safe for
// concurrent use.
type logLimiter struct {
	mu         sync.Mutex
	next       time.Time
	suppressed int
}

// warn logs msg with args unless a warning went out less than logEvery ago,
// in which case it only counts it.
func (l *logLimiter) warn(log hclog.Logger, now time.Time, msg string, args ...any) {
	l.mu.Lock()
	if now.Before(l.next) {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	n := l.suppressed
	l.next, l.suppressed = now.Add(logEvery), 0
	l.mu.Unlock()
	log.Warn(msg, append(args, "suppressed_since_last", n)...)
}

// suspectLocked counts a report from origin that claims more than an origin
// could (what it claimed, what was allowed), and logs it, rate-limited.
// Caller holds s.mu.
func (s *Syncer) suspectLocked(origin string, c Counter, why string, claimed, allowed uint64) {
	s.stats.SuspiciousReports.Add(1)
	label := origin
	if _, ok := s.peers[origin]; !ok {
		if _, ok := s.failed[origin]; !ok {
			label = OriginUnknown
		}
	}
	if s.suspicious == nil {
		s.suspicious = map[string]uint64{}
	}
	if _, ok := s.suspicious[label]; ok || len(s.suspicious) < maxOrigins {
		s.suspicious[label] = satAdd(s.suspicious[label], 1)
	}
	if s.suspiciousWhy == nil {
		s.suspiciousWhy = map[string]uint64{}
	}
	s.suspiciousWhy[why] = satAdd(s.suspiciousWhy[why], 1)
	s.suspectLog.warn(s.log, s.clock(), "clamped a suspicious gossip report", "origin", origin, "rule", c.Rule,
		"key_bytes", len(c.Key), "epoch", c.Epoch, "why", why, "claimed", claimed, "allowed", allowed)
}

// Suspicious returns, by origin, how many reports this node clamped or
// refused because they claimed more than the origin could have admitted or
// an implausible epoch. Origins that are not members are counted together
// under OriginUnknown, so the map holds at most the cluster's size plus one.
func (s *Syncer) Suspicious() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.suspicious)
}

// SuspiciousChecks returns how many reports this node clamped or refused, by
// the check that did (the reason its warning logs): which check cuts, in a
// cluster whose members are all honest, names a bound too tight.
func (s *Syncer) SuspiciousChecks() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.suspiciousWhy)
}
