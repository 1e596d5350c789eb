package daemon

import (
	"fmt"
	"math"
	"os"
	"sync"
	"testing"
)

// A rules file the watcher read before a SIGHUP-style reload read a newer
// one is dropped when it arrives late: the newest read stays in force.
func TestReloadDropsAReadOlderThanTheRulesInForce(t *testing.T) {
	d, _, path := newDaemon(t, "rules:\n  r:\n    rate: 1/1s\n")

	staleSeq := d.nextReadSeq() // the watcher starts reading version 1 ...
	stale := []byte("rules:\n  r:\n    rate: 2/1s\n")

	writeRules(t, path, "rules:\n  r:\n    rate: 3/1s\n")
	if err := d.Reload(); err != nil { // ... a reload reads and applies version 2 ...
		t.Fatal(err)
	}
	newest := d.Rules().Hash

	if err := d.reloadFileData(staleSeq, stale); err != nil { // ... then the watcher's read arrives
		t.Fatal(err)
	}
	if got := d.Rules().Hash; got != newest {
		t.Fatalf("rules in force %s after the older read arrived, want the newest %s", got, newest)
	}
	if ok, failed := d.ReloadCounts(); ok != 1 || failed != 0 {
		t.Fatalf("reloads ok %d failed %d, want 1 and 0 (the stale read is not a reload)", ok, failed)
	}

	// A read taken after the one in force is applied.
	fresh := d.nextReadSeq()
	if err := d.reloadFileData(fresh, []byte("rules:\n  r:\n    rate: 4/1s\n")); err != nil {
		t.Fatal(err)
	}
	if got := d.Rules().ByName["r"].Limits[0].Burst(); got != 4 {
		t.Fatalf("burst %d after a newer read, want 4", got)
	}
}

// Reloads from many sources at once run one at a time: every one that read
// a valid file succeeds, and what is in force at the end is the file's last
// content, whichever goroutine finished last: a read of an older version
// that reaches the daemon after the newest was applied is dropped.
func TestConcurrentReloadsEndOnTheNewestRules(t *testing.T) {
	d, _, path := newDaemon(t, "rules:\n  r:\n    rate: 1/1s\n")
	var wg sync.WaitGroup
	var mu sync.Mutex // serialises writers, so each version is whole
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				if g == 0 {
					mu.Lock()
					// Replaced by rename, as editors and config managers
					// do, so a Reload never reads half a file.
					writeRules(t, path+".new", fmt.Sprintf("rules:\n  r:\n    rate: %d/1s\n", 2+i))
					if err := os.Rename(path+".new", path); err != nil {
						t.Error(err)
					}
					mu.Unlock()
				}
				var err error
				if g%2 == 0 {
					err = d.Reload()
				} else {
					mu.Lock()
					seq := d.nextReadSeq()
					data, rerr := os.ReadFile(path)
					mu.Unlock()
					if rerr != nil {
						t.Error(rerr)
						return
					}
					err = d.reloadFileData(seq, data)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := d.Rules().ByName["r"].Limits[0].Burst(); got != 26 {
		t.Fatalf("burst %d in force after the reloads, want the file's last version (26)", got)
	}
}

// A reader never sees the new rules with a balance not yet rescaled for
// them, nor the old rules with a rescaled one: while the limit's burst flips
// between 10 and 20 (the rate unchanged, so a rescale really moves the
// state), a key that spent half is read as 5 of 10 or 10 of 20, never 15 or
// 0. 50,000 other keys make each rescale pass long enough to be caught.
func TestReloadSwitchesRulesAndBalancesTogether(t *testing.T) {
	small := "rules:\n  r:\n    rate: 10/1h\n    burst: 10\n"
	large := "rules:\n  r:\n    rate: 10/1h\n    burst: 20\n"
	d, _, _ := newDaemon(t, small)
	ar := d.rules.Load().byName["r"]
	for i := range 50_000 {
		if _, err := d.store.Charge(ar.ns[0], fmt.Appendf(nil, "k%d", i), ar.Limits[0], 5, epoch); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.store.Charge(ar.ns[0], []byte("v"), ar.Limits[0], 5, epoch); err != nil {
		t.Fatal(err)
	}
	if b, _ := d.Balance("r", "v"); b != 5 {
		t.Fatalf("setup: balance %v, want 5 of 10", b)
	}

	var wg sync.WaitGroup
	done := make(chan struct{})
	var torn []float64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for reads := 0; reads < 10_000_000; reads++ { // bounded; ends with the reloads
			select {
			case <-done:
				return
			default:
			}
			if b, _ := d.Balance("r", "v"); math.Abs(b-5) > 0.01 && math.Abs(b-10) > 0.01 {
				torn = append(torn, b)
			}
		}
	}()
	for i := range 40 {
		data := small
		if i%2 == 0 {
			data = large
		}
		if err := d.reloadFileData(d.nextReadSeq(), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if len(torn) > 0 {
		t.Fatalf("%d reads saw a balance that is neither 5 of 10 nor 10 of 20 (e.g. %v): rules and balances did not switch together", len(torn), torn[0])
	}
	if b, _ := d.Balance("r", "v"); b != 5 {
		t.Fatalf("after an even number of flips: balance %v, want 5 of 10", b)
	}
}
