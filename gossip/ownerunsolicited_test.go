package gossip

import (
	"fmt"
	"testing"
)

// sentCounter has s note (as its round does, ownSendLocked) that it sent
// its own counter of (rule, key): the receiver's side of a subscription
// whose answers a test then delivers (tests).
func sentCounter(s *Syncer, rule, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ownSendLocked(Counter{Rule: rule, Key: key, Epoch: 5, Used: 1}, true)
}

// An owner's answers and aggregation notices about keys this node never
// used, counted nor aggregated are refused and allocate nothing (no heard
// entry, no routing entry, no charge: no bucket in a real ledger); about a
// key it sent a counter for, or holds a pending counter of, they are taken
// as before. Heard messages about keys it holds no aggregate of touch
// nothing either (so before this change too). On the code before
// ownerunsolicited.go the "never used" rows charge, hold a heard or hot
// entry, and count no refusal.
func TestUnsolicitedAnswersAllocateNothing(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(s *Syncer, key string)
		send    func(t *testing.T, s *Syncer, owner, key string) uint64 // tokens charged
		taken   bool
		refused uint64 // counted in AnswersRefused
	}{
		{"answer, key never used", nil, sendAnswer, false, 1},
		{"answer, own counter sent", func(s *Syncer, key string) { sentCounter(s, "api", key) }, sendAnswer, true, 0},
		{"answer, own counter pending", func(s *Syncer, key string) {
			s.pending[pendingKey{counterKey{s.self, "api", key}, 0, 5}] = &pendingCounter{c: Counter{Rule: "api", Key: key, Epoch: 5, Used: 3}, transmits: 3}
		}, sendAnswer, true, 0},
		{"notice, key never used", nil, sendNotice, false, 1},
		{"notice, own counter sent", func(s *Syncer, key string) { sentCounter(s, "api", key) }, sendNotice, true, 0},
		{"heard, no aggregate here", nil, sendHeard, false, 0}, // not an answer: ignored, as before
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clock := newClockedAggSyncer(20)
			l := s.ledger.(*memLedger)
			s.mu.Lock()
			owner, key := "", ""
			for i := range 1000 {
				if o, r := s.owner.ring.owners("api", fmt.Sprint("ghost-", i)); o != s.self && r != s.self {
					owner, key = o, fmt.Sprint("ghost-", i)
					break
				}
			}
			s.mu.Unlock()
			if tt.prepare != nil {
				tt.prepare(s, key)
			}
			*clock = clock.Add(s.cfg.GossipInterval)
			got := tt.send(t, s, owner, key)
			s.mu.Lock()
			defer s.mu.Unlock()
			k := aggKey{"api", key, 0}
			held := s.owner.heard[k] != nil || s.owner.agg.hot[[2]string{"api", key}] != nil || s.owner.mine[k] != nil
			refused := s.ownerRefused.Load()
			l.mu.Lock()
			charged := l.charged["api/"+key]
			l.mu.Unlock()
			if held != tt.taken {
				t.Fatalf("held state of the key %v, want %v (charged %d)", held, tt.taken, got)
			}
			if refused != tt.refused {
				t.Fatalf("refused %d, want %d", refused, tt.refused)
			}
			if !tt.taken && (got != 0 || charged != 0) {
				t.Fatalf("unsolicited message charged %d (ledger %d)", got, charged)
			}
		})
	}
}

// sendAnswer delivers owner's answer about key (others 40) to s.
func sendAnswer(t *testing.T, s *Syncer, owner, key string) uint64 {
	t.Helper()
	tokens := answerCharged(t, s, owner, s.now(), ownerAnswer{rule: "api", key: key, gen: 3, others: 40, ackEpoch: 5, ackUsed: 1})
	s.charge([]charge{{"api", key, 0, tokens}})
	return tokens
}

// sendNotice delivers owner's aggregation notice about key to s.
func sendNotice(t *testing.T, s *Syncer, owner, key string) uint64 {
	t.Helper()
	nw := &noticeWriter{limit: 1400, sender: owner, at: uint64(s.now().UnixNano())}
	nw.add(aggNotice{rule: "api", key: key, total: 40, gen: 3, contrib: 1, ackEpoch: 5, ackUsed: 1})
	if err := s.receiveNotice(nw.packets()[0]); err != nil {
		t.Fatalf("receiving the notice: %v", err)
	}
	return 0
}

// sendHeard delivers a heard message about key from owner (as any member)
// to s.
func sendHeard(t *testing.T, s *Syncer, from, key string) uint64 {
	t.Helper()
	w := &heardWriter{limit: 1400, sender: from, at: uint64(s.now().UnixNano())}
	w.add(heardAck{rule: "api", key: key, gen: 3, start: 0, last: 40, debt: 90})
	if err := s.receiveHeard(w.packets()[0]); err != nil {
		t.Fatalf("receiving the heard message: %v", err)
	}
	return 0
}
