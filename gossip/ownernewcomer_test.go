package gossip

import (
	"testing"
	"time"
)

// A contributor new to an established aggregate is charged every token the
// others consumed but those wholly refilled at the owner since: the debt's
// fraction is a token still owed. Truncated, a newcomer to a slowly
// refilling key was never charged one of the tokens the others took when
// the owner's bucket had refilled a hair (TestProcsOwnerModeConverges: "c5
// shows every node's first token" timed out, about 1 run in 8 on a loaded
// machine); rounded, the same when it had refilled more than half a token
// (a newcomer late by 1.8 s at 1000/h: TestOwnerModeConverges/nodes=50 on
// a loaded machine split into balances exactly one token apart).
func TestNewcomerIsToldTheWholeDebt(t *testing.T) {
	tests := []struct {
		name     string
		charged  float64 // the owner's balance lies this far below full
		wantPrev uint64  // of the 3 tokens the others took
	}{
		{"a whole debt", 3, 0},
		{"a hair refilled", 3 - 0.001, 0},
		{"most of a token refilled", 3 - 0.6, 0},
		{"float noise above a whole debt", 3 + 1e-9, 0},
		{"a whole token refilled", 2, 1},
		{"a token and a half refilled", 3 - 1.5, 1},
		{"all refilled", 0, 3},
		{"more debt than the aggregate holds", 50, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ml := newOwnerSyncer("o", "a", "b")
			bl := &boundLedger{memLedger: ml, a: Allowance{Burst: 100000, PerSecond: 10.0 / 3600}, lowered: map[string]float64{"k": tt.charged}}
			s.ledger = bl
			now := time.Now()
			s.now = func() time.Time { return now }
			s.born = now
			c := Counter{Rule: "r", Key: "k", Epoch: 1, Used: 3}
			s.mu.Lock()
			s.aggregateLocked(false, Allowance{}, "a", c, s.sinceBorn(), s.sinceBorn())
			now = now.Add(10 * freshAggregate * s.cfg.GossipInterval) // the aggregate is established
			o := s.owner.mine[aggKey{"r", "k", 0}]
			sub := s.subFor(o, "b", Counter{Rule: "r", Key: "k", Epoch: 1, Used: 1})
			s.mu.Unlock()
			if sub.first != tt.wantPrev {
				t.Fatalf("balance %v below full, the others took 3: the newcomer's prev is %d, want %d", tt.charged, sub.first, tt.wantPrev)
			}
		})
	}
}
