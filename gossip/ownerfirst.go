package gossip

// A subscription's first answers all carry its first prev.
//
// A receiver that first hears of a subscription (owner, gen) charges the
// answer's others less its prev (heardLocked): prev is what the owner
// counts it as having heard already. Were prev the others of the last
// answer sent, a receiver that lost the subscription's first answer would
// take the second as its first and never be charged what the first
// carried: after a failover, every other node's consumption while the
// owner was dead; for a newcomer, the key's debt. With 10% of packets lost,
// five processes in owner mode with the owner killed mid-run admitted
// 106-109% of burst + rate × T over 9 s, the kill's excess never repaid
// (TestNetnsOwnerModeUnderLossAndOwnerKilled). So the first
// ownerFirstAnswers answers of a subscription carry the prev it started
// with: a receiver that hears any of them first is charged everything the
// subscription has told so far, and one that heard an earlier one charges
// from its own slot, which ignores prev. A subscription loses its first
// answers' news only if all of them are lost (0.01% at 10% loss, 0.8% at
// 30%), as a direct-mode counter's first rounds (redundancy.go).
//
// The price: a receiver that heard an early answer and then lost its slot
// for the subscription (two newer subscriptions of the key in between)
// before the early answers end is charged that answer again (admits less).
// That takes three owners of one key within a few intervals.
//
// A receiver that sends heard messages (ownerrepeat.go) is told the first
// prev until it confirms it started from it, however many answers that
// takes, and charges the difference when an answer's prev lies below the
// one it started with: the four answers are then what a receiver of an
// earlier version (no heard messages) gets.

// ownerFirstAnswers is how many answers of a subscription carry its
// first prev.
const ownerFirstAnswers = 4

// answerPrev is the prev the next answer of sub carries, counting that
// answer among its first ones. Caller holds s.mu.
func (sub *ownerSub) answerPrev() uint64 {
	if sub.early < ownerFirstAnswers {
		sub.early++
		return sub.first
	}
	if sub.heardAcks && !sub.confirmed {
		return sub.first // until it confirms it started from it (ownerrepeat.go)
	}
	return sub.sent
}
