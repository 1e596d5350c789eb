package bucket

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

// A flood of keys under a sliding log with a large limit: without a budget
// each key's log grows with its requests (here 64 entries, 1 KiB a key);
// with one, the logs' room beyond their first entry stays within
// MaxLogBytes, every request is still admitted and counted, and the heap
// stays within keys × (per-key figure) + MaxLogBytes.
func TestLogBudgetBoundsSlidingLogMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 20k keys")
	}
	const (
		n        = 20_000
		requests = 64
		budget   = 256 << 10
		// Per key: a 56-byte slot in a table 68-85% full (66-82 B),
		// logState 144 B, first log entry 16 B, rounded up generously.
		perKey = 400
	)
	lim := MustLimitOf(AlgoSlidingLog, MaxLogLimit, time.Hour, 0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewStore(StoreConfig{MaxKeys: 2 * n, MaxLogBytes: budget})
	key := []byte("user-0000000000")
	for i := range n {
		strconv.AppendInt(key[:5], int64(1_000_000_000+i), 10)
		for j := range requests {
			if r, _ := s.Take(1, key, lim, 1, at(time.Duration(j)*time.Millisecond)); !r.Allowed {
				t.Fatalf("request %d of key %d refused under a limit of %d", j, i, lim.Count())
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	used, max, refused := s.LogStats()
	if used > max || max != budget {
		t.Fatalf("logs hold %d bytes beyond their first entry, budget %d (want %d)", used, max, budget)
	}
	if refused == 0 {
		t.Fatal("the budget never refused a log's growth: the test does not reach it")
	}
	// Every admission is still counted.
	strconv.AppendInt(key[:5], int64(1_000_000_000+n-1), 10)
	if b, _ := s.Balance(1, key, lim, at(time.Second)); b != float64(lim.Count()-requests) {
		t.Fatalf("balance %v after %d requests, want %d: admissions lost at the budget", b, requests, lim.Count()-requests)
	}
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if bound := int64(n*perKey + budget); heap > bound {
		t.Fatalf("heap grew %d bytes for %d keys; the stated bound is %d (keys × %d + budget %d)", heap, n, bound, perKey, budget)
	}
	t.Logf("%d keys × %d requests: heap %.0f B/key, log bytes %d of %d, %d growths refused", n, requests, float64(heap)/n, used, max, refused)
	runtime.KeepAlive(s)

	// Once the logs have aged out, the sweep evicts them and the budget is whole again.
	if ev := s.Sweep(at(2 * time.Hour)); ev != n {
		t.Fatalf("swept %d of %d aged-out logs", ev, n)
	}
	if used, _, _ := s.LogStats(); used != 0 {
		t.Fatalf("%d log bytes still counted after every log was evicted", used)
	}
}

// A log that cannot grow still counts every admission; the cost it could not
// log joins the newest entry with that entry's time, so it leaves the window
// early: the log errs toward admitting, never admitting more than 2 × Count
// in a rolling Period.
func TestLogAtBudgetCountsEverythingAndErrsTowardAdmitting(t *testing.T) {
	lim := MustLimitOf(AlgoSlidingLog, 4, time.Second, 0)
	// Requests at 0, 100, 500 and 600 ms fill the limit; then one every 100 ms.
	var times []time.Duration
	times = append(times, 0, 100*time.Millisecond, 500*time.Millisecond, 600*time.Millisecond)
	for ms := 700 * time.Millisecond; ms < 3*time.Second; ms += 100 * time.Millisecond {
		times = append(times, ms)
	}
	run := func(s *Store) (admitted []time.Duration) {
		for _, d := range times {
			if r, _ := s.Take(1, []byte("k"), lim, 1, at(d)); r.Allowed {
				admitted = append(admitted, d)
			}
		}
		return admitted
	}
	s := NewStore(StoreConfig{MaxLogBytes: logEntrySize}) // room to grow from 1 entry to 2, no more
	admitted := run(s)
	exact := run(NewStore(StoreConfig{}))
	if _, _, refused := s.LogStats(); refused == 0 {
		t.Fatal("the budget refused nothing")
	}
	if len(admitted) < 4 || admitted[3] != 600*time.Millisecond {
		t.Fatalf("admitted at %v: the first 4 requests must pass", admitted)
	}
	if b, _ := s.Balance(1, []byte("k"), lim, at(650*time.Millisecond)); b != 0 {
		t.Fatalf("balance %v after 4 of 4: an admission was not counted", b)
	}
	for i := range admitted { // never more than 2 × Count in a rolling second
		in := 0
		for _, a := range admitted[i:] {
			if a < admitted[i]+time.Second {
				in++
			}
		}
		if in > 2*int(lim.Count()) {
			t.Fatalf("%d admitted in the second from %v: more than 2 × Count (%v)", in, admitted[i], admitted)
		}
	}
	// Erring toward admitting: the i'th admission comes no later than the
	// exact log's, and here some come sooner.
	sooner := 0
	for i, e := range exact {
		if i >= len(admitted) || admitted[i] > e {
			t.Fatalf("at the budget the log admitted %v, the exact log %v: it must err toward admitting", admitted, exact)
		}
		if admitted[i] < e {
			sooner++
		}
	}
	if sooner == 0 {
		t.Fatalf("at the budget the log admitted exactly as the exact log (%v): the test does not reach the budget", admitted)
	}
	t.Logf("at the budget: admitted %d at %v; exact log: %d at %v", len(admitted), admitted, len(exact), exact)
}
