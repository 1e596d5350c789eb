package gossip

import (
	"fmt"
	"testing"
	"time"
)

// A debt learnt by the key's replica or third pairs with the owner's
// answers as its aggregate's counting does (ownerlearnpair.go): nothing of
// it where the owner's answers since the failover already charged more,
// what lifts the larger account where they did not, and all of it on the
// owner, or on a replica with no account (it never used the key). Before
// the fix every row charged the debt whole.
func TestLearntDebtChargesThroughThePair(t *testing.T) {
	names := []string{"me", "o", "r", "x", "y"}
	ring := newOwnerRing(names)
	keyOf := func(owner, replica, third string) string {
		for i := range 100000 {
			k := fmt.Sprint("k", i)
			if o, r := ring.owners("api", k); o == owner && r == replica && (third == "" || ring.third("api", k) == third) {
				return k
			}
		}
		t.Fatalf("no key chained by %s, %s, %s", owner, replica, third)
		return ""
	}
	tests := []struct {
		name                  string
		owner, replica, third string      // of the key on the ring
		pair                  *chargePair // this node's account of the key, nil: none
		failover              uint64      // this node's failover of the key began in this round, plus one; 0: none
		debt, want            uint64
	}{
		{"the owner: whole", "me", "r", "", &chargePair{a: "me", b: "r", sumA: 0, sumB: 50}, 0, 14, 14},
		{"the replica, no account (the owner not late): whole", "o", "me", "", nil, 0, 14, 14},
		{"the replica, the owner's answers above its account: nothing", "o", "me", "", &chargePair{a: "o", b: "me", sumA: 20, sumB: 5}, 0, 10, 0},
		{"the replica, its account lifted above the owner's: the excess", "o", "me", "", &chargePair{a: "o", b: "me", sumA: 20, sumB: 5}, 0, 30, 15},
		{"the third in its failover, the owner's answers above: nothing", "o", "r", "me", &chargePair{a: "o", b: "r", sumA: 118, sumB: 36, failover: 163}, 163, 14, 0},
		{"the third in its failover, the owner's answers below: the excess", "o", "r", "me", &chargePair{a: "o", b: "r", sumA: 40, sumB: 36, failover: 163}, 163, 14, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newOwnerSyncer("me", names[1:]...)
			at := time.Unix(1_700_000_000, 0)
			s.now, s.born = func() time.Time { return at }, at.Add(-2*time.Second)
			s.owner.ring = ring
			key := keyOf(tt.owner, tt.replica, tt.third)
			k := aggKey{"api", key, 0}
			if tt.pair != nil {
				p := *tt.pair
				p.lastB = s.sinceBorn()
				s.owner.pairs.m = map[aggKey]*chargePair{k: &p}
			}
			if tt.failover != 0 {
				s.owner.failover = map[[2]string]failover{{"api", key}: {at: tt.failover - 1, owner: tt.owner}}
			}
			if got := s.learntCharge(learnt{k: k, full: 100, debt: float64(tt.debt), at: s.sinceBorn()}, tt.debt); got != tt.want {
				t.Fatalf("charged %d of a debt of %d learnt, want %d", got, tt.debt, tt.want)
			}
		})
	}
}

// The starved net of TestStarvedOwnerLearnsTheDebtOnce, on a key whose
// third is one of its nodes: the replica's aggregate (made at each
// failover) and the third's (made when the others fail over to it) are
// young while the owner still answers, and learn the key's debt from
// contributors that handled the owner's answers first. Before the fix the
// third charged 14, 60 and 4 tokens above what the others consumed (seeds
// 1, 37, 31) and the replica 1-3 in 6 of 40 seeds, each the debt it
// learnt; now both are charged exactly what the others consumed.
func TestReplicaAndThirdLearnTheDebtOnce(t *testing.T) {
	names := []string{"o", "r", "x", "y", "z", "u", "v", "w", "p", "q"}
	for seed := range uint64(40) {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			n := newFailoverNet(t, names...).withSends(1 << 30)
			n.key = n.keyChainedBy("o", "r", "q")
			n.starveWithLimits(seed, 0.04, 40)
			for _, c := range n.settledCharges(t) {
				if (c.name == "r" || c.name == "q") && c.charged != c.others {
					t.Errorf("%s charged %d for the %d tokens the others consumed", c.name, c.charged, c.others)
				}
			}
		})
	}
}
