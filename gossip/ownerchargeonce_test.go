package gossip

import (
	"testing"
	"time"
)

// An owner late by more than ownerFailover rounds makes its contributors
// fail over to the replica; when its answers come again, every node has
// been charged what the others consumed once, not the failover's share
// twice (the replica's answers, or the replica's own aggregate, and then
// the owner's). Before the fix, with the owner 100 rounds late, each of
// the five nodes but the owner was charged 903 tokens for the others' 600.
func TestLateOwnerFailoverChargesOnce(t *testing.T) {
	for _, tt := range []struct {
		name       string
		late       int // rounds the owner's packets are held
		consumeFor int // rounds the nodes consume
	}{
		{"late-40-rounds", 40, 100},
		{"late-100-rounds", 100, 150},
		{"late-just-over-failover", ownerFailover + 4, 60},
		{"late-twice", 40, 160}, // a second failover after the first ended
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newFailoverNet(t, "o", "r", "x", "y", "z")
			n.key = n.keyOwnedBy("o", "r")
			failedOver := 0
			for i := range tt.consumeFor {
				slow := ""
				late := i >= 10 && i < 10+tt.late || tt.name == "late-twice" && i >= 100 && i < 100+tt.late
				if late {
					slow = "o"
				}
				if !late && len(n.held) > 0 {
					n.release()
				}
				n.round(slow, n.names...)
				if _, ok := n.nodes["x"].owner.failover[[2]string{"api", n.key}]; ok && late {
					failedOver++
				}
			}
			n.release()
			if failedOver == 0 {
				t.Fatalf("x never failed over with the owner %d rounds late: the test does not test the failover", tt.late)
			}
			for _, c := range n.settledCharges(t) {
				name, got, others := c.name, c.charged, c.others
				// Never less (a node charged less admits above the limit),
				// and more by at most a round of the others' consumption
				// (a fresh aggregate's first answers may carry what the
				// owner had answered already).
				if got < others || got > others+uint64(len(n.names)-1) {
					t.Errorf("%s charged %d for the %d tokens the others consumed; want %d to %d", name, got, others, others, others+uint64(len(n.names)-1))
				}
			}
		})
	}
}

// chargeOnceLocked charges, from the first answer after this node failed a
// key over, the larger of what the owner's and the replica's answers
// carry, each sender summed under its own name; a ring that names others,
// or a replica silent a subscription's TTL, ends it, and the node's next
// failover starts it anew, keeping only what the replica told above the
// owner (ownerchargelate.go). Without a failover the
// replica is an earlier owner (a membership change) whose aggregate holds
// other consumption: both are charged whole.
func TestChargeOnceLocked(t *testing.T) {
	type answer struct {
		sender         string
		owner, replica string // on the ring now
		tokens, want   uint64
		after          time.Duration // since the previous answer
		refail         bool          // this node's failover begins anew before the answer
	}
	tests := []struct {
		name      string
		answers   []answer
		pairs     int  // left at the end
		notFailed bool // this node did not fail over the key
	}{
		{"membership change, no failover: both whole", []answer{
			{"o", "o", "r", 5, 5, 0, false}, {"r", "o", "r", 4, 4, 0, false}, {"o", "o", "r", 6, 6, 0, false}}, 0, true},
		{"failed over, only the owner answers: its whole", []answer{
			{"o", "o", "r", 5, 5, 0, false}, {"o", "o", "r", 7, 7, 0, false}}, 1, false},
		{"late owner: its answer covers the replica's", []answer{
			{"r", "o", "r", 4, 4, 0, false}, {"r", "o", "r", 6, 6, 0, false}, {"o", "o", "r", 12, 2, 0, false}, {"o", "o", "r", 3, 3, 0, false}}, 1, false},
		{"the owner's answers since the failover began cover the replica's", []answer{
			{"o", "o", "r", 5, 5, 0, false}, {"r", "o", "r", 4, 0, 0, false}, {"r", "o", "r", 6, 5, 0, false}, {"o", "o", "r", 12, 7, 0, false}, {"o", "o", "r", 3, 3, 0, false}}, 1, false},
		{"the replica's first answer after the owner's, late: covered", []answer{
			{"o", "o", "r", 9, 9, 0, false}, {"o", "o", "r", 3, 3, 2 * time.Second, false}, {"r", "o", "r", 7, 0, 0, false}}, 1, false},
		{"a new failover: the replica's answers at once, the owner's lead forgotten", []answer{
			{"r", "o", "r", 4, 4, 0, false}, {"o", "o", "r", 10, 6, 0, false}, {"r", "o", "r", 3, 3, 0, true}, {"o", "o", "r", 2, 0, 0, false}, {"o", "o", "r", 4, 3, 0, false}}, 1, false},
		{"a new failover: what the replica told above the owner stays told", []answer{
			{"r", "o", "r", 9, 9, 0, false}, {"o", "o", "r", 6, 0, 0, false}, {"o", "o", "r", 5, 2, 0, true}}, 1, false},
		{"owner first, replica's late answer covered", []answer{
			{"r", "o", "r", 2, 2, 0, false}, {"o", "o", "r", 9, 7, 0, false}, {"r", "o", "r", 5, 0, 0, false}, {"r", "o", "r", 4, 2, 0, false}}, 1, false},
		{"dead owner: the replica's whole, also as owner", []answer{
			{"r", "o", "r", 4, 4, 0, false}, {"r", "o", "r", 6, 6, 0, false}, {"r", "r", "x", 3, 3, 0, false}}, 0, false},
		{"replica quiet an active TTL, owner caught up: kept (it may still answer)", []answer{
			{"r", "o", "r", 4, 4, 0, false}, {"o", "o", "r", 6, 2, 3 * time.Second, false}, {"r", "o", "r", 1, 0, 0, false}, {"o", "o", "r", 5, 5, 0, false}}, 1, false},
		{"replica quiet, owner not caught up: kept", []answer{
			{"r", "o", "r", 9, 9, 0, false}, {"o", "o", "r", 6, 0, 3 * time.Second, false}}, 1, false},
		{"replica silent a subscription's TTL: ends", []answer{
			{"r", "o", "r", 9, 9, 0, false}, {"o", "o", "r", 6, 0, 11 * time.Second, false}, {"o", "o", "r", 5, 5, 0, false}}, 1, false},
		{"no ring for a moment: kept", []answer{
			{"r", "o", "r", 4, 4, 0, false}, {"r", "", "", 3, 3, 0, false}, {"o", "o", "r", 9, 2, 0, false}}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newOwnerSyncer("me", "o", "r", "x")
			s.mu.Lock()
			defer s.mu.Unlock()
			k := aggKey{"api", "k", 0}
			if !tt.notFailed {
				s.owner.failover = map[[2]string]failover{{"api", "k"}: {at: 1, owner: "o"}}
			}
			now := time.Second
			for i, a := range tt.answers {
				now += a.after
				if a.refail {
					s.owner.failover[[2]string{"api", "k"}] = failover{at: uint64(10 + i), owner: "o"}
				}
				if got := s.chargeOnceLocked(k, a.sender, a.owner, a.replica, a.tokens, now, now); got != a.want {
					t.Fatalf("answer %d (%+v): charged %d, want %d", i, a, got, a.want)
				}
			}
			if len(s.owner.pairs.m) != tt.pairs {
				t.Fatalf("%d pairs left, want %d", len(s.owner.pairs.m), tt.pairs)
			}
		})
	}
}

// On the key's replica, its own aggregate's charges are paired with the
// owner's answers once the owner has answered it nothing for half the
// failover's rounds (by when the answers were sent, where noted) (its own counters may fail over later, or never);
// while the owner answers it, the replica's aggregate is an earlier
// owner's after a membership change, charged whole.
func TestReplicaPairsItsAggregateWhenTheOwnerIsLate(t *testing.T) {
	tests := []struct {
		name     string
		heardAgo time.Duration // the owner's last answer to this node; negative: none
		sentAgo  time.Duration // when that answer was sent; 0: not noted
		failed   bool          // this node failed the key over
		want     bool
	}{
		{"owner answered lately", 20 * time.Millisecond, 0, false, false},
		{"owner silent half a failover", ownerFailover / 2 * 20 * time.Millisecond, 0, false, true},
		{"never answered", -1, 0, false, false},
		{"failed over itself", 20 * time.Millisecond, 0, true, true},
		{"owner's answer arrived lately, sent half a failover ago", 20 * time.Millisecond, ownerFailover / 2 * 20 * time.Millisecond, false, true},
		{"owner's answer arrived lately, sent lately", 20 * time.Millisecond, 40 * time.Millisecond, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newOwnerSyncer("me", "o", "x")
			s.cfg.GossipInterval = 20 * time.Millisecond
			s.mu.Lock()
			defer s.mu.Unlock()
			k := aggKey{"api", "k", 0}
			now := 10 * time.Second
			if tt.heardAgo >= 0 {
				s.owner.heard = map[aggKey]*heardKey{k: {slots: [2]heardSlot{{owner: "o", gen: 1, at: now - tt.heardAgo}}}}
				if tt.sentAgo > 0 {
					s.owner.heard[k].slots[0].sent = now - tt.sentAgo
				}
			}
			if tt.failed {
				s.owner.failover = map[[2]string]failover{{"api", "k"}: {at: 1, owner: "o"}}
			}
			if got := s.ownerLateLocked(k, "me", "o", now); got != tt.want {
				t.Fatalf("late %v, want %v", got, tt.want)
			}
			s.chargeOnceLocked(k, "me", "o", "me", 5, now, now)
			if paired := len(s.owner.pairs.m) == 1; paired != tt.want {
				t.Fatalf("paired %v, want %v", paired, tt.want)
			}
		})
	}
}
