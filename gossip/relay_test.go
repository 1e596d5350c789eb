package gossip

import (
	"fmt"
	"testing"
	"time"
)

// In a relayed cluster a forged counter naming a real origin's key with a
// newer epoch (within maxEpochAhead, so it is charged) used to replace the
// real counter in the relay queue, and the real origin's later counters,
// of an older epoch, were then not queued at all while the forged entry was
// pending: members the origin did not send to never heard of them. Now
// each generation has its own entry: the real counter is relayed with its
// latest value, whatever forged epochs came between.
func TestForgedEpochsDoNotEvictRealCountersFromTheRelayQueue(t *testing.T) {
	for _, tt := range []struct {
		name   string
		forged int // forged counters, each of a newer epoch than the last
	}{
		{"one forged newer epoch", 1},
		{"a forged epoch after each real counter", 3},
		{"a stream of forged epochs", 50},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _, clk := newBoundSyncer()
			s.members.Store(100) // above FanoutLimit: receivers relay
			real := uint64(clk.now().Add(-time.Hour).UnixNano())
			forged := uint64(clk.now().Add(30 * time.Minute).UnixNano())
			used := uint64(0)
			for i := range 3 {
				s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: real, Prev: used, Used: used + 5}))
				used += 5
				for range tt.forged / 3 {
					forged++ // zero tokens: nothing to clamp
					s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: forged, Prev: 1, Used: 1}))
				}
				if i == 0 && tt.forged > 0 && tt.forged < 3 {
					forged++
					s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: forged, Prev: 1, Used: 1}))
				}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			var got []string
			found := false
			for k, p := range s.pending {
				got = append(got, fmt.Sprintf("%s/%s epoch %d used %d", k.origin, k.key, p.c.Epoch, p.c.Used))
				if k.origin == "peer" && p.c.Epoch == real && p.c.Used == used && p.c.Prev == 0 {
					found = true
				}
			}
			if !found {
				t.Fatalf("the real counter (epoch %d, 0..%d) is not queued for relay; pending: %v", real, used, got)
			}
		})
	}
}

// Forged counters flooding the relay queue crowd out only the name they
// use: made-up origins share MaxPending/relayUnknownShare entries, a real
// member's name MaxPending/relayOriginShare; another member's counters are
// still queued. (Before, the forgeries filled MaxPending and every
// origin's relays were dropped.) Entries sent often enough give their
// share back.
func TestRelayQueueIsSharedByOrigin(t *testing.T) {
	s, _, _ := newBoundSyncer() // MaxPending 100
	s.members.Store(100)        // above FanoutLimit: receivers relay
	epoch := uint64(s.clock().UnixNano())
	for i := range 60 {
		s.receive(packet(s, fmt.Sprint("made-up-", i), true, Counter{Rule: "r", Key: fmt.Sprint("k", i), Epoch: epoch, Used: 1}))
		s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: fmt.Sprint("forged-", i), Epoch: epoch + uint64(i), Used: 1}))
	}
	s.receive(packet(s, "old", true, Counter{Rule: "r", Key: "real", Epoch: epoch, Used: 1}))
	count := func() map[string]int {
		s.mu.Lock()
		defer s.mu.Unlock()
		by := map[string]int{}
		for k := range s.pending {
			if k.origin == "peer" || k.origin == "old" {
				by[k.origin]++
			} else {
				by["made-up"]++
			}
		}
		return by
	}
	by := count()
	if by["made-up"] != 100/relayUnknownShare || by["peer"] != 100/relayOriginShare || by["old"] != 1 {
		t.Fatalf("pending by origin %v, want made-up %d, peer %d, old 1", by, 100/relayUnknownShare, 100/relayOriginShare)
	}
	if got := s.stats.RelaysDropped.Load(); got != 120-uint64(100/relayUnknownShare+100/relayOriginShare) {
		t.Fatalf("%d relays dropped", got)
	}
	s.mu.Lock()
	for range 10 { // more rounds than any entry's transmits
		s.packPendingLocked(false)
	}
	empty := len(s.pending) == 0 && len(s.relay.byOrigin) == 0 && s.relay.unknown == 0
	s.mu.Unlock()
	if !empty {
		t.Fatalf("after sending: %d pending, shares %+v", len(s.pending), s.relay)
	}
	s.receive(packet(s, "made-up-new", true, Counter{Rule: "r", Key: "again", Epoch: epoch, Used: 1}))
	if by := count(); by["made-up"] != 1 {
		t.Fatalf("a share given back was not reused: %v", by)
	}
}
