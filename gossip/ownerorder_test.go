package gossip

import (
	"strconv"
	"testing"
	"time"
)

// Beyond its answer budget an owner answers the contributors it left
// waiting longest first: with every contributor needing an answer every
// round, each is answered within ceil(contributors/budget) rounds of the
// last time, never left for a round more.
func TestOwnerAnswersTheLongestWaitingFirst(t *testing.T) {
	members := make([]string, 2*ownerAnswerBudget+10) // 3 rounds' worth
	for i := range members {
		members[i] = "n" + strconv.Itoa(i)
	}
	s, _ := newOwnerSyncer("o", members...)
	s.cfg.MaxSeen = 1 << 20
	s.mu.Lock()
	defer s.mu.Unlock()
	const rounds = 12
	last := map[string]int{}
	for round := range rounds {
		now := time.Second + time.Duration(round)*s.cfg.GossipInterval
		for _, m := range members { // every contributor admits again: each needs an answer
			s.aggregateLocked(false, Allowance{}, m, Counter{Rule: "api", Key: "hot", Epoch: 1, Prev: uint64(round), Used: uint64(round + 1)}, now, now)
		}
		for _, o := range s.answersLocked(now, uint64(round)) {
			m := o.to.Name
			if prev, ok := last[m]; ok && round-prev > 3 {
				t.Fatalf("%s answered in rounds %d and %d: left waiting %d rounds", m, prev, round, round-prev)
			}
			last[m] = round
		}
		for _, m := range members {
			if prev, ok := last[m]; (!ok && round >= 3) || (ok && round-prev >= 3) {
				t.Fatalf("round %d: %s not answered for 3 rounds (last %d, answered: %v)", round, m, prev, ok)
			}
		}
	}
}
