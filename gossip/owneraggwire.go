package gossip

import (
	"fmt"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// Aggregation's three messages (see owneragg.go), kinds 6, 7 and 8 beside
// owner mode's 4 and 5 (ownerwire.go):
//
//	to an aggregator  [6, sender, [origin], [[0, rule, key, epoch, prev, used(, window)], ...], sent_at]
//	group to owner    [7, sender, [origin], [[0, rule, key, epoch, prev, used, users(, window)], ...], sent_at]
//	owner's notice    [8, sender, [[rule, key, total, gen, contrib, window, ack_epoch, ack_used], ...], sent_at]
//
// Kinds 6 and 7 are counters packets (wire.go) under other kinds, always
// stamped, whose one origin must be their sender. Kind 6 carries a user's
// own cumulative counters to the key's aggregator, exactly as kind 4 to an
// owner. Kind 7 carries an aggregator's group counter: epoch names the
// group (made anew when the aggregator makes it anew), used is the
// cumulative consumption of every user in the group as the aggregator
// counted it, prev what the owner acknowledged of it, users how many
// nodes use the key through the group lately (its share of the key's users,
// ownershare.go; the owner counts at most what its ring assigns the
// aggregator, groupUsersLocked). The owner answers a
// group counter with an ordinary answer (kind 5) whose ack_epoch and
// ack_used are the group's. Kind 8 tells a user that the listed keys go
// through aggregators from now on, and the owner's total for each (every
// origin's consumption it counted, the user's own included) as of the
// last answer it sent the user, the user's subscription (gen, as in kind
// 5) and the user's own consumption it counted (contrib): the user's first
// answer from an aggregator charges what lies above the total, taken as
// the last others it heard of that subscription plus contrib when it has
// heard of it (an answer lost on the way is then not skipped). Its window,
// ack_epoch and ack_used acknowledge the user's counter of that window as
// an answer does: the answer itself may wait for the owner's answer budget
// while the user already sends to its aggregator, which would count again
// what the owner counted and had not acknowledged.
//
// All three are sent only when every member advertises protoAgg (memberlist's
// DelegateProtocolMax): nodes of earlier versions ignore kinds above 5 (and
// earlier still, above 3), so a cluster with one of them never uses them.
const (
	msgAggUsers  = 6
	msgAggGroup  = 7
	msgAggNotice = 8
)

// protoAgg is the delegate protocol version of nodes that aggregate before
// the owner (owneragg.go): everything of protoOwnerShare, and aggregation.
const protoAgg = protoOwnerShare + 1

// noticeFields is how many fields a notice's entry has.
const noticeFields = 8

// maxNoticeEntries caps the keys of one notice.
const maxNoticeEntries = 4096

// aggNotice is one key's entry in an owner's notice.
type aggNotice struct {
	rule, key                 string
	total, gen, contrib       uint64
	window, ackEpoch, ackUsed uint64
}

// toAggPacket turns a counters packet made by packetWriter into a stamped
// one of kind (msgAggUsers or msgAggGroup).
func toAggPacket(p []byte, at uint64, kind byte) []byte {
	q := stampPacket(p, at)
	q[1] = kind
	return q
}

// aggPackets returns the packets of w as aggregation counters of kind
// (msgAggUsers or msgAggGroup) stamped at.
func aggPackets(w *packetWriter, at uint64, kind byte) ([][]byte, []int) {
	packets, counts := w.packets()
	for i := range packets {
		packets[i] = toAggPacket(packets[i], at, kind)
	}
	return packets, counts
}

// asCounters returns a copy of a stamped packet of kind with the kind of a
// counters packet, for decodeCountersChecked, or an error if the header is
// not that of a stamped packet of that kind.
func asCounters(b []byte, kind byte) ([]byte, error) {
	if len(b) < 2 || b[0] != 0x95 || b[1] != kind {
		return nil, fmt.Errorf("aggregation packet of kind %d: malformed header", kind)
	}
	q := append([]byte(nil), b...)
	q[1] = msgCounters
	return q, nil
}

// decodeAggCounters decodes a packet of kind msgAggUsers or msgAggGroup as
// a counters packet, its stamp required (with msgAggGroup, each entry's
// users is passed to fn; 0 with msgAggUsers).
func decodeAggCounters(b []byte, kind byte, admit func(sender string, sentAt uint64, stamped bool) error, fn func(origin string, c Counter, users uint64)) (string, error) {
	q, err := asCounters(b, kind)
	if err != nil {
		return "", err
	}
	return decodeCountersUsers(q, admit, kind == msgAggGroup, fn)
}

// noticeWriter batches one destination's notices into packets no larger
// than limit.
type noticeWriter struct {
	limit  int
	sender string
	at     uint64
	stampedBatch
}

func (w *noticeWriter) head() stampedHead {
	return stampedHead{kind: msgAggNotice, sender: w.sender, at: w.at, limit: w.limit, max: maxNoticeEntries}
}

func (w *noticeWriter) add(n aggNotice) {
	body := w.entry(w.head(), 1+2*5+6*9+len(n.rule)+len(n.key))
	b := mp.AppendArrayHeader(body, noticeFields)
	b = mp.AppendStr(b, n.rule)
	b = mp.AppendStr(b, n.key)
	for _, f := range [...]uint64{n.total, n.gen, n.contrib, n.window, n.ackEpoch, n.ackUsed} {
		b = mp.AppendUint(b, f)
	}
	w.added(b)
}

// packets finishes the last packet and returns them all.
func (w *noticeWriter) packets() [][]byte { return w.finish(w.head()) }

// decodeNotice decodes an owner's notice, validating all of it before
// returning any entry.
func decodeNotice(b []byte) (sender string, sentAt uint64, keys []aggNotice, err error) {
	d := mp.NewDecoder(b)
	fail := func(err error) (string, uint64, []aggNotice, error) {
		return "", 0, nil, fmt.Errorf("aggregation notice: %w", err)
	}
	if n, err := d.ArrayLen(); err != nil || n != 4 {
		return fail(orMalformed(err, &d, "want 4 fields"))
	}
	if t, err := d.Uint(); err != nil || t != msgAggNotice {
		return fail(orMalformed(err, &d, "wrong type"))
	}
	if sender, err = str(&d, maxNameLen, "sender"); err != nil {
		return fail(err)
	}
	n, err := d.ArrayLen()
	if err != nil || n > maxNoticeEntries {
		return fail(orMalformed(err, &d, "too many entries"))
	}
	keys = make([]aggNotice, 0, min(n, 64))
	for range n {
		if m, err := d.ArrayLen(); err != nil || m != noticeFields {
			return fail(orMalformed(err, &d, "entry must have 8 fields"))
		}
		var k aggNotice
		if k.rule, err = str(&d, maxRuleLen, "rule"); err != nil {
			return fail(err)
		}
		if k.key, err = str(&d, maxKeyLen, "key"); err != nil {
			return fail(err)
		}
		for _, f := range [...]*uint64{&k.total, &k.gen, &k.contrib, &k.window, &k.ackEpoch, &k.ackUsed} {
			if *f, err = d.Uint(); err != nil {
				return fail(err)
			}
		}
		keys = append(keys, k)
	}
	if sentAt, err = d.Uint(); err != nil {
		return fail(err)
	}
	if err := d.End(); err != nil {
		return fail(err)
	}
	return sender, sentAt, keys, nil
}
