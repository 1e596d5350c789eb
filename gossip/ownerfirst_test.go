package gossip

import (
	"fmt"
	"testing"
	"time"
)

// A receiver that lost a subscription's first answer is charged what it
// carried by the next ones (they carry the subscription's first prev), a
// receiver that heard every answer is charged each token once, and after
// ownerFirstAnswers answers prev is the last others told again.
func TestLostFirstAnswerIsChargedByTheNext(t *testing.T) {
	o, _ := newOwnerSyncer("o", "a", "b")
	key := ""
	for i := range 100 {
		k := fmt.Sprint("k", i)
		if owner, replica := newOwnerRing([]string{"o", "a", "b"}).owners("api", k); owner == "o" || replica == "o" {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no key that o owns or replicates")
	}
	stamp := uint64(time.Now().UnixNano())
	// round contributes a's used (cumulative) and b's, then returns the
	// answer o sends b this round.
	round := func(aUsed, bUsed uint64) []byte {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.aggregateLocked(false, Allowance{}, "a", Counter{Rule: "api", Key: key, Epoch: 1, Used: aUsed}, time.Second, time.Second)
		o.aggregateLocked(false, Allowance{}, "b", Counter{Rule: "api", Key: key, Epoch: 1, Used: bUsed}, time.Second, time.Second)
		stamp++
		for _, out := range o.answersLocked(time.Second, stamp) {
			if out.to.Name == "b" {
				return out.packets[0]
			}
		}
		t.Fatal("no answer to b")
		return nil
	}
	var answers [][]byte
	for i := range ownerFirstAnswers + 2 {
		answers = append(answers, round(uint64(30+15*i), uint64(1+i)))
	}
	// a's total after each round: 30, 45, 60, 75, 90, 105.
	tests := []struct {
		name  string
		heard []int // which answers reach the receiver
		want  uint64
	}{
		{"every answer", []int{0, 1, 2, 3, 4, 5}, 105},
		{"the first lost", []int{1, 2, 3, 4, 5}, 105},
		{"the first three lost", []int{3, 4, 5}, 105},
		{"every early one lost", []int{4, 5}, 105 - 75}, // only what came after the early answers
		{"only the second", []int{1}, 45},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, l := newOwnerSyncer("b", "o", "a")
			b.mu.Lock()
			b.refreshRingLocked()
			b.mu.Unlock()
			sentCounter(b, "api", key) // b contributes (ownerunsolicited.go)
			for _, i := range tt.heard {
				charges, err := b.receiveAnswer(answers[i])
				if err != nil {
					t.Fatalf("answer %d: %v", i, err)
				}
				b.charge(charges)
			}
			l.mu.Lock()
			got := l.charged["api/"+key]
			l.mu.Unlock()
			if got != tt.want {
				t.Fatalf("charged %d, want %d", got, tt.want)
			}
		})
	}
}
