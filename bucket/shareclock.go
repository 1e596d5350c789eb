package bucket

// A tracked bucket's share clock: its first-share hold (firstshare.go) and
// its fair floor (floor.go) in one 64-bit word, kept in the state's count
// words (cur, prev), which only the windowed algorithms use. Keeping it in
// the slot rather than in the key's tracking keeps a tracked key's block as
// small as it was before holds and floors (32 bytes of tracking), and the
// decision that reads it already has the slot in cache.
//
// The clock is negative while the bucket is held to its first share: it is
// then the negated Unix nanosecond the bucket was created at. Otherwise it
// is the time the bucket's fair floor has reached (0: not started yet).
// The floor starts once the hold is over, so the two never need the word at
// once. Only buckets (token bucket, GCRA, leaky bucket) have a clock: a
// windowed state's words are its counts, and the callers check the
// algorithm before reading it.

// shareClock is the bucket's share clock.
func (s *state) shareClock() int64 { return int64(uint64(s.cur) | uint64(s.prev)<<32) }

// setShareClock sets the bucket's share clock.
func (s *state) setShareClock(c int64) { s.cur, s.prev = uint32(uint64(c)), uint32(uint64(c)>>32) }

// heldSince reports when the bucket was created, if it is still held to its
// first share.
func (s *state) heldSince() (born int64, held bool) {
	if c := s.shareClock(); c < 0 {
		return -c, true
	}
	return 0, false
}
