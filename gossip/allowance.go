package gossip

import (
	"math"
	"time"
)

// BoundedLedger is a Ledger that can say how much one origin could really
// admit of a key, so that a peer's report is charged no further than that.
// The syncer calls Allowance from its goroutines, concurrently with the
// Ledger's other methods; it must be quick and must not block.
//
// A syncer whose ledger is not a BoundedLedger charges what peers report,
// up to what the ledger itself accepts (tests use that).
type BoundedLedger interface {
	Ledger
	// Allowance returns what one origin could admit of key under the limit
	// named rule, and false when this node does not know the rule or the key
	// is one it would not accept from a client (too long): the syncer then
	// neither charges nor remembers the counter.
	Allowance(rule, key string) (Allowance, bool)
	// Balance returns key's balance here under the limit named rule (its
	// burst for a key without a bucket), and this daemon's own counter for
	// it (zero if it has none): a peer's lower balance, less what it has
	// not heard of this daemon's own consumption, may take it no further
	// down than the counters the peer lists could have admitted (see
	// Syncer.adoptBound).
	Balance(rule, key string) (float64, Counter)
}

// Allowance is what one origin could admit of a key: Burst tokens at once
// and PerSecond after that.
type Allowance struct {
	// Burst is the most one origin can admit at once: the limit's burst plus
	// its soft margin; for window algorithms twice the count (a window's
	// whole count at its end and the next's at its start).
	Burst float64
	// PerSecond is the limit's rate.
	PerSecond float64
	// Soft is how far below zero the limit admits (its soft margin), in
	// tokens. Informational: Burst already holds it.
	Soft float64
}

// allowanceSlack is how much of an origin's rate, in time, the allowance
// may hold beyond its burst after a report: it absorbs packets that arrive
// closer together on this node's clock than they were sent (delay that
// varies from packet to packet) where they are not bounded on the origin's
// clock (see originTimeLocked), so that an honest origin is never clamped.
// It caps what an origin saved while reporting below its rate; it grants
// nothing.
const allowanceSlack = 2 * time.Second

// firstSlack is how much of an origin's rate, in time, its allowance for a
// key starts with beyond its burst (and is filled with again by a restart):
// an origin's own counters are bounded on its clock, so this only absorbs
// packets reordered on the way, or delayed less than the origin's first
// packet to this node was. It is the most a forger gains over an honest
// origin's burst and rate.
const firstSlack = time.Second

// maxEpochAhead is how far above this node's clock (in Unix nanoseconds) a
// counter's epoch may be. Epochs start at a daemon's start time and grow by
// one per bucket created (and jump to a reset's instant): an epoch an hour
// ahead is either a clock an hour off or a forgery. Counters above it are
// refused.
const maxEpochAhead = uint64(time.Hour)

// allowance is the receiver's account of what one origin may still be
// charged for one key: a token bucket that starts with Burst + rate ×
// firstSlack, fills at the limit's rate on the origin's timeline (its
// stamps placed on this node's clock, see originTimeLocked; this node's
// clock for what is not stamped by its origin), without a cap while the
// origin is silent (a report that follows lost ones may carry all their
// consumption), and is capped at Burst + rate × allowanceSlack after each
// report. Its time only moves forward and never ahead of this node's
// clock, so an origin is charged at most Burst + rate × firstSlack plus
// the rate times the time since it was first heard: what a node could
// really have admitted.
//
// A restarted origin has a full bucket again: a counter of a newer epoch
// fills the allowance again, at most once per refillSpacing, so a forger
// walking epochs up gains one burst per key per refillSpacing, and an
// origin that restarts more often than that is charged less than it
// admitted (the cluster admits more, never less).
type allowance struct {
	credit   float64
	heard    time.Duration // since the syncer's epoch; 0: never heard
	filled   time.Duration // when it was last filled
	newEpoch bool          // a counter of a newer epoch arrived since the last take
}

// rejoinGrace is how long after a member rejoins its first reports of a
// key may carry what it admitted while it was away.
const rejoinGrace = 30 * time.Second

// refillSpacing is the least time between two fills of an allowance by
// counters of newer epochs (restarts).
const refillSpacing = 10 * time.Second

// take charges up to tokens against the allowance at now (> 0; earlier than
// the last take for a packet reordered on the way) under a,
// returning what may be charged. away is how long the origin was away
// from this node (dead or cut off) before it last rejoined, if it rejoined
// within rejoinGrace: on its own side it could have admitted the rate for
// that long, and its first reports after the partition heals carry it.
func (al *allowance) take(a Allowance, tokens uint64, now, away time.Duration) uint64 {
	full := a.Burst + a.PerSecond*firstSlack.Seconds() + 1
	capacity := a.Burst + a.PerSecond*allowanceSlack.Seconds() + 1
	switch {
	case al.heard == 0:
		al.credit, al.filled = full+a.PerSecond*away.Seconds(), now
	case al.newEpoch && now-al.filled >= refillSpacing:
		al.credit, al.filled = max(al.credit+a.PerSecond*max(0, now-al.heard).Seconds(), full), now
	case now > al.heard:
		al.credit += a.PerSecond * (now - al.heard).Seconds()
	}
	al.heard, al.newEpoch = max(al.heard, now), false
	give := tokens
	if float64(tokens) > al.credit {
		give = uint64(max(0, math.Floor(al.credit)))
	}
	al.credit = min(al.credit-float64(give), capacity)
	return give
}

// satAdd adds without wrapping: at the top it stays at math.MaxUint64.
func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// strangerAllowance is the allowance that all origins that are not members
// share for one key, and whether a counter drew on it since the last prune.
type strangerAllowance struct {
	allow   allowance
	touched bool
}

// takeLocked charges up to tokens of origin's counter c against the
// origin's allowance for c's key, held in sr, at now (see allowance.take),
// and returns what may be charged, and whether what was not is short only
// because of the allowance non-members share (deferred, below). A name
// that is not a member this node knows (alive or gone) is charged against
// its own allowance and also against the one that every such name shares
// for the key: the names a peer may make up are unbounded, so each must
// not bring a key a new allowance (a packet naming a hundred made-up
// origins cost a key a hundred allowances), and a member's counters heard
// before it joined have spent its own allowance all the same. A member's
// first counters can arrive before this node has seen it join (a node
// restarted under its old name is still a member to its peers, which send
// it their counters at once); they share that allowance until it has.
//
// deferred reports that the origin's own allowance would have paid all of
// tokens and only the shared one fell short: an honest member not yet seen
// to join, as likely as a made-up name. The caller leaves that part
// unheard (seenRange.unhear), to be charged from the member's own
// allowance when it is one (a resend, a push-pull), and does not count it
// as suspicious. Caller holds s.mu.
func (s *Syncer) takeLocked(sr *seenRange, a Allowance, origin string, c Counter, tokens uint64, now time.Duration) (give uint64, deferred bool) {
	away := s.awayLocked(origin, now)
	if s.memberLocked(origin) {
		return sr.allow.take(a, tokens, now, away), false
	}
	k := [2]string{c.Rule, c.Key}
	st := s.strangers[k]
	if st == nil {
		if s.strangers == nil {
			s.strangers = map[[2]string]*strangerAllowance{}
		}
		if len(s.strangers) >= max(1, s.cfg.MaxSeen) {
			for victim := range s.strangers { // map iteration starts at a random entry
				delete(s.strangers, victim)
				break
			}
		}
		st = &strangerAllowance{}
		s.strangers[k] = st
	}
	st.touched = true
	shared := st.allow.take(a, tokens, now, away)
	give = sr.allow.take(a, shared, now, away)
	return give, give == shared && give < tokens && sr.allow.credit >= float64(tokens-give)
}

// pruneStrangersLocked forgets the shared allowances no counter drew on
// since the previous prune. Caller holds s.mu.
func (s *Syncer) pruneStrangersLocked() {
	for k, st := range s.strangers {
		if !st.touched {
			delete(s.strangers, k)
		} else {
			st.touched = false
		}
	}
}

// limitOf returns what one origin could admit of key under the limit named
// rule and key's balance here, when the ledger bounds (BoundedLedger) and
// knows the rule and the key; ok is false otherwise.
func (s *Syncer) limitOf(rule, key string) (a Allowance, balance float64, ok bool) {
	bounded, ok := s.ledger.(BoundedLedger)
	if !ok {
		return Allowance{}, 0, false
	}
	if a, ok = bounded.Allowance(rule, key); !ok {
		return Allowance{}, 0, false
	}
	balance, _ = bounded.Balance(rule, key)
	return a, balance, true
}
