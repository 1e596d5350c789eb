package gossip

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// bucketLedger is a memLedger with one token bucket per node for the
// failover net's key, as a daemon's: it refills at the allowance's rate on
// the net's clock up to its burst, every charge and every token this node
// takes comes off it, and its balance is what the syncer reads
// (newcomerPrevLocked's debt, the allowances). A node takes a token only
// when its bucket holds one, as a daemon admits.
type bucketLedger struct {
	*memLedger
	a     Allowance
	clock func() time.Time
	mu    sync.Mutex
	level float64
	at    time.Time
}

func newBucketLedger(ml *memLedger, a Allowance, clock func() time.Time) *bucketLedger {
	return &bucketLedger{memLedger: ml, a: a, clock: clock, level: a.Burst, at: clock()}
}

// refillLocked brings the bucket to the clock. Caller holds l.mu.
func (l *bucketLedger) refillLocked() {
	now := l.clock()
	l.level = min(l.a.Burst, l.level+l.a.PerSecond*now.Sub(l.at).Seconds())
	l.at = now
}

func (l *bucketLedger) Allowance(rule, key string) (Allowance, bool) { return l.a, rule == "api" }

func (l *bucketLedger) Balance(rule, key string) (float64, Counter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refillLocked()
	return l.level, Counter{}
}

func (l *bucketLedger) Charge(rule, key string, window, tokens uint64) {
	l.memLedger.Charge(rule, key, window, tokens)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refillLocked()
	l.level -= float64(tokens)
}

// take takes a token if the bucket holds one.
func (l *bucketLedger) take() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refillLocked()
	if l.level < 1 {
		return false
	}
	l.level--
	return true
}

// withBuckets gives every node of the net a bucketLedger of a.
func (n *failoverNet) withBuckets(a Allowance) map[string]*bucketLedger {
	out := map[string]*bucketLedger{}
	for name, s := range n.nodes {
		l := newBucketLedger(n.ledgers[name], a, func() time.Time { return n.now })
		s.ledger, out[name] = l, l
	}
	return out
}

// consumeWhereAllowed makes every node not stalled take a token of the
// key if its bucket holds one.
func (n *failoverNet) consumeWhereAllowed(round int, until map[string]int, buckets map[string]*bucketLedger) {
	for _, c := range n.names {
		if until[c] > round || !buckets[c].take() {
			continue
		}
		n.used[c]++
		n.ledgers[c].add(Counter{Rule: "api", Key: n.key, Epoch: 1, Used: n.used[c], Prev: n.used[c] - 1})
	}
}

// A starved cluster whose nodes hold the real test's limit (burst 100,
// 100/s) in buckets that refill, the load above it (every node takes a
// token each round its bucket holds one), stalled at random from their
// tenth round (5-44 rounds, 4% of rounds), while the owner's aggregate is
// still young and learns the key's debt from its contributors' heard
// messages (ownerlearn.go): every node is charged what the others consumed.
// Before the fix, the stalled owner took a debt reported hundreds of
// milliseconds before as the debt now, and was charged the refill since:
// 18-48 tokens above the others' ~1,280 in 3 of 12 seeds
// (ownerlearnstale.go).
func TestStarvedOwnerLearnsTheDebtOnce(t *testing.T) {
	names := []string{"o", "r", "x", "y", "z", "u", "v", "w", "p", "q"}
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			n := newFailoverNet(t, names...).withSends(1 << 30)
			n.key = n.keyOwnedBy("o", "r")
			if stalled := n.starveWithLimits(seed, 0.04, 40); stalled["o"] == 0 {
				t.Skip("the owner was not stalled while its aggregate learns: nothing to test in this seed")
			}
			for _, c := range n.settledCharges(t) {
				if c.charged < c.others || c.charged > c.others+uint64(len(names)-1) {
					t.Errorf("%s charged %d for the %d tokens the others consumed; want %d to %d", c.name, c.charged, c.others, c.others, c.others+uint64(len(names)-1))
				}
			}
		})
	}
}

// starveWithLimits gives the net's nodes buckets of the real test's limit
// (burst 100, 100/s) and runs 700 rounds in which every node takes a token
// whenever its bucket holds one and is not stalled: from the tenth round to
// the 500th, a node not stalled stalls with probability p a round, for 5
// to 4+longest rounds (starveRound). It returns, by node, the stalls that
// began while the owner's aggregate was young (ownerLearnFor).
func (n *failoverNet) starveWithLimits(seed uint64, p float64, longest int) map[string]int {
	buckets := n.withBuckets(Allowance{Burst: 100, PerSecond: 100})
	rng := rand.New(rand.NewPCG(seed, 9))
	until, inbox := map[string]int{}, map[string][][]byte{}
	early := map[string]int{}
	for i := range 600 {
		for _, w := range n.names {
			if i >= 10 && i < 500 && until[w] <= i && rng.Float64() < p {
				until[w] = i + 5 + rng.IntN(longest)
				if i < ownerLearnFor {
					early[w]++
				}
			}
		}
		n.consumeWhereAllowed(i, until, buckets)
		n.starveRound(i, until, inbox)
	}
	for i := 600; i < 700; i++ {
		n.starveRound(i, until, inbox)
	}
	return early
}
