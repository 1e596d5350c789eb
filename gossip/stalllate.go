package gossip

import (
	"math"
	"sync"
	"time"
)

// Consumption heard late because THIS daemon stalled (direct fan-out mode).
//
// Cause (notes11/stallfair.md, reproduced by testcluster/sim --stall-*): a
// daemon starved of CPU for ~2 s makes no round and reads no packet. Its
// buckets meanwhile sit full: the refill is capped at the burst. The others
// consume burst + rate × stall, which their own refill covers. When the
// stalled daemon runs again it reads their queued counters at once and
// charges them on its full bucket: it ends rate × stall below every other
// view (10 nodes, 2 stalled 0-1.8 s, 100/s: balance −179 against +0.9),
// below the fair floor's depth (bucket/floor.go), and admits NOTHING for as
// long as the others keep the balance near 0 (8 s of 10: share 0.00 of 1/N).
//
// Fix: the daemon knows it stalled, on its own clock: the gap since its own
// last round (stallGap). The counters it charges in a short window after a
// gap are late. For each key they are folded apart, as if heard from the
// stall's start on: L = max(F0, T0) + tokens/rate, where T0 is the last
// round before the gap and F0 the instant the bucket would have been full
// as recorded at that round (record below: exact, a bucket's full instant
// does not move without a charge). The bucket is charged only the growth of
// (L − now)+ at each late charge: what the late consumption leaves beyond
// the refill the bucket could not hold. Own requests admitted after the
// stall are charged at now whatever the order (max(F, now) + own, and the
// growth of (L − now)+ on top, gives the same as the other way round), so
// it does not matter whether the daemon admits before it reads its queue.
// No sender clock is read. The credit is at most rate × (now − T0): the
// refill of the stall itself, and none if the bucket was never full during
// it (F0 ≥ now: the growth is then the whole charge). What it may admit
// beyond an in-time view is bounded by that, on the stalled node only: the
// fold assumes the late consumption came as early as it could have.
//
// Tests: stalllate_test.go TestLateChargesAfterAStall (own request first and
// packets first; fails on the code before: −180). Sim (10 nodes, 2 stalled
// 0-1.8 s): see notes11/stallfix.md.

// stallGap is how long without a round of its own this daemon counts as
// having stalled (rounds are every GossipInterval, 20 ms by default).
func (s *Syncer) stallGap() time.Duration { return max(10*s.cfg.GossipInterval, 200*time.Millisecond) }

// stallGrace is how long after noticing a stall counters read still count
// as late (the queue the stall left is read within it).
func (s *Syncer) stallGrace() time.Duration { return 5 * s.cfg.GossipInterval }

// lateKey names a bucket's key under a rule.
type lateKey struct{ rule, key string }

// lateFold is one key's late charges of one stall, folded apart.
type lateFold struct {
	l    time.Duration // when the bucket would be full had they been heard in time (since born)
	frac float64       // growth not charged yet (under a token)
}

// lateCharges is the syncer's stall state; its own lock (charges are applied
// outside s.mu).
type lateCharges struct {
	mu sync.Mutex
	// watch is set once the syncer runs its rounds on its clock (Start,
	// Simulate): a syncer driven by hand (a unit test) has no stalls.
	watch     bool
	lastRound time.Duration             // since born; 0: no round yet
	from      time.Duration             // the current stall's start (the last round before it); 0: none
	until     time.Duration             // counters read until then are late
	full      map[lateKey]time.Duration // per key not full at its last change: when it would be (since born)
	dirty     map[lateKey]struct{}      // keys charged since the last record
	folds     map[lateKey]*lateFold
	swept     int // len(full) at the last sweep
}

// noteStallLocked opens a stall if now is more than stallGap after the last
// round. Caller holds l.mu.
func (s *Syncer) noteStallLocked(l *lateCharges, now time.Duration) {
	if !l.watch || now-l.lastRound <= s.stallGap() || (l.until != 0 && l.from == l.lastRound) {
		return
	}
	l.from, l.until = l.lastRound, now+s.stallGrace()
	clear(l.folds)
}

// lateRound is called by each round, after the drain of own counters: it
// notes a stall, and outside one records the state of the keys changed since
// the last round.
func (s *Syncer) lateRound(own []Counter) {
	bounded, ok := s.ledger.(BoundedLedger)
	if !ok {
		return
	}
	s.mu.Lock()
	owner := s.ownerModeLocked() // owner mode charges no counter through chargeDirect: nothing to record
	s.mu.Unlock()
	now := s.sinceBorn()
	l := &s.late
	l.mu.Lock()
	defer l.mu.Unlock()
	s.noteStallLocked(l, now)
	l.lastRound = now
	if owner {
		clear(l.dirty)
		return
	}
	for _, c := range own {
		if c.Window == 0 {
			s.dirtyLocked(l, c.Rule, c.Key)
		}
	}
	if now <= l.until {
		return // keep the state as of the stall's start
	}
	for k := range l.dirty {
		a, ok := bounded.Allowance(k.rule, k.key)
		if !ok || a.PerSecond <= 0 {
			continue
		}
		b, _ := bounded.Balance(k.rule, k.key)
		deficit := a.Burst - a.Soft - b
		if deficit <= 0 || math.IsInf(b, 0) {
			delete(l.full, k) // full: as if never charged
			continue
		}
		if l.full == nil {
			l.full = make(map[lateKey]time.Duration)
		}
		l.full[k] = now + time.Duration(deficit/a.PerSecond*float64(time.Second))
	}
	clear(l.dirty)
	if len(l.full) > 1024 && len(l.full) > 2*l.swept {
		for k, f := range l.full {
			if f <= now {
				delete(l.full, k)
			}
		}
		l.swept = len(l.full)
	}
}

func (s *Syncer) dirtyLocked(l *lateCharges, rule, key string) {
	if l.dirty == nil {
		l.dirty = make(map[lateKey]struct{})
	}
	l.dirty[lateKey{rule, key}] = struct{}{}
}

// chargeDirect applies counters heard in direct fan-out (receive): late ones
// (after a stall of this daemon) through their key's fold, the others as
// they are.
func (s *Syncer) chargeDirect(charges []charge) {
	bounded, ok := s.ledger.(BoundedLedger)
	if !ok {
		s.charge(charges)
		return
	}
	now := s.sinceBorn()
	l := &s.late
	l.mu.Lock()
	s.noteStallLocked(l, now)
	late := l.until != 0 && now <= l.until
	out := charges[:0]
	for _, c := range charges {
		if c.window != 0 {
			out = append(out, c)
			continue
		}
		s.dirtyLocked(l, c.rule, c.key)
		if !late {
			out = append(out, c)
			continue
		}
		a, ok := bounded.Allowance(c.rule, c.key)
		if !ok || a.PerSecond <= 0 {
			out = append(out, c)
			continue
		}
		k := lateKey{c.rule, c.key}
		f := l.folds[k]
		if f == nil {
			f = &lateFold{l: max(l.from, l.full[k])}
			if l.folds == nil {
				l.folds = make(map[lateKey]*lateFold)
			}
			l.folds[k] = f
		}
		before := max(0, (f.l-now).Seconds()) * a.PerSecond
		f.l += time.Duration(float64(c.tokens) / a.PerSecond * float64(time.Second))
		after := max(0, (f.l-now).Seconds()) * a.PerSecond
		f.frac += after - before
		give := math.Floor(f.frac + 1e-9)
		f.frac -= give
		if give >= 1 {
			c.tokens = uint64(give)
			out = append(out, c)
		}
	}
	l.mu.Unlock()
	s.charge(out)
}

// watchStalls starts noting this daemon's stalls: its rounds now run on its
// clock, counted from now (a round before the first is not missed).
func (s *Syncer) watchStalls() {
	s.late.mu.Lock()
	s.late.watch = true
	s.late.lastRound = s.sinceBorn()
	s.late.mu.Unlock()
}
