package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/config"
)

// Two versions of a rules file that differ in a rule nobody uses and in the
// limit of "scaled"; "open" and "debtor" are the same in both.
func reloadRules(version int) string {
	return fmt.Sprintf(`rules:
  open:
    rate: 100000000/1s
  debtor:
    rate: 10/1h
  scaled:
    rate: %d/1h
  spare:
    rate: %d/1s
`, 10*(1+version%2), 1+version)
}

// Under steady load from real clients over the socket, 100 reloads in a row
// drop no request (none fails open, none errs, every check of an unlimited
// rule is admitted), reset no balance (a key in debt stays refused
// throughout), and carry a changed limit's balance over in proportion.
func TestHundredReloadsUnderLoadDropNothingResetNothing(t *testing.T) {
	s := config.DefaultSettings()
	s.RulesPath, s.NoWatch = filepath.Join(t.TempDir(), "rules.yaml"), true
	writeRules(t, s.RulesPath, reloadRules(0))
	d := runDaemon(t, s)

	cl, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: d.SocketPath(), Timeout: 5 * time.Second, Conns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bg := context.Background()
	for range 10 {
		cl.Allow(bg, "debtor", "d") // spend the whole burst
	}
	for range 6 {
		cl.Allow(bg, "scaled", "s") // 4 of 10 left
	}

	var (
		stop                                   atomic.Bool
		decisions, failedOpen, refusedOpen     atomic.Int64
		debtorAdmitted, debtorChecks, maxNanos atomic.Int64
		wg                                     sync.WaitGroup
	)
	deadline := time.Now().Add(60 * time.Second) // bound, should the reloads stall
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load() && i < 2_000_000 && time.Now().Before(deadline); i++ {
				start := time.Now()
				open := cl.Allow(bg, "open", fmt.Sprint("client-", w, "-", i%100))
				debt := cl.Allow(bg, "debtor", "d")
				if took := int64(time.Since(start)); took > maxNanos.Load() {
					maxNanos.Store(took) // racy max: good enough for a report
				}
				decisions.Add(2)
				if open.FailedOpen || debt.FailedOpen {
					failedOpen.Add(1)
				}
				if !open.Allowed {
					refusedOpen.Add(1)
				}
				debtorChecks.Add(1)
				if debt.Allowed {
					debtorAdmitted.Add(1)
				}
			}
		}()
	}
	started := time.Now()
	for v := 1; v <= 100; v++ {
		before := decisions.Load()
		// Reload only once some load has run since the last one.
		pollUntil(t, "requests flow between reloads", func() bool { return decisions.Load() > before+20 })
		writeRules(t, s.RulesPath, reloadRules(v))
		if err := d.Reload(); err != nil {
			t.Fatalf("reload %d: %v", v, err)
		}
	}
	elapsed := time.Since(started)
	stop.Store(true)
	wg.Wait()

	if ok, failed := d.ReloadCounts(); ok != 100 || failed != 0 {
		t.Errorf("reloads: %d ok, %d failed; want 100, 0", ok, failed)
	}
	if n := failedOpen.Load(); n != 0 {
		t.Errorf("%d requests failed open during reloads: dropped", n)
	}
	if n := refusedOpen.Load(); n != 0 {
		t.Errorf("%d checks of an unlimited rule were refused during reloads", n)
	}
	if n := debtorAdmitted.Load(); n != 0 {
		t.Errorf("a key with its burst spent was admitted %d times in %d checks during reloads: a balance was reset", n, debtorChecks.Load())
	}
	// "scaled" ended on version 100: 10/1h. It went 10 → 20 → 10 ... with
	// balances rescaled each time; 4 of 10 left must still be about 4.
	if b, _ := d.Balance("scaled", "s"); b < 3.9 || b > 4.5 {
		t.Errorf("after 100 rescales the balance is %v, want about 4 of 10", b)
	}
	t.Logf("100 reloads in %v under load: %d decisions, 0 failed open, 0 refused on the open rule, the debtor refused all %d times; slowest call pair %v",
		elapsed.Round(time.Millisecond), decisions.Load(), debtorChecks.Load(), time.Duration(maxNanos.Load()).Round(time.Microsecond))
}
