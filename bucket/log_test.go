package bucket

import (
	"testing"
	"time"
)

// A 4/1s sliding log cuts peers' consumption into sub-windows of 62.5ms,
// aligned, as t0 is, to the epoch.
const subWindow1s = 62500 * time.Microsecond

// TestSlidingLogPeersCountsExpire: a peer's count in a sub-window counts as
// if it happened at the sub-window's start and leaves exactly one period
// later; a sub-window that has already left the rolling window is dropped,
// and one ahead of this clock counts in the current one.
func TestSlidingLogPeersCountsExpire(t *testing.T) {
	lim := limitOf(AlgoSlidingLog, 4, time.Second)
	s := NewStore(StoreConfig{})
	key := []byte("k")
	now := 510 * ms // in sub-window 8, which starts at 500ms
	cw := int64(windowOf(lim, now))
	for i, c := range []struct {
		window int64 // relative to the current sub-window
		wantBl float64
	}{
		{-16, 4}, // started at −500ms: left the rolling window at 500ms
		{-15, 3}, // started at −437.5ms: leaves at 562.5ms
		{-2, 2},  // started at 375ms: leaves at 1375ms
		{+3, 1},  // ahead of this clock: counted from 500ms, leaves at 1.5s
	} {
		bl, err := s.ChargeWindow(1, key, lim, 1, uint64(cw+c.window), at(now))
		if err != nil || bl != c.wantBl {
			t.Fatalf("charge %d (sub-window %+d): balance %v, %v; want %v", i, c.window, bl, err, c.wantBl)
		}
	}
	for _, c := range []struct {
		at     time.Duration
		wantBl float64
	}{
		{9*subWindow1s - 1, 1}, {9 * subWindow1s, 2},
		{1375*ms - 1, 2}, {1375 * ms, 3},
		{1500*ms - 1, 3}, {1500 * ms, 4},
	} {
		if bl, _ := s.Balance(1, key, lim, at(c.at)); bl != c.wantBl {
			t.Fatalf("balance at %v = %v, want %v", c.at, bl, c.wantBl)
		}
	}
	if n := s.Sweep(at(1500*ms - 1)); n != 0 {
		t.Fatal("swept a log still holding a peer's count")
	}
	if n := s.Sweep(at(1500 * ms)); n != 1 {
		t.Fatal("did not sweep a log whose counts have all left")
	}
}

// TestSlidingLogRetryAfterWithLocalAndPeers: RetryAfter is the instant
// enough requests, local entries and peers' sub-windows alike, have left.
func TestSlidingLogRetryAfterWithLocalAndPeers(t *testing.T) {
	lim := limitOf(AlgoSlidingLog, 4, time.Second)
	key := []byte("k")
	// Each check ages the log to its instant: each gets a log of its own.
	logAt400ms := func() *Store {
		s := NewStore(StoreConfig{})
		s.ChargeWindow(1, key, lim, 1, windowOf(lim, 0), at(50*ms))       // a peer's, leaves at 1s
		s.Take(1, key, lim, 1, at(100*ms))                                // leaves at 1.1s
		s.ChargeWindow(1, key, lim, 2, windowOf(lim, 125*ms), at(130*ms)) // leave at 1.125s
		s.Charge(1, key, lim, 1, at(300*ms))                              // past the limit; leaves at 1.3s
		return s
	}
	now := 400 * ms // 5 in the rolling window
	for _, c := range []struct {
		cost int64
		want time.Duration
	}{
		{1, 700 * ms}, // 2 must leave: the peer's 1 at 1s, the local 1 at 1.1s
		{2, 725 * ms}, // 3: and the peer's 2 at 1.125s
		{3, 725 * ms}, // 4: likewise
		{4, 900 * ms}, // 5: all, the last at 1.3s
	} {
		if r, _ := logAt400ms().Check(1, key, lim, c.cost, at(now)); r.Allowed || r.RetryAfter != c.want {
			t.Fatalf("Check(%d) = %+v, want refused, retry after %v", c.cost, r, c.want)
		}
		if r, _ := logAt400ms().Check(1, key, lim, c.cost, at(now+c.want-1)); r.Allowed {
			t.Fatalf("Check(%d) 1ns before RetryAfter admitted", c.cost)
		}
		if r, _ := logAt400ms().Take(1, key, lim, c.cost, at(now+c.want)); !r.Allowed {
			t.Fatalf("Take(%d) at RetryAfter = %+v, want admitted", c.cost, r)
		}
	}

	// When 16 does not divide the period, a sub-window is Period/16 rounded
	// down, and a peer's count leaves when the 16th sub-window after its own
	// begins: 5ns before its start + Period here. RetryAfter says so.
	odd := MustLimitOf(AlgoSlidingLog, 4, time.Second+5, 4)
	s := NewStore(StoreConfig{})
	s.ChargeWindow(1, []byte("odd"), odd, 4, windowIndex(t0.UnixNano(), logSubWindow(odd)), at(10*ms))
	r, _ := s.Check(1, []byte("odd"), odd, 1, at(10*ms))
	if r.Allowed || r.RetryAfter != 990*ms {
		t.Fatalf("Check on an odd period = %+v, want refused, retry after 990ms", r)
	}
	if bl, _ := s.Balance(1, []byte("odd"), odd, at(time.Second-1)); bl != 0 {
		t.Fatalf("balance 1ns before the count leaves = %v, want 0", bl)
	}
	if bl, _ := s.Balance(1, []byte("odd"), odd, at(time.Second)); bl != 4 {
		t.Fatalf("balance when the count leaves = %v, want 4", bl)
	}
}

// TestSlidingLogMemoryIsBounded: charges far past the limit at distinct
// instants keep at most 2×Count live entries (the surplus folds into the
// newest), lose no consumption, and the key is full, and swept, one period
// after the last.
func TestSlidingLogMemoryIsBounded(t *testing.T) {
	const count = 4
	lim := limitOf(AlgoSlidingLog, count, time.Second)
	s := NewStore(StoreConfig{})
	key := []byte("k")
	h, sh := s.locate(1, key)
	var last time.Duration
	for i := range 100 * count {
		last = time.Duration(i) * 2 * ms // all within one period
		bl, err := s.Charge(1, key, lim, 1, at(last))
		if err != nil || bl != float64(count-i-1) {
			t.Fatalf("charge %d: balance %v, %v; want %d", i, bl, err, count-i-1)
		}
		ls := sh.get(h, 1, key).st.log
		if live := len(ls.entries) - ls.head; live > 2*count {
			t.Fatalf("charge %d: %d live entries, want at most %d", i, live, 2*count)
		}
		if n := len(ls.entries); n > 4*count+33 {
			t.Fatalf("charge %d: the log's slice holds %d entries", i, n)
		}
	}
	if bl, _ := s.Balance(1, key, lim, at(last+time.Second-1)); bl >= 0 {
		t.Fatalf("balance 1ns before the last charge leaves = %v, want in debt", bl)
	}
	if n := s.Sweep(at(last + time.Second - 1)); n != 0 {
		t.Fatal("swept a log in debt")
	}
	if bl, _ := s.Balance(1, key, lim, at(last+time.Second)); bl != count {
		t.Fatalf("balance one period after the last charge = %v, want %d", bl, count)
	}
	if n := s.Sweep(at(last + time.Second)); n != 1 {
		t.Fatal("did not sweep an idle log")
	}
}

// A cost beyond the count never fits an empty log: refused, not a panic.
func TestSlidingLogRefusesCostAboveCountWhenEmpty(t *testing.T) {
	var l SlidingLog
	lim := MustLimitOf(AlgoSlidingLog, 4, time.Second, 0)
	if r := l.Take(lim, 5, time.Unix(1_700_000_000, 0)); r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("%+v", r)
	}
}
