package sim

import (
	"math"
	"testing"
	"time"
)

// A hot key's owner silent for 2 s (a stalled owner: it hears everything,
// its answers are lost) makes the others fail over to the replica and
// back; every node is still charged what the others admitted once, and
// the cluster admits within 5% of the limit. Before gossip's
// ownerchargeonce.go each node was charged the failover's consumption
// twice: 20 nodes without first-share admitted 76% of the limit, every
// node charged about 200 tokens more than the others admitted (with
// first-share, 99.4%: the owner's views made up for it in admissions,
// not in the balances).
func TestSilentOwnerChargesOnce(t *testing.T) {
	for _, share := range []bool{false, true} {
		cfg := Config{Nodes: 20, Duration: 8 * time.Second, Quiet: time.Second, Seed: 1, GossipMode: "owner", FirstShare: share,
			SilenceOwner: Partition{From: 2 * time.Second, To: 4 * time.Second}}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := s.Run()
		g := r.ChargeGap
		allowed := 100 + 100*(cfg.Duration-cfg.Quiet).Seconds() // the defaults' burst and rate, over the load
		accuracy := float64(r.Admitted) / allowed
		t.Logf("first-share %v: admitted %d of %.0f (%.1f%%), per second %v; charged − admitted elsewhere p50 %+.0f, from %+.0f to %+.0f",
			share, r.Admitted, allowed, 100*accuracy, r.PerSecond, g.P50, g.Min, g.Max)
		if math.Abs(accuracy-1) > 0.05 {
			t.Errorf("first-share %v: accuracy %.1f%%, want within 5%%", share, 100*accuracy)
		}
		if g.Nodes != cfg.Nodes || g.Min < -15 || g.Max > 15 {
			t.Errorf("first-share %v: charged − admitted elsewhere from %+.0f to %+.0f tokens at %d nodes; want within ±15 at all %d", share, g.Min, g.Max, g.Nodes, cfg.Nodes)
		}
	}
}
