package gossip

import (
	"math"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// A member cut off by a partition admits on its own side from the moment
// it is cut off; this node declares it dead only after its probes and the
// suspicion timeout, later still on a loaded machine. Its first report of
// a key after the partition heals may carry its burst and the rate for the
// whole time since its counters were last heard here, not only since it
// was declared dead (which clamped honest reports after a partition healed
// under load). A member that was silent for long before it died is not
// allowed that silence: no more than failure detection's time before it
// was declared dead counts.
func TestAwayIsCountedFromTheLastCountersHeard(t *testing.T) {
	first := 100 + 100*firstSlack.Seconds() + 1
	tests := []struct {
		name     string
		silent   time.Duration // from its last counters to the partition
		declared time.Duration // from the partition to this node declaring it dead
		dead     time.Duration // from then to its first report after it is back
		rejoined bool          // this node saw it rejoin before its report
		claim    uint64        // what its first report of a new key claims
		want     uint64        // what may be charged of it
	}{
		// It admitted its burst and the rate for 13 s; declared dead 10 s
		// in, back 3 s later. Before: allowed the first allowance and 3 s.
		{name: "declared late, rejoined", declared: 10 * time.Second, dead: 3 * time.Second, rejoined: true,
			claim: 100 + 100*13, want: 100 + 100*13},
		{name: "declared late, report before the rejoin", declared: 10 * time.Second, dead: 3 * time.Second,
			claim: 100 + 100*13, want: 100 + 100*13},
		// Silent an hour, then cut off: it may claim no more than the time
		// failure detection takes before it was declared dead, and its dead time.
		{name: "silent for an hour first", silent: time.Hour, declared: time.Second, dead: 3 * time.Second, rejoined: true,
			claim: math.MaxUint64 / 2},
		{name: "silent for an hour first, report before the rejoin", silent: time.Hour, declared: time.Second, dead: 3 * time.Second,
			claim: math.MaxUint64 / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, l, clk := newBoundSyncer()
			s.failed = map[string]failedMember{}
			s.members.Store(3)
			s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "warm", Epoch: 1, Used: 1}))
			clk.add(tt.silent + tt.declared)
			(*events)(s).NotifyLeave(&memberlist.Node{Name: "peer"})
			clk.add(tt.dead)
			if tt.rejoined {
				(*events)(s).NotifyJoin(&memberlist.Node{Name: "peer", DMax: protoStamped})
			}
			s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "split", Epoch: 1, Used: tt.claim}))
			got := l.get("r/split")
			if tt.want != 0 {
				if got != tt.want || s.stats.SuspiciousReports.Load() != 0 {
					t.Fatalf("charged %d (suspicious %d), want %d and none", got, s.stats.SuspiciousReports.Load(), tt.want)
				}
				return
			}
			limit := uint64(first + 100*(s.detectionTime()+tt.declared+tt.dead).Seconds())
			if got > limit {
				t.Fatalf("a member silent for %v before it was cut off was charged %d, more than %d (detection %v)",
					tt.silent, got, limit, s.detectionTime())
			}
		})
	}
}
