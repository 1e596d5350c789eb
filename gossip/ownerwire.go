package gossip

import (
	"fmt"
	"math"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// Owner mode's two messages (see owner.go), kinds 4 and 5 beside counters
// (1), push-pull states (2) and resets (3):
//
//	to the owner   [4, sender, [origin], [[0, rule, key, epoch, prev, used(, window)], ...], sent_at]
//	owner answer   [5, sender, [[rule, key, gen, prev, others, ack_epoch, ack_used(, window)], ...], sent_at]
//	               entries to a receiver that reads views (protoOwnerShare, ownershare.go):
//	               [rule, key, gen, prev, others, ack_epoch, ack_used, window, users, balance], window 0 included
//
// Kind 4 is a counters packet (wire.go) under another kind: the sender's
// own cumulative counters, for the keys the receiver owns. Its one origin
// must be its sender, and it is always stamped (stamp.go). A node that
// receives one charges it as counters and adds it to the key's aggregate.
//
// Kind 5 is the owner's answer, per key: gen names the receiver's
// subscription to the owner's aggregate of the key (new when either is made
// anew); others is the cumulative consumption of every origin but the
// receiver in that aggregate, prev what the owner counts the receiver as
// having heard before (a receiver that first hears of gen charges
// others−prev; a subscription's first four answers carry the same prev,
// see ownerfirst.go); ack_epoch and ack_used are the highest of the
// receiver's own counters the owner has counted (the receiver stops
// repeating them); users and balance, sent only to receivers that
// advertise protoOwnerShare, are how many nodes use the key lately and its
// balance at the owner (a float, NaN when unknown). Both kinds are
// sent only to members that advertise
// protoOwner; nodes of earlier versions that do receive one ignore it
// (kinds above 3 are ignored) or, before resets existed, drop it as
// malformed. Neither is ever relayed. A receiver's heard message (kind 9,
// what it heard of each key: the owner repeats answers until then) is in
// ownerrepeat.go.
const (
	msgOwnerCounters = 4
	msgOwnerAnswer   = 5
)

// protoOwner is the delegate protocol version of nodes that speak owner
// mode (memberlist's DelegateProtocolMax, as protoStamped).
const protoOwner = 2

// maxAnswerEntries caps the entries of one answer.
const maxAnswerEntries = 4096

// answerOverhead bounds an answer entry's encoded size beyond its strings.
const answerOverhead = 1 + 2*5 + 6*9

// ownerAnswer is one key's entry in an owner's answer.
type ownerAnswer struct {
	rule, key         string
	window            uint64
	gen, prev, others uint64
	ackEpoch, ackUsed uint64
	users             uint64  // 0: not sent (ownershare.go)
	balance           float64 // with users
	view              bool    // users and balance are on the wire (10 fields)
}

// toOwnerPacket turns a counters packet made by packetWriter into an
// owner-counters one stamped at at: the kind is its second byte (a fixint
// after the fixarray header).
func toOwnerPacket(p []byte, at uint64) []byte {
	q := stampPacket(p, at)
	q[1] = msgOwnerCounters
	return q
}

// decodeOwnerCounters decodes an owner-counters packet as a counters packet
// (decodeCountersChecked), the sender's stamp required.
func decodeOwnerCounters(b []byte, admit func(sender string, sentAt uint64, stamped bool) error, fn func(origin string, c Counter)) (string, error) {
	if len(b) < 2 || b[0] != 0x95 || b[1] != msgOwnerCounters {
		return "", fmt.Errorf("owner counters packet: malformed header")
	}
	q := append([]byte(nil), b...)
	q[1] = msgCounters
	return decodeCountersChecked(q, admit, fn)
}

// stampedPacket finishes a packet of the owner messages' shape: its kind,
// its sender, its n entries (body) and the instant it is stamped with.
func stampedPacket(kind uint64, sender string, n int, body []byte, at uint64) []byte {
	p := mp.AppendArrayHeader(make([]byte, 0, 16+len(sender)+len(body)), 4)
	p = mp.AppendUint(p, kind)
	p = mp.AppendStr(p, sender)
	p = mp.AppendArrayHeader(p, n)
	p = append(p, body...)
	return mp.AppendUint(p, at)
}

// readStampedHeader reads what comes before the entries of a packet that
// stampedPacket made: it must be of kind, and hold at most maxEntries.
func readStampedHeader(d *mp.Decoder, kind uint64, maxEntries int) (sender string, n int, err error) {
	if n, err := d.ArrayLen(); err != nil || n != 4 {
		return "", 0, orMalformed(err, d, "want 4 fields")
	}
	if t, err := d.Uint(); err != nil || t != kind {
		return "", 0, orMalformed(err, d, "wrong type")
	}
	if sender, err = str(d, maxNameLen, "sender"); err != nil {
		return "", 0, err
	}
	if n, err = d.ArrayLen(); err != nil || n > maxEntries {
		return "", 0, orMalformed(err, d, "too many entries")
	}
	return sender, n, nil
}

// answerWriter batches one destination's answers into packets no larger
// than limit.
type answerWriter struct {
	limit  int
	sender string
	at     uint64 // the instant every packet is stamped with
	users  bool   // the receiver reads views (entries of 10 fields)
	stampedBatch
}

func (w *answerWriter) head() stampedHead {
	return stampedHead{kind: msgOwnerAnswer, sender: w.sender, at: w.at, limit: w.limit, max: maxAnswerEntries}
}

func (w *answerWriter) add(a ownerAnswer) {
	body := w.entry(w.head(), answerOverhead+len(a.rule)+len(a.key))
	view := w.users || a.view
	fields := entryFields(7, a.window)
	if view {
		fields = 10
	}
	b := mp.AppendArrayHeader(body, fields)
	b = mp.AppendStr(b, a.rule)
	b = mp.AppendStr(b, a.key)
	for _, v := range [...]uint64{a.gen, a.prev, a.others, a.ackEpoch, a.ackUsed} {
		b = mp.AppendUint(b, v)
	}
	if view {
		b = mp.AppendFloat64(mp.AppendUint(mp.AppendUint(b, a.window), a.users), a.balance)
	} else {
		b = appendWindow(b, a.window)
	}
	w.added(b)
}

// packets finishes the last packet and returns them all, stamped with
// w.at.
func (w *answerWriter) packets() [][]byte { return w.finish(w.head()) }

// decodeAnswer decodes an owner answer, validating all of it before
// returning any entry.
func decodeAnswer(b []byte) (sender string, sentAt uint64, answers []ownerAnswer, err error) {
	d := mp.NewDecoder(b)
	fail := func(err error) (string, uint64, []ownerAnswer, error) {
		return "", 0, nil, fmt.Errorf("owner answer: %w", err)
	}
	sender, n, err := readStampedHeader(&d, msgOwnerAnswer, maxAnswerEntries)
	if err != nil {
		return fail(err)
	}
	answers = make([]ownerAnswer, 0, min(n, 64))
	for range n {
		m, err := d.ArrayLen()
		if err != nil || (m != 7 && m != 8 && m != 10) {
			return fail(orMalformed(err, &d, "entry must have 7, 8 or 10 fields"))
		}
		var a ownerAnswer
		if a.rule, err = str(&d, maxRuleLen, "rule"); err != nil {
			return fail(err)
		}
		if a.key, err = str(&d, maxKeyLen, "key"); err != nil {
			return fail(err)
		}
		for _, f := range [...]*uint64{&a.gen, &a.prev, &a.others, &a.ackEpoch, &a.ackUsed} {
			if *f, err = d.Uint(); err != nil {
				return fail(err)
			}
		}
		if a.prev > a.others {
			return fail(d.Fail("prev above others"))
		}
		if m == 10 { // window always, then the owner's view
			a.view = true
			if a.window, err = d.Uint(); err != nil {
				return fail(err)
			}
			if a.users, err = d.Uint(); err != nil {
				return fail(err)
			}
			if a.balance, err = d.Float64(); err != nil {
				return fail(err)
			}
			if math.IsInf(a.balance, 0) {
				return fail(d.Fail("infinite balance"))
			}
		} else if a.window, err = readWindow(&d, m, 7); err != nil {
			return fail(err)
		}
		answers = append(answers, a)
	}
	if sentAt, err = d.Uint(); err != nil {
		return fail(err)
	}
	if err := d.End(); err != nil {
		return fail(err)
	}
	return sender, sentAt, answers, nil
}
