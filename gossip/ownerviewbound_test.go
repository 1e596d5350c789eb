package gossip

import (
	"math"
	"testing"
	"time"
)

// An owner's view is taken no higher than this node's own balance plus
// twice viewLead (a burst, its soft margin and a second of rate): honest
// views pass unchanged, a view above that is cut to it and its sender
// counted as suspicious.
func TestOwnerViewIsBoundedByTheOwnBalance(t *testing.T) {
	const lead = 100 + 5 + 10 // burst, soft, 1 s of rate
	tests := []struct {
		name       string
		own        float64 // this node's balance of the key
		view, want float64
		unbounded  bool // a ledger without allowances
	}{
		{"below the own balance", 80, 20, 20, false},
		{"above it within the lag", 80, 80 + 2*lead, 80 + 2*lead, false},
		{"far above it", 80, 1e300, 80 + 2*lead, false},
		{"the own balance in debt", -300, 100, -300 + 2*lead, false},
		{"not said", 80, math.NaN(), math.NaN(), false},
		{"no allowances known", 80, 1e300, 1e300, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ml := newOwnerSyncer("me", "n1", "n2", "n3")
			bl := &boundLedger{memLedger: ml, a: Allowance{Burst: 100, Soft: 5, PerSecond: 10}, lowered: map[string]float64{"k": 100 - tt.own}}
			vl := &viewLedger{memLedger: ml, views: map[string]OwnerView{}}
			s.ledger = bl
			if tt.unbounded {
				s.ledger = vl
			}
			s.mu.Lock()
			s.refreshRingLocked()
			owner, _ := s.owner.ring.owners("r", "k")
			s.mu.Unlock()
			sentCounter(s, "r", "k") // ownerunsolicited.go
			w := &answerWriter{limit: 1300, sender: owner, at: uint64(time.Now().UnixNano()), users: true}
			w.add(ownerAnswer{rule: "r", key: "k", gen: 1, users: 2, balance: tt.view})
			_, views, err := s.receiveAnswerViews(w.packets()[0])
			if err != nil {
				t.Fatal(err)
			}
			if len(views) != 1 {
				t.Fatalf("views %+v, want one", views)
			}
			got := views[0].view.Balance
			if got != tt.want && !(math.IsNaN(got) && math.IsNaN(tt.want)) {
				t.Errorf("own balance %v, view %v: took %v, want %v", tt.own, tt.view, got, tt.want)
			}
			cut := !(tt.view <= tt.want) && !math.IsNaN(tt.view) && !tt.unbounded
			if n := s.Suspicious()[owner]; (n > 0) != cut {
				t.Errorf("suspicious reports from the owner: %d, want some: %v", n, cut)
			}
		})
	}
}
