package bucket

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestNewLimitRejectsNonsense(t *testing.T) {
	tests := []struct {
		name   string
		count  int64
		period time.Duration
		burst  int64
	}{
		{"zero count", 0, time.Second, 1},
		{"negative count", -1, time.Second, 1},
		{"zero period", 1, 0, 1},
		{"zero burst", 1, time.Second, 0},
		{"burst above MaxCost", 1, time.Second, MaxCost + 1},
		{"refill longer than a century", 1, 24 * time.Hour, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewLimit(tt.count, tt.period, tt.burst); err == nil {
				t.Fatalf("NewLimit(%d, %s, %d) = nil error", tt.count, tt.period, tt.burst)
			}
		})
	}
}

// step is one call in a scripted bucket scenario.
type step struct {
	at     time.Duration
	op     string // "take", "check", "charge"
	cost   int64
	want   Result // for take/check
	wantBl float64
}

func TestBucketScenarios(t *testing.T) {
	fourPerSec := MustLimit(4, time.Second, 4)
	tests := []struct {
		name  string
		lim   Limit
		steps []step
	}{
		{
			name: "drain from full then refill one token",
			lim:  fourPerSec,
			steps: []step{
				{at: 0, op: "take", cost: 1, want: Result{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 250 * time.Millisecond}, wantBl: 3},
				{at: 0, op: "take", cost: 1, want: Result{Allowed: true, Limit: 4, Remaining: 2, ResetAfter: 500 * time.Millisecond}, wantBl: 2},
				{at: 0, op: "take", cost: 2, want: Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: time.Second}, wantBl: 0},
				{at: 0, op: "take", cost: 1, want: Result{Allowed: false, Limit: 4, Remaining: 0, RetryAfter: 250 * time.Millisecond, ResetAfter: time.Second}, wantBl: 0},
				{at: 249 * time.Millisecond, op: "take", cost: 1, want: Result{Allowed: false, Limit: 4, Remaining: 0, RetryAfter: time.Millisecond, ResetAfter: 751 * time.Millisecond}, wantBl: 0.996},
				{at: 250 * time.Millisecond, op: "take", cost: 1, want: Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: time.Second}, wantBl: 0},
			},
		},
		{
			name: "cost above one waits for the whole cost",
			lim:  MustLimit(10, time.Second, 10),
			steps: []step{
				{at: 0, op: "take", cost: 8, want: Result{Allowed: true, Limit: 10, Remaining: 2, ResetAfter: 800 * time.Millisecond}, wantBl: 2},
				{at: 0, op: "take", cost: 5, want: Result{Allowed: false, Limit: 10, Remaining: 2, RetryAfter: 300 * time.Millisecond, ResetAfter: 800 * time.Millisecond}, wantBl: 2},
				{at: 0, op: "check", cost: 2, want: Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: time.Second}, wantBl: 2},
				{at: 300 * time.Millisecond, op: "take", cost: 5, want: Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: time.Second}, wantBl: 0},
			},
		},
		{
			// The seed scenario from DESIGN.md: 12 requests against 4/s land
			// on one bucket (4 local, 8 reported by peers) → −8, and the next
			// two seconds admit nothing.
			name: "peer charges push into debt and debt is repaid before admitting",
			lim:  fourPerSec,
			steps: []step{
				{at: 0, op: "take", cost: 4, want: Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: time.Second}, wantBl: 0},
				{at: 0, op: "charge", cost: 8, wantBl: -8},
				{at: 0, op: "take", cost: 1, want: Result{Allowed: false, Limit: 4, Remaining: 0, RetryAfter: 2250 * time.Millisecond, ResetAfter: 3 * time.Second}, wantBl: -8},
				{at: 2 * time.Second, op: "take", cost: 1, want: Result{Allowed: false, Limit: 4, Remaining: 0, RetryAfter: 250 * time.Millisecond, ResetAfter: time.Second}, wantBl: 0},
				{at: 2250 * time.Millisecond, op: "take", cost: 1, want: Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: time.Second}, wantBl: 0},
			},
		},
		{
			name: "refill never exceeds burst",
			lim:  MustLimit(100, time.Second, 5),
			steps: []step{
				{at: time.Hour, op: "take", cost: 5, want: Result{Allowed: true, Limit: 100, Remaining: 0, ResetAfter: 50 * time.Millisecond}, wantBl: 0},
				{at: time.Hour, op: "take", cost: 1, want: Result{Allowed: false, Limit: 100, Remaining: 0, RetryAfter: 10 * time.Millisecond, ResetAfter: 50 * time.Millisecond}, wantBl: 0},
			},
		},
		{
			name: "rates with inexact per-token intervals admit exactly burst",
			lim:  MustLimit(3, 2*time.Second, 3),
			steps: []step{
				{at: 0, op: "take", cost: 1, want: Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 666666666}, wantBl: 2},
				{at: 0, op: "take", cost: 1, want: Result{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 1333333332}, wantBl: 1},
				{at: 0, op: "take", cost: 1, want: Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 1999999998}, wantBl: 0},
				{at: 0, op: "take", cost: 1, want: Result{Allowed: false, Limit: 3, Remaining: 0, RetryAfter: 666666664, ResetAfter: 1999999998}, wantBl: 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Bucket
			for i, s := range tt.steps {
				now := at(s.at)
				var got Result
				switch s.op {
				case "take":
					got = b.Take(tt.lim, s.cost, now)
				case "check":
					got = b.Check(tt.lim, s.cost, now)
				case "charge":
					b.Charge(tt.lim, s.cost, now)
				}
				if s.op != "charge" && got != s.want {
					t.Errorf("step %d %s(%d) at %s = %+v, want %+v", i, s.op, s.cost, s.at, got, s.want)
				}
				if bl := b.Balance(tt.lim, now); math.Abs(bl-s.wantBl) > 1e-6 {
					t.Errorf("step %d: balance %.6f, want %.6f", i, bl, s.wantBl)
				}
			}
		})
	}
}

func TestChargeSaturatesInsteadOfOverflowing(t *testing.T) {
	lim := MustLimit(1, 24*time.Hour, 1)
	var b Bucket
	for range 100 {
		b.Charge(lim, MaxCost, at(0))
	}
	if bl := b.Balance(lim, at(0)); bl >= 0 || math.IsInf(bl, 0) || math.IsNaN(bl) {
		t.Fatalf("balance after saturating charges = %v, want large finite debt", bl)
	}
	if r := b.Take(lim, 1, at(time.Hour)); r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("Take after saturating debt = %+v, want denied with positive retry", r)
	}
}

func TestRescaleKeepsProportionOfBurst(t *testing.T) {
	four := MustLimit(4, time.Second, 4)
	eight := MustLimit(8, time.Second, 8)
	tests := []struct {
		name     string
		charge   int64
		from, to Limit
		want     float64
	}{
		{"debt doubles with the burst", 12, four, eight, -16},
		{"half full stays half full", 2, four, eight, 4},
		{"full stays full", 0, four, eight, 8},
		{"shrinking halves the debt", 12, eight, four, -2},
		{"unchanged limit is a no-op", 12, four, four, -8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Bucket
			b.Charge(tt.from, tt.charge, at(0))
			b.Rescale(tt.from, tt.to, at(0))
			if got := b.Balance(tt.to, at(0)); math.Abs(got-tt.want) > 1e-6 {
				t.Fatalf("balance after rescale = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestZeroBucketIsFull(t *testing.T) {
	var b Bucket
	lim := MustLimit(10, time.Minute, 7)
	if !b.IsFull(at(0)) || b.Balance(lim, at(0)) != 7 {
		t.Fatalf("zero bucket: full=%v balance=%v", b.IsFull(at(0)), b.Balance(lim, at(0)))
	}
	b.Take(lim, 1, at(0))
	if b.IsFull(at(0)) {
		t.Fatal("bucket full right after a take")
	}
	if !b.IsFull(at(6 * time.Second)) {
		t.Fatal("bucket not full after one token's refill time")
	}
}

func TestReserveQueuesInArrivalOrderWithinMaxWait(t *testing.T) {
	lim := MustLimit(1, time.Second, 1)
	var b Bucket
	waits := []time.Duration{}
	for range 4 {
		r := b.Reserve(lim, 1, 2500*time.Millisecond, t0)
		if !r.Allowed {
			waits = append(waits, -1)
			continue
		}
		waits = append(waits, r.RetryAfter)
	}
	want := []time.Duration{0, time.Second, 2 * time.Second, -1} // the 4th would wait 3s > 2.5s
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
	if bl := b.Balance(lim, t0); bl != -2 {
		t.Fatalf("balance %v, want -2 (three reserved, one refused)", bl)
	}
}

func TestTakeOverdraftAdmitsWithinTheSoftMargin(t *testing.T) {
	lim := MustLimit(10, time.Second, 10)
	var b Bucket
	b.Take(lim, 10, t0)
	var soft []bool
	for range 3 {
		r, s := b.TakeOverdraft(lim, 1, 2, t0) // up to 2 tokens below zero
		soft = append(soft, r.Allowed && s)
	}
	if !soft[0] || !soft[1] || soft[2] {
		t.Fatalf("soft admissions %v, want two then a refusal", soft)
	}
	if bl := b.Balance(lim, t0); bl != -2 {
		t.Fatalf("balance %v, want -2", bl)
	}
}
