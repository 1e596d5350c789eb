package daemon

import (
	"math"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/ipc"
)

const algorithmRules = `
unknown_rule: deny
rules:
  token:   {rate: 4/1s}
  leaky:   {rate: 4/1s, algorithm: leaky_bucket}
  gcra:    {rate: 4/1s, algorithm: gcra}
  fixed:   {rate: 4/1s, algorithm: fixed_window}
  sliding: {rate: 4/1s, algorithm: sliding_window}
  log:     {rate: 4/1s, algorithm: sliding_log}
  api:
    limits:
      - rate: 3/1s
      - rate: 5/1d
        algorithm: fixed_window
`

// Every algorithm is reachable from a rules file and decides through the
// daemon: four admitted, the fifth refused with a retry-after, nothing
// allocated per decision once the key is warm.
func TestEveryAlgorithmDecidesThroughTheDaemon(t *testing.T) {
	d, clk, _ := newDaemon(t, algorithmRules)
	for _, a := range bucket.Algorithms() {
		rule := map[bucket.Algorithm]string{bucket.AlgoTokenBucket: "token", bucket.AlgoLeakyBucket: "leaky", bucket.AlgoGCRA: "gcra",
			bucket.AlgoFixedWindow: "fixed", bucket.AlgoSlidingWindow: "sliding", bucket.AlgoSlidingLog: "log"}[a]
		t.Run(a.String(), func(t *testing.T) {
			if got := d.Rules().ByName[rule].Limits[0].Algorithm(); got != a {
				t.Fatalf("rule %s enforced by %s", rule, got)
			}
			for i := range 4 {
				if ok, r := decide(t, d, checks(rule, "k")); !ok || r[0].Limit != 4 || r[0].Remaining != uint64(3-i) {
					t.Fatalf("request %d: %v %+v", i, ok, r)
				}
			}
			ok, r := decide(t, d, checks(rule, "k"))
			// At most a period for all but the sliding window, whose estimate
			// can take into the next window to fall far enough.
			if ok || r[0].Status != ipc.StatusOverLimit || r[0].RetryAfter <= 0 || r[0].RetryAfter > 2*time.Second {
				t.Fatalf("fifth request: %v %+v", ok, r)
			}
			clk.Advance(r[0].RetryAfter)
			if ok, r := decide(t, d, checks(rule, "k")); !ok {
				t.Fatalf("refused again after its retry-after: %+v", r)
			}
			one := checks(rule, "warm")
			results := make([]ipc.Result, 1)
			for range 50 { // let a sliding log's slice grow to its working size
				clk.Advance(100 * time.Millisecond)
				d.Decide(one, results)
			}
			if allocs := testing.AllocsPerRun(500, func() {
				clk.Advance(100 * time.Millisecond)
				d.Decide(one, results)
			}); allocs != 0 {
				t.Fatalf("%v allocs per decision", allocs)
			}
		})
	}
}

// A rule with several limits admits only when every limit does, reports
// the binding limit, and charges none of them when one refuses.
func TestRuleWithSeveralLimits(t *testing.T) {
	d, clk, _ := newDaemon(t, algorithmRules)
	api := d.rules.Load().byName["api"]
	balances := func() (float64, float64) {
		k := []byte("k")
		b0, _ := d.store.Balance(api.ns[0], k, api.Limits[0], clk.Now())
		b1, _ := d.store.Balance(api.ns[1], k, api.Limits[1], clk.Now())
		return b0, b1
	}
	for i := range 3 {
		// The per-second bucket binds: it has less left than the day.
		if ok, r := decide(t, d, checks("api", "k")); !ok || r[0].Limit != 3 || r[0].Remaining != uint64(2-i) || r[0].Period != time.Second {
			t.Fatalf("request %d: %v %+v", i, ok, r)
		}
	}
	ok, r := decide(t, d, checks("api", "k"))
	if ok || r[0].Status != ipc.StatusOverLimit || r[0].Limit != 3 || !near(r[0].RetryAfter.Seconds(), 1.0/3) {
		t.Fatalf("fourth request in the second: %v %+v", ok, r)
	}
	if b0, b1 := balances(); !near(b0, 0) || b1 != 2 {
		t.Fatalf("balances %v and %v after a refusal, want 0 and 2: the day must not be charged", b0, b1)
	}
	clk.Advance(time.Second)
	for i := range 2 {
		if ok, r := decide(t, d, checks("api", "k")); !ok || r[0].Limit != 5 || r[0].Remaining != uint64(1-i) || r[0].Period != 24*time.Hour {
			t.Fatalf("request %d of the second second: %v %+v (the day binds now)", i, ok, r)
		}
	}
	ok, r = decide(t, d, checks("api", "k"))
	// The epoch is 08:00 UTC: the day's window ends in 16 hours.
	if ok || r[0].Limit != 5 || r[0].RetryAfter != 16*time.Hour-time.Second || r[0].Period != 24*time.Hour {
		t.Fatalf("sixth request of the day: %v %+v", ok, r)
	}
	if b0, b1 := balances(); !near(b0, 1) || b1 != 0 {
		t.Fatalf("balances %v and %v, want 1 and 0: the refused request charged the second", b0, b1)
	}
	results := make([]ipc.Result, 1)
	two := checks("api", "other")
	if allocs := testing.AllocsPerRun(200, func() {
		clk.Advance(time.Second)
		d.Decide(two, results)
	}); allocs != 0 {
		t.Fatalf("%v allocs per decision of a rule with two limits", allocs)
	}
}

// A peer's consumption of a rule's second limit, gossiped under the limit's
// name, lands in that limit's window; consumption of a window that has
// passed is dropped.
func TestLedgerChargesTheNamedLimitAndWindow(t *testing.T) {
	d, clk, _ := newDaemon(t, algorithmRules)
	api := d.rules.Load().byName["api"]
	day := api.Limits[1]
	now := clk.Now()
	today := uint64(now.Unix()/86400) + 1 // windows as gossip numbers them
	ledger{d}.Charge("api#1", "k", today, 2)
	ledger{d}.Charge("api#1", "k", today-1, 3) // yesterday: no longer matters
	ledger{d}.Charge("api#2", "k", today, 3)   // no such limit
	if b, _ := d.store.Balance(api.ns[1], []byte("k"), day, now); b != 3 {
		t.Fatalf("daily balance %v, want 5-2", b)
	}
	if b, _ := d.store.Balance(api.ns[0], []byte("k"), api.Limits[0], now); b != 3 {
		t.Fatalf("per-second balance %v, want untouched 3", b)
	}
}

// near compares token counts and seconds that went through nanosecond rounding.
func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

// A caller willing to wait is given a later turn by a bucket, whose debt
// reserves it, but not by a window, which has no turns: with several checks
// (decided by check, then charge) a full window refuses rather than count the
// request in the full window while it goes ahead in the next.
func TestMaxDelayReservesInBucketsNotWindows(t *testing.T) {
	d, _, _ := newDaemon(t, algorithmRules)
	for _, tt := range []struct {
		rule string
		want ipc.Status
	}{{"token", ipc.StatusDelayed}, {"fixed", ipc.StatusOverLimit}, {"log", ipc.StatusOverLimit}} {
		cs := checks(tt.rule, "wait", "gcra", "other-"+tt.rule)
		for range 4 {
			decide(t, d, cs)
		}
		cs[0].MaxDelay = 10 * time.Second
		if _, r := decide(t, d, cs); r[0].Status != tt.want {
			t.Errorf("%s: fifth request with a 10s max delay: %+v, want %s", tt.rule, r[0], tt.want)
		}
	}
}
