package daemon

import (
	"fmt"
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
