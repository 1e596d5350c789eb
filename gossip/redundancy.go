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
// So this node sends its own counter for a key in redundancy rounds in a
// row after each change, each naming as Prev the one of the counter sent
// redundancy−1 rounds before: every increment travels in redundancy
// packets to each target, and is lost only if all of them are. The bytes
// are the same for a key in use (its counter goes out every round anyway;
// only the Prev it names differs); an idle key's last counter goes out
// redundancy−1 more times. Counters are cumulative, so a receiver charges
// every token once however many packets carry it. Receivers of every
// version read it as before: only the values differ.

// redundancy is how many consecutive rounds carry each increment of this
// node's own counters. With a packet lost with probability p, an increment
// is lost to one peer with probability p^redundancy: 0.01% at 10% loss,
// 0.8% at 30%.
const redundancy = 4

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
