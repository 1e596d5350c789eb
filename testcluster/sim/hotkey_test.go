package sim

import (
	"math"
	"testing"
	"time"
)

// TestAggregationUnloadsTheHotKeysOwner: in owner mode, with every node
// hammering one key, aggregation before the owner cuts what the key's owner
// sends and receives, and keeps the limit and the nodes' staleness.
func TestAggregationUnloadsTheHotKeysOwner(t *testing.T) {
	run := func(above int) *Report {
		s, err := New(Config{Nodes: 200, Duration: 3 * time.Second, Seed: 3, MinPerNode: 20, Rate: 1000, Burst: 1000,
			GossipMode: "owner", AggregateAbove: above})
		if err != nil {
			t.Fatal(err)
		}
		return s.Run()
	}
	before, after := run(-1), run(32)
	for _, r := range []*Report{before, after} {
		t.Logf("admitted %d of %.0f (%.1f%%); owner received %.0f and sent %.0f packets/s; per node %.1f packets/s; staleness p50 %.1f p99 %.1f ms",
			r.Admitted, r.Allowed, 100*r.Accuracy, r.HotOwner.PacketsReceived, r.HotOwner.PacketsSent, r.PerNode.PacketsSent, r.HotLag.P50, r.HotLag.P99)
		if math.Abs(r.Accuracy-1) > 0.05 {
			t.Fatalf("accuracy %.1f%%, want within 5%%", 100*r.Accuracy)
		}
	}
	if o, b := after.HotOwner, before.HotOwner; o.PacketsSent+o.PacketsReceived > 0.6*(b.PacketsSent+b.PacketsReceived) {
		t.Fatalf("the owner's packets: %.0f/s aggregated, %.0f/s not", o.PacketsSent+o.PacketsReceived, b.PacketsSent+b.PacketsReceived)
	}
	if after.HotLag.P99 > 2*before.HotLag.P99+50 {
		t.Fatalf("staleness p99 %.1f ms aggregated, %.1f ms not", after.HotLag.P99, before.HotLag.P99)
	}
}

// Each node is charged every admission elsewhere once: with no churn and a
// quiet end for the last answers to arrive, what a node was charged less
// what the others admitted is within a few tokens, at every node that
// lasted the run (the measure the churn findings use, Report.ChargeGap).
func TestChargeGapWithoutChurn(t *testing.T) {
	cfg := Config{Nodes: 20, Duration: 4 * time.Second, Quiet: time.Second, Seed: 1, GossipMode: "owner", FirstShare: true}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := s.Run().ChargeGap
	if g.Nodes != cfg.Nodes {
		t.Fatalf("the gap counts %d nodes, want %d", g.Nodes, cfg.Nodes)
	}
	if g.Min < -3 || g.Max > 3 {
		t.Errorf("charged − admitted elsewhere from %+.0f to %+.0f tokens (p50 %+.0f); want within ±3", g.Min, g.Max, g.P50)
	}
}
