package sim

import (
	"math"
	"testing"
	"time"
)

// A hot key's owner silent for seconds (a stalled owner: it hears
// everything, its answers are lost) makes the others fail over to the
// replica and back; every node is still charged what the others admitted
// once, no node cuts an honest view as suspicious, and the cluster admits
// within 5% of the limit. Before gossip's ownerchargeonce.go each node
// was charged the failover's consumption twice: 20 nodes silent 2 s
// without first-share admitted 76% of the limit, every node charged about
// 200 tokens more than the others admitted (with first-share 99.4%: the
// owner's views made up for it in admissions, not in the balances); silent
// 6 s with first-share, every node was charged about 570 more, its balance
// fell below the owner's by more than the view bound's lead, and the nodes
// cut 1,439 honest views (ownerviewbound.go) and admitted 87.9%.
func TestSilentOwnerChargesOnce(t *testing.T) {
	tests := []struct {
		name     string
		share    bool
		duration time.Duration
		silence  Partition
	}{
		{"2 s silent", false, 8 * time.Second, Partition{From: 2 * time.Second, To: 4 * time.Second}},
		{"2 s silent, first-share", true, 8 * time.Second, Partition{From: 2 * time.Second, To: 4 * time.Second}},
		{"6 s silent, first-share", true, 12 * time.Second, Partition{From: 2 * time.Second, To: 8 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Nodes: 20, Duration: tt.duration, Quiet: time.Second, Seed: 1, GossipMode: "owner", FirstShare: tt.share, SilenceOwner: tt.silence}
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := s.Run()
			g := r.ChargeGap
			allowed := 100 + 100*(cfg.Duration-cfg.Quiet).Seconds() // the defaults' burst and rate, over the load
			accuracy := float64(r.Admitted) / allowed
			t.Logf("admitted %d of %.0f (%.1f%%), per second %v; charged − admitted elsewhere p50 %+.0f, from %+.0f to %+.0f; views cut %v",
				r.Admitted, allowed, 100*accuracy, r.PerSecond, g.P50, g.Min, g.Max, r.Suspicious)
			if math.Abs(accuracy-1) > 0.05 {
				t.Errorf("accuracy %.1f%%, want within 5%%", 100*accuracy)
			}
			if g.Nodes != cfg.Nodes || g.Min < -15 || g.Max > 15 {
				t.Errorf("charged − admitted elsewhere from %+.0f to %+.0f tokens at %d nodes; want within ±15 at all %d", g.Min, g.Max, g.Nodes, cfg.Nodes)
			}
			if len(r.Suspicious) > 0 {
				t.Errorf("honest reports clamped as suspicious: %v", r.Suspicious)
			}
		})
	}
}
