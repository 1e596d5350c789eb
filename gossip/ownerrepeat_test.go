package gossip

import (
	"fmt"
	"testing"
	"time"
)

// A heard message decodes back to what was written; malformed ones are
// refused whole.
func TestHeardWire(t *testing.T) {
	w := &heardWriter{limit: 1300, sender: "n1", at: 77}
	want := []heardAck{
		{rule: "api", key: "k", gen: 9, start: 3, last: 12, debt: 40},
		{rule: "w", key: "k2", window: 5, gen: 1, last: 1},
	}
	for _, a := range want {
		w.add(a)
	}
	ps := w.packets()
	if len(ps) != 1 {
		t.Fatalf("%d packets, want 1", len(ps))
	}
	sender, at, got, err := decodeHeard(ps[0])
	if err != nil || sender != "n1" || at != 77 || len(got) != len(want) {
		t.Fatalf("decoded %q %d %v %v", sender, at, got, err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	bad := map[string][]byte{
		"start>last":  (&heardWriter{limit: 1300, sender: "n1", at: 1}).with(heardAck{rule: "r", key: "k", start: 2, last: 1}),
		"truncated":   ps[0][:len(ps[0])-1],
		"trailing":    append(append([]byte(nil), ps[0]...), 0),
		"an answer":   (&answerWriter{limit: 1300, sender: "o", at: 1}).with(ownerAnswer{rule: "r", key: "k", others: 1}),
		"lying count": {0x94, msgOwnerHeard, 0xa1, 'o', 0xdd, 0xff, 0xff, 0xff, 0xff},
	}
	for name, b := range bad {
		if _, _, _, err := decodeHeard(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// with encodes one heard entry (tests).
func (w *heardWriter) with(a heardAck) []byte {
	w.add(a)
	return w.packets()[0]
}

// ownedKeyOf returns a key that o owns among members (tests).
func ownedKeyOf(t *testing.T, o string, members ...string) string {
	t.Helper()
	for i := range 1000 {
		k := fmt.Sprint("k", i)
		if owner, _ := newOwnerRing(members).owners("api", k); owner == o {
			return k
		}
	}
	t.Fatal("no key that the owner owns")
	return ""
}

// repeatPair is an owner o and a receiver b of one key that a also
// contributes to (tests): o's rounds at chosen times, b's answers
// delivered or dropped, b's heard messages delivered to o.
type repeatPair struct {
	t     *testing.T
	o, b  *Syncer
	bl    *memLedger
	key   string
	stamp uint64
}

func newRepeatPair(t *testing.T) *repeatPair {
	p := &repeatPair{t: t, stamp: uint64(time.Now().UnixNano())}
	p.o, _ = newOwnerSyncer("o", "a", "b")
	p.b, p.bl = newOwnerSyncer("b", "o", "a")
	p.key = ownedKeyOf(t, "o", "o", "a", "b")
	p.b.mu.Lock()
	p.b.refreshRingLocked()
	p.b.mu.Unlock()
	sentCounter(p.b, "api", p.key) // b contributes: its answers are solicited (ownerunsolicited.go)
	return p
}

// contribute counts a's and b's cumulative counters at o.
func (p *repeatPair) contribute(aUsed, bUsed uint64) {
	p.o.mu.Lock()
	defer p.o.mu.Unlock()
	p.o.aggregateLocked(false, Allowance{}, "a", Counter{Rule: "api", Key: p.key, Epoch: 1, Used: aUsed}, time.Second, time.Second)
	if bUsed > 0 {
		p.o.aggregateLocked(false, Allowance{}, "b", Counter{Rule: "api", Key: p.key, Epoch: 1, Used: bUsed}, time.Second, time.Second)
	}
}

// answer runs o's answers at now and returns the one to b (nil: none).
func (p *repeatPair) answer(now time.Duration) []byte {
	p.o.mu.Lock()
	defer p.o.mu.Unlock()
	p.stamp++
	for _, out := range p.o.answersLocked(now, p.stamp) {
		if out.to.Name == "b" {
			return out.packets[0]
		}
	}
	return nil
}

// deliver hands b an answer, then runs b's rounds until its heard
// messages are out and hands them to o; it returns them.
func (p *repeatPair) deliver(answer []byte, deliverHeard bool) int {
	charges, err := p.b.receiveAnswer(answer)
	if err != nil {
		p.t.Fatal(err)
	}
	p.b.charge(charges)
	sent := 0
	for range ownerHeardQuiet + 1 {
		p.b.mu.Lock()
		p.b.owner.round++
		p.stamp++
		out := p.b.heardMessagesLocked(p.stamp)
		p.b.mu.Unlock()
		for _, o := range out {
			for _, pk := range o.packets {
				sent++
				if deliverHeard {
					if err := p.o.receiveHeard(pk); err != nil {
						p.t.Fatal(err)
					}
				}
			}
		}
	}
	return sent
}

func (p *repeatPair) charged() uint64 {
	p.bl.mu.Lock()
	defer p.bl.mu.Unlock()
	return p.bl.charged["api/"+p.key]
}

// A lost answer about a key that then stays quiet is repeated after
// ownerRepeatWait, doubling, until the receiver confirms it; then no more.
func TestQuietKeyAnswerIsRepeatedUntilHeard(t *testing.T) {
	p := newRepeatPair(t)
	iv := p.o.cfg.GossipInterval
	at := time.Second
	p.contribute(10, 1)
	first := p.answer(at)
	if first == nil {
		t.Fatal("no first answer")
	}
	p.deliver(first, true)
	if got := p.charged(); got != 10 {
		t.Fatalf("charged %d, want 10", got)
	}
	p.contribute(25, 0) // news, then the key is quiet
	if p.answer(at+iv) == nil {
		t.Fatal("no answer to the news")
	} // lost
	if a := p.answer(at + 2*iv); a != nil {
		t.Fatal("repeated before the wait")
	}
	var repeatedAt []time.Duration
	for r := 3; r <= 30 && len(repeatedAt) < 2; r++ {
		if a := p.answer(at + time.Duration(r)*iv); a != nil {
			repeatedAt = append(repeatedAt, time.Duration(r-1)*iv)
			if len(repeatedAt) == 2 {
				if n := p.deliver(a, true); n != 1 {
					t.Fatalf("%d heard messages, want 1", n)
				}
			} // the first repeat is lost too
		}
	}
	if want := []time.Duration{ownerRepeatWait * iv, 3 * ownerRepeatWait * iv}; fmt.Sprint(repeatedAt) != fmt.Sprint(want) {
		t.Fatalf("repeated %v after the news, want %v", repeatedAt, want)
	}
	if got := p.charged(); got != 25 {
		t.Fatalf("charged %d, want 25", got)
	}
	for r := 31; r < 200; r++ {
		if a := p.answer(at + time.Duration(r)*iv); a != nil {
			t.Fatalf("repeated at round %d after it was confirmed", r)
		}
	}
}

// A receiver that lost every one of a subscription's first answers (the
// debt, or what a new owner's first answer carries) says so in its heard
// message, is told the first prev again and charges what it missed, once.
func TestMissedFirstAnswersAreChargedOnceHeard(t *testing.T) {
	for _, tt := range []struct {
		name        string
		heard       bool // b's heard messages reach o
		wantCharged uint64
	}{
		{"heard messages arrive", true, 150},
		{"heard messages lost (an old owner)", false, 150 - 75}, // from the fifth answer's prev (75) only
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newRepeatPair(t)
			iv := p.o.cfg.GossipInterval
			now := time.Second
			var answers [][]byte
			for i := range ownerFirstAnswers + 1 {
				p.contribute(uint64(30+15*i), uint64(1+i))
				now += iv
				answers = append(answers, p.answer(now))
			}
			// a's total after each: 30, 45, 60, 75, 90; the first four are lost.
			p.deliver(answers[ownerFirstAnswers], tt.heard)
			for r := range 40 {
				now += iv
				if r == 20 {
					p.contribute(150, 10)
				}
				if a := p.answer(now); a != nil {
					p.deliver(a, tt.heard)
				}
			}
			if got := p.charged(); got != tt.wantCharged {
				t.Fatalf("charged %d, want %d", got, tt.wantCharged)
			}
			if !tt.heard {
				return
			}
			p.o.mu.Lock()
			sub := p.o.owner.mine[aggKey{"api", p.key, 0}].subs["b"]
			confirmed, prev := sub.confirmed, sub.answerPrev()
			p.o.mu.Unlock()
			if !confirmed || prev != sub.sent {
				t.Fatalf("confirmed %v, next prev %d (sent %d)", confirmed, prev, sub.sent)
			}
		})
	}
}

// Heard messages change nothing for a subscription they do not name, nor
// from a non-member; a heard message claiming more than was told confirms
// only what was told.
func TestHeardIsTakenOnlyForItsSubscription(t *testing.T) {
	p := newRepeatPair(t)
	p.contribute(10, 1)
	p.answer(time.Second)
	p.o.mu.Lock()
	sub := p.o.owner.mine[aggKey{"api", p.key, 0}].subs["b"]
	serial, sent := sub.serial, sub.sent
	p.o.mu.Unlock()
	send := func(sender string, a heardAck) error {
		w := &heardWriter{limit: 1300, sender: sender, at: uint64(time.Now().UnixNano())}
		return p.o.receiveHeard(w.with(a))
	}
	if err := send("stranger", heardAck{rule: "api", key: p.key, gen: serial, last: sent}); err == nil {
		t.Fatal("took a heard message from a non-member")
	}
	if err := send("b", heardAck{rule: "api", key: p.key, gen: serial + 1, last: sent}); err != nil {
		t.Fatal(err)
	}
	if sub.told != 0 || sub.heardAcks {
		t.Fatalf("another subscription's heard message was taken: %+v", *sub)
	}
	if err := send("b", heardAck{rule: "api", key: p.key, gen: serial, last: sent + 1000}); err != nil {
		t.Fatal(err)
	}
	if sub.told != sent || !sub.confirmed {
		t.Fatalf("told %d (want %d), confirmed %v", sub.told, sent, sub.confirmed)
	}
}

// fuzzHeardRoundTrip: a heard message that decodes re-encodes to an equal
// one (FuzzDecodeOwnerMessages).
func fuzzHeardRoundTrip(t *testing.T, b []byte) {
	sender, at, as, err := decodeHeard(b)
	if err != nil || len(as) == 0 {
		return
	}
	w := &heardWriter{limit: 1 << 30, sender: sender, at: at}
	for _, a := range as {
		w.add(a)
	}
	s2, at2, as2, err := decodeHeard(w.packets()[0])
	if err != nil || s2 != sender || at2 != at || len(as2) != len(as) {
		t.Fatalf("re-encoded heard message: %q %d %d entries, %v", s2, at2, len(as2), err)
	}
	for i := range as {
		if as[i] != as2[i] {
			t.Fatalf("entry %d: %+v became %+v", i, as[i], as2[i])
		}
	}
}
