package gossip

import "testing"

// A second failover soon after the first is charged while it lasts: the
// first's pair ends once the owner answers again caught up, so the
// replica's answers in the second are not swallowed up to the owner's
// earlier sum. Before the fix, with the owner late again 50 rounds (1 s)
// after the first failover, x was charged nothing of the 200 tokens the
// others took during the second silence until the owner came back (five
// in-process daemons admitted 105-106% of the limit).
func TestSecondFailoverIsChargedWhileItLasts(t *testing.T) {
	for _, gap := range []int{50, 150} {
		n := newFailoverNet(t, "o", "r", "x", "y", "z")
		n.key = n.keyOwnedBy("o", "r")
		first := [2]int{10, 60}
		second := [2]int{60 + gap, 60 + gap + 50}
		othersUsed := func() (u uint64) {
			for name, v := range n.used {
				if name != "x" {
					u += v
				}
			}
			return u
		}
		var chargedAt2, usedAt2 uint64
		for i := range second[1] {
			late := i >= first[0] && i < first[1] || i >= second[0] && i < second[1]
			slow := ""
			if late {
				slow = "o"
			}
			if !late && len(n.held) > 0 {
				n.release()
			}
			if i == second[0] {
				chargedAt2, usedAt2 = n.ledgers["x"].charged["api/"+n.key], othersUsed()
			}
			n.round(slow, n.names...)
		}
		took := othersUsed() - usedAt2
		got := n.ledgers["x"].charged["api/"+n.key] - chargedAt2
		// The failover itself waits ownerFailover rounds (and a few for the
		// replica's answers): the others' use of those rounds may be
		// charged only when the owner answers again.
		perRound := took / uint64(second[1]-second[0])
		slack := uint64(ownerFailover+4) * perRound
		t.Logf("gap %d rounds: during the second silence x was charged %d of the %d the others took (slack %d)", gap, got, took, slack)
		if got+slack < took {
			t.Errorf("gap %d rounds: x charged %d of the %d tokens the others took during a second failover; want at least %d", gap, got, took, took-slack)
		}
		n.release()
		for _, c := range n.settledCharges(t) {
			if c.charged < c.others || c.charged > c.others+uint64(len(n.names)-1) {
				t.Errorf("gap %d rounds: %s charged %d for the %d the others consumed", gap, c.name, c.charged, c.others)
			}
		}
	}
}
