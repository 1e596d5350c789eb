package gossip

import (
	"math"
	"testing"

	"github.com/hashicorp/memberlist"
)

// A node restarted under its old name is still a member to its peers: they
// send it their counters before it has seen them join, so those are charged
// against the one allowance that all non-members share for a key, and all
// but the first are clamped. What was clamped is not heard: once the
// origins are members, their next push-pull (or a resend of the counter)
// brings the node the whole debt, paid from each member's own allowance.
// Before, the clamped counters were recorded as heard, the peers' lower
// balance was "explained" by nothing unheard, and the node stayed
// undercharged for good (TestCrashAndRestartRelearnsDebts: balance 1.5
// where the cluster owed −7.5).
func TestCountersHeardBeforeTheirOriginsJoinedAreRepaired(t *testing.T) {
	a := Allowance{Burst: 10, PerSecond: 10.0 / 60}
	tests := []struct {
		name   string
		repair func(s *Syncer)
	}{
		{"by a push-pull state", func(s *Syncer) {
			s.mergeState(encodeState("a", []stateEntry{{c: Counter{Rule: "r", Key: "debtor", Epoch: 1, Used: 10}, balance: -10}},
				[]seenEntry{{origin: "b", c: Counter{Rule: "r", Key: "debtor", Epoch: 1, Used: 10}}}))
		}},
		{"by a resend of the clamped counter", func(s *Syncer) {
			s.receive(packet(s, "b", true, Counter{Rule: "r", Key: "debtor", Epoch: 1, Used: 10}))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, l, _ := newBoundSyncer()
			l.a = a
			// Both counters arrive before either origin is a member here.
			s.receive(packet(s, "a", true, Counter{Rule: "r", Key: "debtor", Epoch: 1, Used: 10}))
			s.receive(packet(s, "b", true, Counter{Rule: "r", Key: "debtor", Epoch: 1, Used: 10}))
			shared := math.Floor(a.Burst + a.PerSecond*firstSlack.Seconds() + 1)
			if got := float64(l.get("r/debtor")); got != shared {
				t.Fatalf("charged %v of two strangers' counters, want the shared allowance %v", got, shared)
			}
			if s.stats.SuspiciousReports.Load() != 0 || s.stats.DeferredReports.Load() != 1 {
				t.Fatalf("suspicious %d, deferred %d: want none suspicious and one deferred (the honest counter the shared allowance could not pay)",
					s.stats.SuspiciousReports.Load(), s.stats.DeferredReports.Load())
			}
			s.peers["a"] = memberlist.Node{Name: "a", DMax: protoStamped}
			s.peers["b"] = memberlist.Node{Name: "b", DMax: protoStamped}
			tt.repair(s)
			if got := bal(l, "debtor"); math.Abs(got-(-10)) > 1 {
				t.Fatalf("balance %v once the origins joined, want the cluster's debt -10", got)
			}
			// Heard again, the counters charge nothing more.
			s.receive(packet(s, "a", true, Counter{Rule: "r", Key: "debtor", Epoch: 1, Used: 10}))
			s.receive(packet(s, "b", true, Counter{Rule: "r", Key: "debtor", Epoch: 1, Used: 10}))
			if got := bal(l, "debtor"); math.Abs(got-(-10)) > 1 {
				t.Fatalf("balance %v after the counters were heard again, want -10", got)
			}
			if n := s.stats.SuspiciousReports.Load(); n != 0 {
				t.Fatalf("%d honest reports counted as suspicious", n)
			}
		})
	}
}
