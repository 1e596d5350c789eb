package bucket

import "time"

// Shift moves every key's state by d, as if it had been made d later: the
// caller's clock has stepped by d (the wall clock it follows was stepped by
// NTP or by hand) and the store must not read the step as time passing.
//
// What moves depends on what the algorithm measures:
//   - The three buckets (token bucket, GCRA, leaky bucket) and the sliding
//     log measure elapsed time: a bucket's refill and a log's requests move
//     with the clock, so a step neither refills a bucket nor drains it, and
//     a logged request ages as it would have without the step.
//   - The fixed and sliding windows count in windows aligned to the Unix
//     epoch, the same windows on every member: their counts stay where they
//     are, and the clock moves into whichever window the wall now says.
//     (So do the peers' sub-windows of a sliding log.)
//
// Shift takes each shard's lock in turn; decisions on other shards go on.
func (s *Store) Shift(d time.Duration) {
	if d == 0 {
		return
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.each(func(_ int, sl *slot) bool {
			sl.st.shift(sl.algo(), int64(d))
			return true
		})
		sh.mu.Unlock()
	}
}

// shift moves the state of algorithm a by d nanoseconds (see Store.Shift).
func (s *state) shift(a Algorithm, d int64) {
	switch a {
	case AlgoTokenBucket, AlgoGCRA, AlgoLeakyBucket:
		if s.full != 0 {
			s.full += d
		}
	case AlgoSlidingLog:
		if s.log != nil {
			for i := s.log.head; i < len(s.log.entries); i++ {
				s.log.entries[i].at += d
			}
		}
		// full is when the last logged request ages out; the peers'
		// sub-windows stay on the wall clock. Moved forward it stays a
		// true bound; moved back it could come before the peers' part ends,
		// so a backward step leaves it where it is (the state is then kept
		// a little longer than it needs to be, never dropped early).
		if d > 0 && s.full != 0 {
			s.full += d
		}
	}
}
