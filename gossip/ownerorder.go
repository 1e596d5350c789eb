package gossip

import (
	"cmp"
	"iter"
	"slices"
	"strings"
)

// The order an owner answers a key's contributors in. Within its answer
// budget (ownerAnswerBudget) an owner answers every contributor that needs
// it each round, in any order. Beyond, the rest wait for the next rounds;
// taken in map order, a contributor's wait was geometric: with 10,000
// users of one key and a budget of 512 a round, one in five was still
// unanswered after 30 rounds, past its first-contact hold (which allows
// users/512 rounds for the answers), and admitted on its own full bucket
// (simulated, 10,000 nodes at 20 req/s: ~650 tokens in 200 ms after the
// holds ended). So when a key's contributors outnumber what is left of the
// budget, the longest unanswered come first: each is answered within
// about users/budget rounds.

// answerOrderLocked yields the contributors subs of an aggregate in the
// order their answers are due, budget being what is left of the round's
// answer budget: as inOrder when all fit (or none does), else the longest unanswered
// first (ties by name). The caller may delete the entry it is given.
// Caller holds s.mu.
func (s *Syncer) answerOrderLocked(subs map[string]*ownerSub, budget int) iter.Seq2[string, *ownerSub] {
	if len(subs) <= budget || budget == 0 { // all answered, or none
		return inOrder(s.simRand(), subs, compareNames)
	}
	type entry struct {
		name string
		sub  *ownerSub
	}
	order := make([]entry, 0, len(subs))
	for name, sub := range subs {
		order = append(order, entry{name, sub})
	}
	slices.SortFunc(order, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.sub.answered, b.sub.answered), strings.Compare(a.name, b.name))
	})
	return func(yield func(string, *ownerSub) bool) {
		for _, e := range order {
			if !yield(e.name, e.sub) {
				return
			}
		}
	}
}
