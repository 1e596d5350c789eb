package testcluster

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// holderTarget is a Target whose gossip is a rule: which nodes' balances a
// take on node i charges at once (hears(i, j)). It records the takes.
type holderTarget struct {
	mu      sync.Mutex
	balance []float64
	takes   []int
	hears   func(from, to int) bool
	refuse  int // a node whose takes are refused (-1: none)
}

func newHolderTarget(n int, hears func(from, to int) bool) *holderTarget {
	t := &holderTarget{balance: make([]float64, n), hears: hears, refuse: -1}
	for i := range t.balance {
		t.balance[i] = 1000
	}
	return t
}

func (t *holderTarget) Size() int { return len(t.balance) }

func (t *holderTarget) Allow(i int, rule, key string, cost int64) clientlib.Decision {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i == t.refuse {
		return clientlib.Decision{}
	}
	t.takes = append(t.takes, i)
	for j := range t.balance {
		if j == i || t.hears(i, j) {
			t.balance[j] -= float64(cost)
		}
	}
	return clientlib.Decision{Allowed: true}
}

func (t *holderTarget) Balance(i int, rule, key string) (float64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.balance[i], true
}

func (t *holderTarget) Close() error { return nil }

// HolderProbeLag converges only when every other holder reflects every
// holder's tokens, spreads its holders over the cluster as the simulator
// does (sim/holders.go), and says whether the measured token was taken.
func TestHolderProbeLag(t *testing.T) {
	everyone := func(from, to int) bool { return true }
	for _, tc := range []struct {
		name          string
		n, holders    int
		hears         func(from, to int) bool
		refuse        int
		takes         []int // the nodes that took, in order
		started, conv bool
	}{
		{name: "every holder hears every take", n: 10, holders: 5, hears: everyone, refuse: -1,
			takes: []int{3, 5, 7, 9, 1, 3}, started: true, conv: true},
		{name: "fewer nodes than holders: all hold", n: 3, holders: 5, hears: everyone, refuse: -1,
			takes: []int{1, 2, 0, 1}, started: true, conv: true},
		// Owner mode without holders: a take reaches nobody else.
		{name: "no holder hears the others", n: 10, holders: 5, hears: func(from, to int) bool { return false }, refuse: -1,
			takes: []int{3, 5, 7, 9, 1, 3}, started: true, conv: false},
		// One holder misses another's first token: it reflects the measured
		// one but not all it must.
		{name: "a holder misses one holder's token", n: 10, holders: 5, hears: func(from, to int) bool { return !(from == 5 && to == 9) }, refuse: -1,
			takes: []int{3, 5, 7, 9, 1, 3}, started: true, conv: false},
		{name: "the prober is refused", n: 10, holders: 5, hears: everyone, refuse: 3,
			takes: []int{5, 7, 9, 1}, started: false, conv: false},
		{name: "one node: no two holders", n: 1, holders: 5, hears: everyone, refuse: -1,
			takes: []int{0}, started: false, conv: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := newHolderTarget(tc.n, tc.hears)
			tg.refuse = tc.refuse
			from := 3 % tc.n
			if tc.n == 3 {
				from = 1
			}
			_, started, ok := HolderProbeLag(context.Background(), tg, from, tc.holders, "probe", "k", 0, 0, 50*time.Millisecond)
			if started != tc.started || ok != tc.conv {
				t.Errorf("started %v, converged %v; want %v, %v (balances %v)", started, ok, tc.started, tc.conv, tg.balance)
			}
			if !slices.Equal(tg.takes, tc.takes) {
				t.Errorf("takes on nodes %v, want %v", tg.takes, tc.takes)
			}
		})
	}
}

// ProbeLag, the default probe, never converges where only holders hear of
// a key (owner mode): why Watch needs ProbeHolders there.
func TestProbeLagNeedsEveryNodeToHear(t *testing.T) {
	holders := map[int]bool{3: true, 5: true, 7: true, 9: true, 1: true}
	tg := newHolderTarget(10, func(from, to int) bool { return holders[to] })
	if _, ok := ProbeLag(context.Background(), tg, 3, "probe", "k", 50*time.Millisecond); ok {
		t.Fatal("ProbeLag converged though five nodes never heard")
	}
	tg = newHolderTarget(10, func(from, to int) bool { return holders[to] })
	if _, started, ok := HolderProbeLag(context.Background(), tg, 3, 5, "probe", "k", 0, 0, 50*time.Millisecond); !started || !ok {
		t.Fatalf("HolderProbeLag: started %v, converged %v; want both (balances %v)", started, ok, tg.balance)
	}
}
