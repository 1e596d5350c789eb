package gossip

import (
	"math"
	"testing"
)

// FuzzReceiveIsBounded feeds any bytes, stamped packets among them, to a
// syncer over a bounded ledger at one instant: whatever they claim, no key
// is charged more than one allowance per member the syncer knows ("peer"
// and "old") and one shared by every other name, and nothing is
// remembered for keys the ledger refuses.
func FuzzReceiveIsBounded(f *testing.F) {
	s0, _, _ := newBoundSyncer()
	for _, p := range samplePackets() {
		f.Add(p)
		f.Add(stampPacket(p, uint64(s0.clock().UnixNano())))
	}
	f.Add(packet(s0, "peer", true, Counter{Rule: "r", Key: "k", Epoch: 1, Used: math.MaxUint64},
		Counter{Rule: "r", Key: "k", Epoch: 2, Used: math.MaxUint64}, Counter{Rule: "r", Key: "k", Epoch: 1, Prev: 5, Used: math.MaxUint64}))
	for _, b := range malformedPeerBytes {
		f.Add(b)
	}
	capacity := 3 * uint64(100+100*allowanceSlack.Seconds()+1) // "peer", "old", everyone else
	f.Fuzz(func(t *testing.T, b []byte) {
		s, l, _ := newBoundSyncer()
		s.receive(b)
		s.receive(b) // and its replay
		l.mu.Lock()
		defer l.mu.Unlock()
		for k, got := range l.charged {
			if got > capacity {
				t.Fatalf("key %q charged %d, more than three allowances (%d)", k, got, capacity)
			}
		}
		for k := range s.seen {
			if k.rule != "r" || len(k.key) > 16 {
				t.Fatalf("remembered a counter the ledger refuses: %+v", k)
			}
		}
	})
}
