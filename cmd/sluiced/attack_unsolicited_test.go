package main

import (
	"math"
	"testing"
	"time"
)

// A keyed member that the ring names owner or replica of about half the
// keys floods a real sluiced in --gossip-mode owner with answers (kind 5)
// about 400,000 keys the daemon never used (gossip/ownerunsolicited.go).
// Before, each created a heard entry and, through the charge, a bucket in
// debt (peak RSS +128 MiB over 400,000 keys, the attack helper's
// observation), and since a full shard evicts the sampled bucket nearest
// to full, those buckets pushed out a legitimate client's bucket in smaller
// debt, which restarted full: a bypass of the limit. Now every such answer
// is refused (sluice_gossip_owner_answers_refused_total), sluice_active_keys
// does not grow, peak RSS stays within assertPeakGrowth's 32 MiB, and the
// client's key in debt stays refused. The daemon holds at most 2,048
// buckets (--max-keys) so that eviction would happen.
//
// Figures (2 cores, beside other work): now 400,000 of 400,000 refused,
// active keys 2 → 2, the client's key -51.0 → -51.6 (the flood's last,
// honest answer charged 1; refill 100/1h), peak RSS +4-7 MiB. On the code
// before (the refusal in gossip/owner.go and owneragg.go reverted): 0
// refused, active keys 2 → 2,048, the client's key evicted and admitting
// again (balance 100), peak RSS +47 MiB.
func TestOwnerRogueUnsolicitedAnswersFloodNothing(t *testing.T) {
	a, addr, rogues := chainCluster(t, "--max-keys", "2048")
	r3 := rogues["r3"]
	// The client's key, owned by the rogue: one token spent, then the
	// rogue's honest answer charges 150 the others took: balance 99-150.
	victim := chainKeys(t, chainMembers, "victim", 1, func(o, _, _ string) bool { return o == "r3" })[0]
	a.spendOne(t, []string{victim})
	r3.awaitCounters(t, "the daemon's counter of the client's key reaches its owner", []string{victim})
	ack, _ := r3.owned(victim)
	r3.send(t, addr, r3.stamped(5, answerEntry(victim, 1, 0, 150, ack, 0, math.NaN())))
	eventually(t, "the owner's answer puts the client's key in debt", func() bool { return a.balance(t, "r", victim) < 0 })
	debt := a.balance(t, "r", victim)
	if allowFresh(a.c, "r", victim) {
		t.Fatalf("the client's key in debt (balance %.1f) admitted a request", debt)
	}
	a.assertUpOwner(t) // its probe key counts in keysBefore too
	keysBefore := ipcMetric(t, a.admin, "sluice_active_keys")
	refusedBefore := a.refused(t)
	baseHWM := a.peakKiB(t)

	const ghosts, perPacket = 400_000, 40
	keys := chainKeys(t, chainMembers, "ghost", ghosts, func(o, r, _ string) bool { return o == "r3" || r == "r3" })
	pace := time.NewTicker(20 * time.Millisecond)
	defer pace.Stop()
	entries := make([][]byte, perPacket)
	for i := 0; i < ghosts; i += perPacket {
		for j := range entries {
			entries[j] = answerEntry(keys[i+j], 1, 0, 1e6, ownerSeen{}, 2, 1e300)
		}
		r3.send(t, addr, r3.stamped(5, entries...))
		if i/perPacket%200 == 199 {
			<-pace.C // UDP has no backpressure
		}
	}
	// A last answer about the client's key (others 151: one more token)
	// marks the end of the flood, which came before it on the same socket.
	r3.send(t, addr, r3.stamped(5, answerEntry(victim, 1, 0, 151, ack, 0, math.NaN())))
	eventually(t, "the daemon reads the flood's last answer", func() bool { return a.balance(t, "r", victim) != debt })
	a.assertUpOwner(t)

	refused := a.refused(t) - refusedBefore
	keysAfter := ipcMetric(t, a.admin, "sluice_active_keys")
	t.Logf("%d never-used keys answered: %.0f refused; active keys %.0f → %.0f; the client's key %.1f → %.1f",
		ghosts, refused, keysBefore, keysAfter, debt, a.balance(t, "r", victim))
	if refused < ghosts/4 {
		t.Errorf("only %.0f of %d unsolicited answers refused", refused, ghosts)
	}
	if keysAfter > keysBefore {
		t.Errorf("unsolicited answers created buckets: sluice_active_keys %.0f → %.0f", keysBefore, keysAfter)
	}
	if allowFresh(a.c, "r", victim) {
		t.Errorf("the client's key in debt was admitted after the flood (its bucket evicted; balance now %.1f)", a.balance(t, "r", victim))
	}
	a.assertPeakGrowth(t, baseHWM, "400,000 unsolicited answers")
}
