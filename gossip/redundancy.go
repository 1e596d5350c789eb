package gossip

// Redundancy. A receiver charges what lies outside the range of an
// origin's counter it has already charged (see applyLocked), so a counter
// that names a lower Prev than the one before it repairs a lost packet
// below. A receiver that first hears of a key midway charges only from the
// Prev it first heard: when the first packets of a key's epoch were lost,
// what they carried was never charged there (until a push-pull explained
// it, see explainLocked), and that node's view of the key stayed higher
// than its peers' for good. Under even demand that node then admitted
// everything while the others refused everything (issue 20).
//
// Later increments need nothing more: a receiver charges everything above
// what it has heard, so the next packet repairs a lost one. So this node
// sends the first counter of each epoch or window of a key (its Prev is
// 0) in redundancy rounds in a row, coalesced with what the key admits
// meanwhile, each naming as Prev the lowest Prev of the rounds before:
// the start of the count travels in redundancy packets to each target and
// is lost only if all of them are. The extra is redundancy−1 entries per
// new epoch or window of a key (none for a key that admits every round:
// its counter goes out anyway, only the Prev it names differs). Counters
// are cumulative, so a receiver charges every token once however many
// packets carry it. Receivers of every version read it as before: only the
// values differ. (Sending every change in redundancy rounds was measured
// too: it made a contended key's counters go out every round on every
// node, twice the packets of this, for no better accuracy.)

// redundancy is how many consecutive rounds carry the start of each of this
// node's own counters. With a packet lost with probability p, an increment
// is lost to one peer with probability p^redundancy: 0.01% at 10% loss,
// 0.8% at 30%.
const redundancy = 4

// ownTransmits is how many rounds this node's own counter c is sent in,
// where other counters go in transmits: redundancy at least for the first
// counter of its epoch or window.
func ownTransmits(c Counter, transmits int) int {
	if c.Prev == 0 {
		return max(transmits, redundancy)
	}
	return transmits
}

// carry returns this node's own pending counter as it goes out this round
// (its Prev reaching back to the Prev of the counter sent redundancy−1
// rounds ago) and notes the round. Caller holds s.mu.
func (p *pendingCounter) carry() Counter {
	out := p.c
	for _, prev := range p.back[:min(p.sent, len(p.back))] {
		out.Prev = min(out.Prev, prev)
	}
	copy(p.back[1:], p.back[:len(p.back)-1])
	p.back[0] = p.c.Prev
	p.sent++
	p.c.Prev = p.c.Used // what a later drain adds starts here
	return out
}
