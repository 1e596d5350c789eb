package gossip

import (
	"cmp"
	"time"
)

// seenRange is what this node has charged of one origin's counter for one
// key: the part [lo, hi] of the counter in its newest generation heard
// (cur) and in one other (old), and the origin's allowance for the key.
// touched says a counter for it arrived since the last prune.
//
// Two generations are kept so that a counter of a newer generation, real
// or forged, never hides the origin's counters of the generation it is
// really in: those go on being charged exactly once in the other slot.
type seenRange struct {
	cur, old genRange
	hasOld   bool
	allow    allowance
	touched  bool
	asked    bool // a repair was asked for the range below cur (see askRepairLocked)
}

// genRange is the part [lo, hi] of an origin's counter already charged here,
// in the counter's generation (epoch, window).
type genRange struct {
	epoch, window uint64
	lo, hi        uint64
}

// compareGen orders two counters of one origin's key by generation: the
// epoch first, then the window (always 0 for bucket algorithms). It returns
// -1, 0 or +1 as a is older than, the same as, or newer than b. A newer
// generation starts the count over.
func compareGen(aEpoch, aWindow, bEpoch, bWindow uint64) int {
	if c := cmp.Compare(aEpoch, bEpoch); c != 0 {
		return c
	}
	return cmp.Compare(aWindow, bWindow)
}

// gen returns the slot holding c's generation, or nil.
func (sr *seenRange) gen(c Counter) *genRange {
	switch {
	case sr.cur.epoch == c.Epoch && sr.cur.window == c.Window:
		return &sr.cur
	case sr.hasOld && sr.old.epoch == c.Epoch && sr.old.window == c.Window:
		return &sr.old
	}
	return nil
}

// place starts a slot for a generation not held: a newer one than cur
// becomes cur (cur becomes old), any other replaces old.
func (sr *seenRange) place(g genRange) {
	if compareGen(g.epoch, g.window, sr.cur.epoch, sr.cur.window) > 0 {
		sr.allow.newEpoch = sr.allow.newEpoch || g.epoch > sr.cur.epoch
		sr.old, sr.cur = sr.cur, g
		sr.asked = false
	} else {
		sr.old = g
	}
	sr.hasOld = true
}

// heard is what a counter added to the range charged of it: the tokens
// above the range as it was, and those below it.
type heard struct{ above, below uint64 }

// tokens is what the counter brought that was not yet charged here.
func (h heard) tokens() uint64 { return h.above + h.below }

// applyLocked records an origin's counter and returns the tokens not yet
// charged here, whether it told this node anything new, and the origin's
// entry for the key (see hearLocked). Caller holds s.mu.
func (s *Syncer) applyLocked(origin string, c Counter) (charge uint64, news bool, sr *seenRange) {
	h, news, sr := s.hearLocked(origin, c)
	return h.tokens(), news, sr
}

// hearLocked records an origin's counter and returns what it added to the
// range held of it (the tokens not yet charged here), whether it told this
// node anything new, and the origin's entry for the key. What is then not
// charged of it (clamped by the origin's allowance) is taken back out with
// unhear. Caller holds s.mu.
//
// A counter of a generation not held (see compareGen) starts a range and
// charges what its packet names, Used−Prev, as a first sighting does,
// whether it is newer or older than the generations held: a late counter
// of an earlier window or bucket is real consumption (the ledger drops
// what belongs to a window that no longer matters), and a forged newer
// one cannot make this node ignore the origin's real counters.
func (s *Syncer) hearLocked(origin string, c Counter) (h heard, news bool, sr *seenRange) {
	k := counterKey{origin, c.Rule, c.Key}
	sr = s.seen[k]
	if sr == nil {
		sr = s.rememberLocked(k, seenRange{cur: genRange{epoch: c.Epoch, window: c.Window, lo: c.Prev, hi: c.Used}})
		return heard{above: c.Used - c.Prev}, true, sr
	}
	sr.touched = true
	g := sr.gen(c)
	if g == nil {
		sr.place(genRange{epoch: c.Epoch, window: c.Window, lo: c.Prev, hi: c.Used})
		return heard{above: c.Used - c.Prev}, true, sr
	}
	if c.Used > g.hi {
		h.above = c.Used - g.hi // everything above hi is new, gaps included
		g.hi, news = c.Used, true
	}
	if c.Prev < g.lo {
		h.below = min(c.Used, g.lo) - c.Prev
		g.lo, news = c.Prev, true
	}
	return h, news, sr
}

// unhear takes the part of what c added to its range (h) that was not
// charged, clamped tokens, back out of the range, from its top: that part
// stays unheard, so a later report of the counter (a resend, the next
// packet) or a push-pull's balance (explainLocked) may still charge it
// once its origin's allowance pays. Recording it as heard left a node that
// heard its peers' counters before it saw them join (clamped against the
// allowance non-members share) undercharged for good. What is charged of
// a counter stays at most what it counts, once.
func (sr *seenRange) unhear(c Counter, h heard, clamped uint64) {
	g := sr.gen(c)
	if g == nil || clamped == 0 {
		return
	}
	top := min(clamped, h.above)
	g.hi -= top
	g.lo += min(clamped-top, h.below)
}

// rememberLocked adds a seen range, evicting a random one at the cap, and
// returns it. Caller holds s.mu.
func (s *Syncer) rememberLocked(k counterKey, r seenRange) *seenRange {
	if len(s.seen) >= s.cfg.MaxSeen {
		for victim := range s.seen { // map iteration starts at a random entry
			delete(s.seen, victim)
			break
		}
	}
	r.touched = true
	s.seen[k] = &r
	return &r
}

// pruneSeen forgets the counters no packet has mentioned since the previous
// prune, so the table holds the keys in use rather than every key ever seen
// (up to MaxSeen). Forgetting is safe: a counter heard again after it is
// forgotten is a first sighting midway, which charges only the increment its
// packet names; and a packet old enough to have been forgotten is refused
// by its stamp (see stamp.go), so a replay cannot charge it again.
func (s *Syncer) pruneSeen() {
	s.mu.Lock()
	s.pruneResetsLocked(s.clock())
	pruned := 0
	for k, sr := range s.seen {
		if !sr.touched {
			delete(s.seen, k)
			pruned++
		} else {
			sr.touched = false
		}
	}
	s.pruneStrangersLocked()
	s.pruneOffsetsLocked()
	s.pruneHeardLocked()
	now := s.sinceBorn()
	for name, r := range s.rejoined {
		if now-r.at >= rejoinGrace {
			delete(s.rejoined, name)
		}
	}
	s.mu.Unlock()
	s.stats.SeenPruned.Add(uint64(pruned))
}

// baselineLocked records that an origin's counter up to c.Used is already
// accounted for here, charging nothing. Caller holds s.mu.
func (s *Syncer) baselineLocked(origin string, c Counter) {
	k := counterKey{origin, c.Rule, c.Key}
	sr := s.seen[k]
	if sr == nil {
		s.rememberLocked(k, seenRange{cur: genRange{epoch: c.Epoch, window: c.Window, lo: 0, hi: c.Used}})
		return
	}
	sr.touched = true
	switch compareGen(c.Epoch, c.Window, sr.cur.epoch, sr.cur.window) {
	case 1:
		sr.place(genRange{epoch: c.Epoch, window: c.Window, lo: 0, hi: c.Used})
	case 0:
		sr.cur.lo, sr.cur.hi = 0, max(sr.cur.hi, c.Used) // everything up to Used is in the adopted balance
	}
}

// clock is this node's time: the wall clock, or a test's.
func (s *Syncer) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// sinceBorn is the time since the syncer was made, on its clock, never 0.
func (s *Syncer) sinceBorn() time.Duration {
	return max(s.clock().Sub(s.born), 0) + 1
}
