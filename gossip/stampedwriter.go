package gossip

// The owner-mode messages written to one member at a time (answers, kind
// 5, ownerwire.go; notices, kind 8, owneraggwire.go; heard messages, kind
// 9, ownerrepeat.go) are batched alike: each entry is appended to a body,
// and a packet (stampedPacket) is finished before an entry would take it
// past the packet size or its kind's most entries.

// stampedHead is what every packet of a stampedBatch is made with: its
// kind, its sender, the instant it is stamped with, its size limit and
// the most entries it holds.
type stampedHead struct {
	kind       uint64
	sender     string
	at         uint64
	limit, max int
}

// stampedBatch is one member's packets of a kind as they are written.
type stampedBatch struct {
	body []byte
	n    int
	out  [][]byte
}

// entry returns the body to append an entry of about size bytes to,
// finishing the packet being written first if the entry would take it
// past h's limit or most entries; the caller gives the body back with
// added.
func (b *stampedBatch) entry(h stampedHead, size int) []byte {
	if b.n > 0 && (1+1+5+len(h.sender)+5+9+len(b.body)+size > h.limit || b.n == h.max) {
		b.flush(h)
	}
	return b.body
}

// added keeps body, which holds one entry more.
func (b *stampedBatch) added(body []byte) {
	b.body = body
	b.n++
}

// flush finishes the packet being written.
func (b *stampedBatch) flush(h stampedHead) {
	if b.n == 0 {
		return
	}
	b.out = append(b.out, stampedPacket(h.kind, h.sender, b.n, b.body, h.at))
	b.body, b.n = b.body[:0], 0
}

// finish finishes the last packet and returns them all.
func (b *stampedBatch) finish(h stampedHead) [][]byte {
	b.flush(h)
	out := b.out
	b.out = nil
	return out
}
