package gossip

import (
	"cmp"
	"fmt"
	"time"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// Owner answers repeated until heard.
//
// An owner answers a contributor when the key's total changes, and an
// answer is cumulative, so a lost one is repaired by the next. A key that
// then stays quiet has no next: the news the lost answer carried was never
// told (the simulator's owner-mode probes under 10-30% loss). And a
// receiver that lost every one of a subscription's first answers (which
// carry the subscription's first prev, ownerfirst.go) took a later one as
// its first and was never charged what the first carried: the key's debt,
// or after a failover everything the other nodes took while the owner was
// dead (1,000 simulated nodes under 30% loss: 4 nodes never heard the
// first second's consumption and admitted every request they were asked,
// 328% of the limit over 5 s; a suspected cause of the 105.8% and 110.2%
// of five processes with the owner killed under 30% loss).
//
// So a receiver tells the owner what it heard (kind 9, "heard"), per key:
// the subscription (gen), the prev it started it with (start) and the
// last others it heard. It sends that at once for a subscription it just
// started (or whose start an answer lowered), else once the key's answers
// have paused for ownerHeardQuiet rounds: a key answered every round (a
// busy one) costs no heard message; one that went quiet costs one. The
// owner
//   - repeats its answer to a contributor that has not confirmed the last
//     others it was told, after ownerRepeatWait, doubling each time, at
//     least once per ownerIdlePush, until it does or the subscription ends
//     (answers are cumulative: a repeat counts nothing twice);
//   - keeps sending the subscription's first prev to a contributor that
//     says it started above it, and the contributor charges the
//     difference once (heardSlot.start; not when it started above the
//     sender's first prev from what it knew, owneragg.go): what the lost first answers
//     carried is charged, late but whole. A contributor that confirmed the
//     first prev is told the last others sent, as before.
//
// Compatibility: kind 9 is new (6-8 are left to the aggregation of branch
// s6-hotkey); nodes of earlier versions ignore it (kinds above 3 they do
// not know are ignored), so an old owner never confirms and a new
// receiver's heard messages cost it one small packet per key and pause. A new owner answering an old receiver (which never sends heard)
// repeats its answers about a quiet key at the backoff above, at most once
// a second, until the subscription ends (ownerSubTTL after its last
// counter), and keeps the first prev only for ownerFirstAnswers answers:
// without heard messages it cannot tell a lost first answer from an old
// receiver. No protocol number changes.
//
//	heard   [9, sender, [[rule, key, gen, start, last, debt(, window)], ...], sent_at]
//
// debt is how far below a full bucket the sender's own balance of the key
// lies: a new owner learns the key's debt from it (ownerlearn.go).
//
// Trust: a heard message is taken only from a member, in a packet the
// transport vouched for (its sender at its source), stamped; it changes
// what the owner tells its sender (whether to repeat, which prev), which
// harms nobody but a lying sender, and, while the aggregate is young, the
// owner's own balance (a debt of at most a burst: ownerlearn.go).

// msgOwnerHeard is the kind of a receiver's heard message.
const msgOwnerHeard = 9

// ownerHeardQuiet is how many rounds without an answer about a key a
// receiver waits before confirming what it heard of it. With 2, at 50
// requests/s per node over many keys (a key changes about once a round,
// so its answers often pause for two), heard messages added 39% to each
// node's packets in the simulator at 100 nodes; with 4, 7%.
const ownerHeardQuiet = 4

// ownerRepeatWait is, in gossip intervals, how long an owner waits for a
// contributor to confirm an answer before repeating it; it doubles with
// each repeat, to at most ownerIdlePush.
const ownerRepeatWait = 6

// maxHeardEntries caps the entries of one heard message.
const maxHeardEntries = 4096

// heardOverhead bounds a heard entry's encoded size beyond its strings.
const heardOverhead = 1 + 2*5 + 5*9

// heardAck is one key's entry in a heard message.
type heardAck struct {
	rule, key   string
	window      uint64
	gen         uint64
	start, last uint64
	debt        uint64 // how far the sender's balance lies below a full bucket (ownerlearn.go)
}

// heardTo names a heard entry waiting to be sent: a key, and the owner
// (or replica) whose answers it confirms.
type heardTo struct {
	k     aggKey
	owner string
}

// heardDue is a heard entry waiting to be sent.
type heardDue struct {
	gen, start, last uint64
	round            uint64 // of the last answer heard
	urgent           bool   // a new subscription, or its start lowered: send at once
}

func compareHeardTo(a, b heardTo) int {
	return cmp.Or(compareAggKeys(a.k, b.k), cmp.Compare(a.owner, b.owner))
}

// noteHeardLocked records that an answer of (owner, gen) about k was
// heard, to be confirmed to owner. Caller holds s.mu.
func (s *Syncer) noteHeardLocked(k aggKey, owner string, slot *heardSlot, urgent bool) {
	t := heardTo{k, owner}
	d, ok := s.owner.toConfirm[t]
	if !ok {
		if len(s.owner.toConfirm) >= s.cfg.MaxSeen {
			return // the owner repeats; the next answer records it again
		}
		if s.owner.toConfirm == nil {
			s.owner.toConfirm = map[heardTo]heardDue{}
		}
	}
	urgent = urgent || (ok && d.urgent && d.gen == slot.gen)
	s.owner.toConfirm[t] = heardDue{gen: slot.gen, start: slot.first, last: slot.last, round: s.owner.round, urgent: urgent}
}

// heardMessagesLocked makes this round's heard messages: the urgent
// entries, and those whose key has had no answer for ownerHeardQuiet
// rounds. Caller holds s.mu.
func (s *Syncer) heardMessagesLocked(at uint64) []ownerOut {
	if len(s.owner.toConfirm) == 0 {
		return nil
	}
	writers := map[string]*heardWriter{}
	for t, d := range inOrder(s.simRand(), s.owner.toConfirm, compareHeardTo) { // simorder.go
		if !d.urgent && s.owner.round-d.round < ownerHeardQuiet {
			continue
		}
		delete(s.owner.toConfirm, t)
		w := writers[t.owner]
		if w == nil {
			w = &heardWriter{limit: s.cfg.PacketSize, sender: s.self, at: at}
			writers[t.owner] = w
		}
		w.add(heardAck{rule: t.k.rule, key: t.k.key, window: t.k.window, gen: d.gen, start: d.start, last: d.last,
			debt: s.debtLocked(t.k)}) // ownerlearn.go
	}
	out := make([]ownerOut, 0, len(writers))
	for name, w := range inOrder(s.simRand(), writers, compareNames) {
		n, ok := s.peers[name]
		if !ok {
			continue
		}
		packets := w.packets()
		out = append(out, ownerOut{to: n, packets: packets, counts: make([]int, len(packets)), heard: true})
	}
	return out
}

// receiveHeard applies a receiver's heard message to this node's
// aggregates: what the sender confirmed is not repeated, and a sender that
// started a subscription above its first prev is told the first prev
// again.
func (s *Syncer) receiveHeard(b []byte) error {
	sender, sentAt, acks, err := decodeHeard(b)
	if err != nil {
		return err
	}
	var learn []learnt
	defer func() { s.adoptLearnt(learn) }() // ownerlearn.go; after s.mu is let go
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.memberLocked(sender) {
		return fmt.Errorf("heard message: sender %.64q is no member", sender)
	}
	if err := s.checkStampLocked(sender, sentAt, true); err != nil {
		return fmt.Errorf("heard message from %.64q: %w", sender, err)
	}
	now := s.sinceBorn()
	age := s.sentAgoLocked(sender, sentAt) // ownerlearnstale.go
	for _, a := range acks {
		o := s.owner.mine[aggKey{a.rule, a.key, a.window}]
		if o == nil {
			continue
		}
		sub := o.subs[sender]
		if sub == nil || sub.serial != a.gen {
			continue // another subscription's: it ended
		}
		sub.heardAcks = true
		sub.told = max(sub.told, min(a.last, sub.sent))
		learn = s.learnDebtLocked(learn, o, a, age, now) // ownerlearn.go
		switch {
		case a.start == sub.first:
			sub.confirmed = true
		case a.start > sub.first && !sub.confirmed:
			o.dirty = true // it missed the first answers: tell it the first prev now
			sub.repeats, sub.answered = 0, 0
		}
	}
	return nil
}

// repeatDueLocked reports whether sub, told nothing new, is answered again
// now: it has not confirmed what it was last told (or the first prev, when
// it said it missed it) and its wait since the last answer is over. Caller
// holds s.mu.
func (s *Syncer) repeatDueLocked(sub *ownerSub, now time.Duration) bool {
	if sub.told >= sub.sent && (sub.confirmed || !sub.heardAcks) {
		return false
	}
	wait := min(ownerIdlePush, ownerRepeatWait*s.cfg.GossipInterval<<min(sub.repeats, 16))
	return now-sub.answered >= wait
}

// heardWriter batches one owner's heard entries into packets no larger
// than limit.
type heardWriter struct {
	limit  int
	sender string
	at     uint64
	stampedBatch
}

func (w *heardWriter) head() stampedHead {
	return stampedHead{kind: msgOwnerHeard, sender: w.sender, at: w.at, limit: w.limit, max: maxHeardEntries}
}

func (w *heardWriter) add(a heardAck) {
	body := w.entry(w.head(), heardOverhead+len(a.rule)+len(a.key))
	b := mp.AppendArrayHeader(body, entryFields(6, a.window))
	b = mp.AppendStr(b, a.rule)
	b = mp.AppendStr(b, a.key)
	for _, v := range [...]uint64{a.gen, a.start, a.last, a.debt} {
		b = mp.AppendUint(b, v)
	}
	w.added(appendWindow(b, a.window))
}

// packets finishes the last packet and returns them all.
func (w *heardWriter) packets() [][]byte { return w.finish(w.head()) }

// decodeHeard decodes a heard message, validating all of it before
// returning any entry.
func decodeHeard(b []byte) (sender string, sentAt uint64, acks []heardAck, err error) {
	d := mp.NewDecoder(b)
	fail := func(err error) (string, uint64, []heardAck, error) {
		return "", 0, nil, fmt.Errorf("heard message: %w", err)
	}
	sender, n, err := readStampedHeader(&d, msgOwnerHeard, maxHeardEntries)
	if err != nil {
		return fail(err)
	}
	acks = make([]heardAck, 0, min(n, 64))
	for range n {
		m, err := d.ArrayLen()
		if err != nil || (m != 6 && m != 7) {
			return fail(orMalformed(err, &d, "entry must have 6 or 7 fields"))
		}
		var a heardAck
		if a.rule, err = str(&d, maxRuleLen, "rule"); err != nil {
			return fail(err)
		}
		if a.key, err = str(&d, maxKeyLen, "key"); err != nil {
			return fail(err)
		}
		for _, f := range [...]*uint64{&a.gen, &a.start, &a.last, &a.debt} {
			if *f, err = d.Uint(); err != nil {
				return fail(err)
			}
		}
		if a.start > a.last {
			return fail(d.Fail("start above last"))
		}
		if a.window, err = readWindow(&d, m, 6); err != nil {
			return fail(err)
		}
		acks = append(acks, a)
	}
	if sentAt, err = d.Uint(); err != nil {
		return fail(err)
	}
	if err := d.End(); err != nil {
		return fail(err)
	}
	return sender, sentAt, acks, nil
}
