package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// propagationChanges is how many changes TestPropagation times per mode.
const propagationChanges = 30

// TestPropagation measures how long a rule change takes to reach every one
// of three sluiced daemons: from the moment the API call that made it
// returns (and, apart, from the moment it was sent) until each daemon
// decides under the new limit, over propagationChanges changes, with the
// daemons long-polling (--rules-wait 30s, the poll interval left at 30 s)
// and with them polling plainly every second, the changes coming at random
// moments. It logs p50, p90, p99 and the
// maximum (run with -v to read them); its only assertions are generous
// bounds: with long-polling a change that waited for a 30 s poll would fail
// it.
//
//	go test -count=1 -v -run TestPropagation ./internal/e2e   (in cmd/sluice-rules)
func TestPropagation(t *testing.T) {
	svc := startRulesService(t)
	ctx := context.Background()
	admin := rulesapi.NewClient(svc.url, svc.adminToken)
	if _, err := admin.CreateTeam(ctx, "bench"); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.CreateToken(ctx, "bench", "bench")
	if err != nil {
		t.Fatal(err)
	}
	team := rulesapi.NewClient(svc.url, tok.Secret)
	limit := int64(1000)
	set := func() {
		t.Helper()
		if _, err := team.PutRule(ctx, "bench", "api", fmt.Sprintf("rate: %d/1h\n", limit), rulesapi.ChangeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	set()

	modes := []struct {
		name           string
		interval, wait time.Duration
		spread         time.Duration // changes come this far apart, at random
		bound          time.Duration
	}{
		{"long-poll", 30 * time.Second, 30 * time.Second, 100 * time.Millisecond, 10 * time.Second},
		{"poll every 1s", time.Second, 0, time.Second, 15 * time.Second},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			daemons := startDaemons(t, "d", 3, svc.servedURL(), m.interval, m.wait)
			waitLimit(t, daemons, "bench.api", limit, time.Now(), m.bound+m.interval)
			var fromReturn, fromSend []time.Duration
			for range propagationChanges {
				// Changes come at random moments, not in step with the
				// polls (each right after the last was applied would wait
				// a whole interval every time).
				<-time.After(rand.N(m.spread))
				limit++
				sent := time.Now()
				set()
				returned := time.Now()
				applied := appliedAt(t, daemons, "bench.api", limit, m.bound)
				fromReturn = append(fromReturn, max(0, applied.Sub(returned)))
				fromSend = append(fromSend, applied.Sub(sent))
			}
			t.Logf("%s, 3 daemons, %d changes: until every daemon applies a change, from the API call's return: %s; from its sending: %s",
				m.name, propagationChanges, summary(fromReturn), summary(fromSend))
		})
	}
}

// appliedAt polls every daemon at once until each decides rule under limit
// and returns when the last one did.
func appliedAt(t *testing.T, daemons []*daemon, rule string, limit int64, within time.Duration) time.Time {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		last time.Time
		late []string
	)
	for _, d := range daemons {
		wg.Go(func() {
			tick := time.NewTicker(500 * time.Microsecond)
			defer tick.Stop()
			deadline := time.After(within)
			for {
				if dec := d.client.Allow(context.Background(), rule, "probe"); !dec.FailedOpen && dec.Limit == limit {
					now := time.Now()
					mu.Lock()
					if now.After(last) {
						last = now
					}
					mu.Unlock()
					return
				}
				select {
				case <-tick.C:
				case <-deadline:
					mu.Lock()
					late = append(late, d.name)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if len(late) > 0 {
		t.Fatalf("daemons %v did not decide %s under limit %d within %v", late, rule, limit, within)
	}
	return last
}

// summary gives the percentiles of durations (nearest rank).
func summary(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	pct := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.5) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v, p90 %v, p99 %v, max %v", r(pct(0.50)), r(pct(0.90)), r(pct(0.99)), r(s[len(s)-1]))
}
