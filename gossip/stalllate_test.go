package gossip

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// clockBucketLedger is a BoundedLedger holding one token bucket per key on a
// fake clock, as bucket.Store's (a full instant: charging moves it to
// max(full, now) + cost/rate; the balance is burst less what it lies ahead).
type clockBucketLedger struct {
	mu   sync.Mutex
	clk  *fakeClock
	a    Allowance
	full map[string]time.Time
}

func (l *clockBucketLedger) Drain(func(Counter))                  {}
func (l *clockBucketLedger) Snapshot(func(Counter, float64) bool) {}
func (l *clockBucketLedger) Adopt(string, string, uint64, float64) bool {
	return false
}
func (l *clockBucketLedger) Allowance(string, string) (Allowance, bool) { return l.a, true }

func (l *clockBucketLedger) Charge(rule, key string, _ uint64, tokens uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.now()
	f := l.full[key]
	if f.Before(now) {
		f = now
	}
	l.full[key] = f.Add(time.Duration(float64(tokens) / l.a.PerSecond * float64(time.Second)))
}

func (l *clockBucketLedger) Balance(rule, key string) (float64, Counter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ahead := max(0, l.full[key].Sub(l.clk.now()).Seconds())
	return l.a.Burst - ahead*l.a.PerSecond, Counter{}
}

// A daemon stalled (no round, no packet read) while its peers kept consuming
// charges their queued counters on waking. Heard late, they must leave its
// balance where counters heard in time would have: what the bucket could not
// hold while it sat full is not charged again. Each case is run three
// ways: in time (rounds every interval, each packet read when sent: the
// reference), and stalled with the daemon admitting one request of its own
// before reading its queue, or after. The code before charged every late
// counter on the full bucket: −180 and −80 where the in-time view is 0.
func TestLateChargesAfterAStall(t *testing.T) {
	const interval = 20 * time.Millisecond
	tests := []struct {
		name   string
		before uint64        // tokens the peer consumed, heard in time, just before the stall (the peer is known: see allowance.go)
		stall  time.Duration // how long the daemon stalls
		rate   float64       // the peer's consumption during the stall, per second
	}{
		{name: "stall at the start, full bucket", before: 1, stall: 1800 * time.Millisecond, rate: 155.6},
		{name: "stall mid-run, drained bucket", before: 100, stall: 1800 * time.Millisecond, rate: 100},
		{name: "short stall, bucket never full again", before: 100, stall: 300 * time.Millisecond, rate: 100},
		{name: "idle peer during the stall", before: 50, stall: time.Second, rate: 0},
	}
	for _, tt := range tests {
		for _, mode := range []string{"in time", "stalled, own request first", "stalled, packets first"} {
			t.Run(fmt.Sprintf("%s/%s", tt.name, mode), func(t *testing.T) {
				got := runStall(t, interval, tt.before, tt.stall, tt.rate, mode)
				want := runStall(t, interval, tt.before, tt.stall, tt.rate, "in time")
				if math.Abs(got-want) > 1 {
					t.Fatalf("balance %.1f after the stall, want %.1f (as heard in time)", got, want)
				}
			})
		}
	}
}

// runStall runs one case of TestLateChargesAfterAStall and returns the
// daemon's balance once all is charged.
func runStall(t *testing.T, interval time.Duration, before uint64, stall time.Duration, rate float64, mode string) float64 {
	t.Helper()
	s, _, clk := newBoundSyncer()
	s.cfg.GossipInterval = interval
	l := &clockBucketLedger{clk: clk, a: Allowance{Burst: 100, PerSecond: 100}, full: map[string]time.Time{}}
	s.ledger = l
	s.watchStalls() // as Start does
	s.peers = map[string]memberlist.Node{"a": {Name: "a", DMax: protoStamped}}
	var used uint64
	var queued [][]byte
	send := func(tokens uint64, late bool) {
		used += tokens
		p := packet(s, "a", true, Counter{Rule: "r", Key: "k", Epoch: 1, Used: used, Prev: used - tokens})
		if late {
			queued = append(queued, p)
		} else {
			s.receive(p)
		}
	}
	s.round()
	clk.add(interval)
	if before > 0 {
		send(before, false)
	}
	s.round()
	stalled := mode != "in time"
	var consumed float64
	for elapsed := time.Duration(0); elapsed < stall; elapsed += interval {
		clk.add(interval)
		consumed += rate * interval.Seconds()
		if n := uint64(consumed); n > 0 {
			consumed -= float64(n)
			send(n, stalled)
		}
		if !stalled {
			s.round()
		}
	}
	own := func() { l.Charge("r", "k", 0, 1) } // a request admitted here
	if mode == "stalled, own request first" {
		own()
	}
	for _, p := range queued {
		s.receive(p)
	}
	if mode != "stalled, own request first" {
		own()
	}
	s.round()
	b, _ := l.Balance("r", "k")
	return b
}

// What the fold may credit beyond an in-time view is bounded: a peer idle
// through the stall that consumes only at its very end is charged, late,
// as if it had consumed at the stall's start, so the stalled daemon's view
// is higher than in time, but by no more than the stall's refill (rate ×
// stall), and never lower.
func TestLateChargesCreditAtMostTheStallsRefill(t *testing.T) {
	const interval = 20 * time.Millisecond
	tests := []struct {
		name  string
		stall time.Duration
		end   uint64 // tokens the peer consumes in the stall's last interval
	}{
		{name: "a burst at the end of a 1 s stall", stall: time.Second, end: 100},
		{name: "a large burst at the end of a 300 ms stall", stall: 300 * time.Millisecond, end: 150},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := func(stalled bool) float64 {
				s, _, clk := newBoundSyncer()
				s.cfg.GossipInterval = interval
				l := &clockBucketLedger{clk: clk, a: Allowance{Burst: 100, PerSecond: 100}, full: map[string]time.Time{}}
				s.ledger = l
				s.watchStalls()
				s.peers = map[string]memberlist.Node{"a": {Name: "a", DMax: protoStamped}}
				s.round()
				clk.add(interval)
				s.receive(packet(s, "a", true, Counter{Rule: "r", Key: "k", Epoch: 1, Used: 1}))
				s.round()
				var last []byte
				for elapsed := interval; elapsed <= tt.stall; elapsed += interval {
					clk.add(interval)
					if elapsed+interval > tt.stall {
						last = packet(s, "a", true, Counter{Rule: "r", Key: "k", Epoch: 1, Used: 1 + tt.end, Prev: 1})
						if !stalled {
							s.receive(last)
						}
					}
					if !stalled {
						s.round()
					}
				}
				if stalled {
					s.receive(last)
				}
				b, _ := l.Balance("r", "k")
				return b
			}
			inTime, late := run(false), run(true)
			t.Logf("balance %.1f after the stall, %.1f in time", late, inTime)
			if credit := late - inTime; credit < -1 || credit > 100*tt.stall.Seconds()+1 {
				t.Fatalf("balance %.1f after the stall, %.1f in time: credit %.1f, want 0 to %.0f (rate × stall)",
					late, inTime, credit, 100*tt.stall.Seconds())
			}
		})
	}
}
