package gossip

import (
	"testing"

	"github.com/hashicorp/memberlist"
)

// The start of a node's own counter travels in redundancy consecutive
// rounds, and every later packet carries all above: a receiver that loses
// fewer than redundancy packets in a row, the first ones included, charges
// every token once; only the last packet before the key goes idle is sent
// once (a push-pull, or the key's next use, repairs it).
func TestOwnCountersCarryEachIncrementInSeveralRounds(t *testing.T) {
	tests := []struct {
		name string
		lost []int // rounds whose packet is lost
		want uint64
	}{
		{name: "nothing lost", want: 60},
		{name: "the first packet lost", lost: []int{0}, want: 60},
		{name: "the first three lost", lost: []int{0, 1, 2}, want: 60},
		{name: "every other lost", lost: []int{0, 2, 4, 6}, want: 60},
		{name: "three in a row midway", lost: []int{2, 3, 4}, want: 60},
		// Four in a row from the start: the first four rounds are lost to
		// this receiver until a push-pull explains them (it asks for one,
		// see repair.go).
		{name: "the first four lost", lost: []int{0, 1, 2, 3}, want: 60 - 40},
		{name: "the last lost", lost: []int{5}, want: 60 - 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx, _, clk := newBoundSyncer()
			rx, l, _ := newBoundSyncer()
			rx.self = "rx"
			rx.peers["me"] = memberlist.Node{Name: "me", DMax: protoStamped}
			lost := map[int]bool{}
			for _, r := range tt.lost {
				lost[r] = true
			}
			used := uint64(0)
			for round := range 6 + redundancy {
				tx.mu.Lock()
				if round < 6 { // six rounds of 10 tokens, then idle
					c := Counter{Rule: "r", Key: "k", Epoch: 1, Prev: used, Used: used + 10}
					tx.queueLocked("me", c, ownTransmits(c, 1))
					used += 10
				}
				packets, _ := tx.packPendingLocked(true)
				tx.mu.Unlock()
				clk.add(tx.cfg.GossipInterval + 20e6)
				for _, p := range packets {
					if !lost[round] {
						rx.receive(stampPacket(p, uint64(rx.clock().UnixNano())))
					}
				}
			}
			if got := l.get("r/k"); got != tt.want {
				t.Fatalf("charged %d of 60 admitted, want %d", got, tt.want)
			}
			if len(tx.pending) != 0 {
				t.Fatalf("%d counters still pending after the key went idle for %d rounds", len(tx.pending), redundancy)
			}
		})
	}
}

// The first counter of an epoch goes out redundancy times, a later one
// once, then each leaves the queue: the extra is redundancy−1 entries per
// new epoch or window of a key.
func TestOnlyACountersStartIsSentSeveralTimes(t *testing.T) {
	tests := []struct {
		name string
		prev uint64
		want int
	}{
		{"the first counter of an epoch", 0, redundancy},
		{"a later counter", 5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, _ := newBoundSyncer()
			s.mu.Lock()
			defer s.mu.Unlock()
			c := Counter{Rule: "r", Key: "k", Epoch: 1, Prev: tt.prev, Used: tt.prev + 5}
			s.queueLocked(s.self, c, ownTransmits(c, 1))
			sent := 0
			for range 2 * redundancy {
				_, counts := s.packPendingLocked(true)
				for _, n := range counts {
					sent += n
				}
			}
			if sent != tt.want {
				t.Fatalf("sent %d times, want %d", sent, tt.want)
			}
		})
	}
}
