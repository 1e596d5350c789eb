package gossip

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"hash/maphash"
	"net/netip"
	"sync"
	"time"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// The sender guard authenticates who sent a counters packet. memberlist
// hands a user message to Delegate.NotifyMsg without the address it came
// from, and a counters packet names its sender and origins itself, so a
// keyed member could send counters in other members' names: each name has
// its own allowance per key on every receiver, so a rogue naming N members
// charged a key about N allowances, and spent honest members' allowances
// so their real reports were clamped.
//
// The transport knows every packet's source address. So before memberlist
// sees a packet, the guard reads it as memberlist will (the label; with a
// key, AES-GCM decryption with the node's keyring, memberlist's version
// byte and, for version 0, its padding; the CRC header; compound messages)
// down to each user message, and for each counters message reads its
// sender. The sender must be the member whose advertised address and port
// the packet came from; a packet from no member's address may not name a
// member (it may name a node this one has not heard of yet: a joining
// member's first counters, which share the strangers' allowance, see
// takeLocked). Otherwise the whole packet is refused (reason "sender"),
// counted and logged at most once per interval with the address and the
// name claimed. A compressed message inside an encrypted packet is refused
// too ("compressed"): Sluice never compresses, and it could hide a user
// message from the guard.
//
// What the guard let through it vouches for: the hash of each counters
// message's bytes is kept for a short while (vouches), and receive applies
// a counters message only if the transport vouched for exactly those bytes.
// Everything else that reaches NotifyMsg with counters (a reliable user
// message over TCP, which no Sluice node sends) is refused ("unchecked"):
// nothing reaches the counters unchecked, whatever path memberlist takes.
//
// Members' packets must come from their advertised address and port: the
// transport sends from the gossip socket (port = bind port), and, bound to
// every interface, from the advertised IP when it is one of this host's
// (see transport.srcOOB). A NAT that rewrites a member's source to
// something other than what it advertises makes its counters refused (and
// logged, naming the address): advertise the address peers see.

// Packet refusal reasons added by the sender guard.
const (
	// PacketRefusedSender: a counters message whose sender is not the member
	// at the packet's source address, or a member's name from an address
	// that is no member's.
	PacketRefusedSender = "sender"
	// PacketRefusedOrigin: counters of other origins from a sender while the
	// cluster is small enough that each node sends only its own (direct
	// fan-out); those counters are not applied.
	PacketRefusedOrigin = "origin"
	// PacketRefusedUnchecked: counters that reached memberlist's delegate
	// without the transport having checked their sender (over a stream).
	PacketRefusedUnchecked = "unchecked"
)

// vouchTTL is how long a vouch is kept at least (and at most twice that):
// memberlist hands a packet's user messages to the delegate within
// milliseconds, through a queue that drops what does not fit, so vouches of
// dropped packets must not pile up.
const vouchTTL = 10 * time.Second

// maxVouches is how many vouches one generation holds before it turns over
// early: a flood of checked packets memberlist drops costs no more memory.
const maxVouches = 1 << 14

// vouches are the counters messages the transport checked and let through,
// by hash, until receive takes them. It is safe for concurrent use.
type vouches struct {
	seed    maphash.Seed
	mu      sync.Mutex
	cur     map[uint64]uint32
	old     map[uint64]uint32
	turned  time.Time
	nowFunc func() time.Time
}

func newVouches() *vouches {
	return &vouches{seed: maphash.MakeSeed(), cur: map[uint64]uint32{}, old: map[uint64]uint32{}, nowFunc: time.Now}
}

func (v *vouches) sum(b []byte) uint64 { return maphash.Bytes(v.seed, b) }

// add vouches for the messages whose sums are given.
func (v *vouches) add(sums []uint64) {
	if len(sums) == 0 {
		return
	}
	now := v.nowFunc()
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.cur)+len(sums) > maxVouches || now.Sub(v.turned) >= vouchTTL {
		v.old, v.cur = v.cur, v.old
		clear(v.cur)
		v.turned = now
	}
	for _, h := range sums {
		v.cur[h]++
	}
}

// take reports whether b was vouched for, and uses the vouch up.
func (v *vouches) take(b []byte) bool {
	h := v.sum(b)
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, m := range [2]map[uint64]uint32{v.cur, v.old} {
		if n := m[h]; n > 0 {
			if n == 1 {
				delete(m, h)
			} else {
				m[h] = n - 1
			}
			return true
		}
	}
	return false
}

// senderGuard checks the senders of counters messages in packets. Its check
// is called from the transport's one packet reader only: the decryption
// state is not shared.
type senderGuard struct {
	label      []byte
	encryption bool // the node has a key
	verify     bool // and memberlist accepts encrypted packets only
	keys       func() [][]byte
	book       func() *senderBook
	vouch      *vouches
	// stranger, if set, is told the source of a counters packet from a
	// sender that is no member here, in a keyed cluster.
	stranger func(netip.AddrPort)

	ring  [][]byte // the keys aeads were made from
	aeads []cipher.AEAD
	plain []byte   // decrypted packet, reused
	sums  []uint64 // vouches of the packet being checked, reused
}

// senderRefusal says why a packet was refused and what it claimed.
type senderRefusal struct {
	reason  string
	claimed []byte // the sender named (aliases the packet)
}

// check returns the refusal of packet b from src, or a zero refusal; a
// packet let through has its counters messages vouched for.
func (g *senderGuard) check(b []byte, src netip.AddrPort) senderRefusal {
	if len(b) > 0 && b[0] == mlHasLabel { // checkPacket has checked it
		if len(b) < 2 || len(b) < 2+int(b[1]) {
			return senderRefusal{reason: PacketRefusedLabel}
		}
		b = b[2+int(b[1]):]
	}
	if g.encryption {
		plain, ok, bad := g.open(b)
		switch {
		case bad:
			return senderRefusal{reason: PacketRefusedMalformed}
		case ok:
			b = plain
		case g.verify:
			return senderRefusal{} // memberlist drops what it cannot decrypt
		}
	}
	if len(b) >= mlCrcHeader && b[0] == mlHasCrc {
		b = b[mlCrcHeader:]
	}
	g.sums = g.sums[:0]
	book := g.book()
	if r := g.command(b, 0, src, book); r.reason != "" {
		return r
	}
	g.vouch.add(g.sums)
	return senderRefusal{}
}

// open decrypts b as memberlist's decryptPayload does, trying each key:
// ok when one opened it; bad when it opened but its padding is not
// PKCS#7's (memberlist would slice out of range).
func (g *senderGuard) open(b []byte) (plain []byte, ok, bad bool) {
	const versionSize, nonceSize, tagSize = 1, 12, 16
	if len(b) < versionSize+nonceSize+tagSize || b[0] > 1 || (b[0] == 0 && len(b) < versionSize+nonceSize+aes.BlockSize+tagSize) {
		return nil, false, false
	}
	g.refreshKeys()
	nonce, ct := b[versionSize:versionSize+nonceSize], b[versionSize+nonceSize:]
	for _, a := range g.aeads {
		p, err := a.Open(g.plain[:0], nonce, ct, g.label)
		if err != nil {
			continue
		}
		g.plain = p[:0]
		if b[0] == 0 {
			if len(p) == 0 || p[len(p)-1] == 0 || int(p[len(p)-1]) > min(len(p), aes.BlockSize) {
				return nil, false, true
			}
			p = p[:len(p)-int(p[len(p)-1])]
		}
		return p, true, false
	}
	return nil, false, false
}

// refreshKeys remakes the ciphers when the keyring changed.
func (g *senderGuard) refreshKeys() {
	keys := g.keys()
	same := len(keys) == len(g.ring)
	for i := 0; same && i < len(keys); i++ {
		same = bytes.Equal(keys[i], g.ring[i])
	}
	if same {
		return
	}
	g.ring, g.aeads = g.ring[:0], g.aeads[:0]
	for _, k := range keys {
		blk, err := aes.NewCipher(k)
		if err != nil {
			continue
		}
		a, err := cipher.NewGCM(blk)
		if err != nil {
			continue
		}
		g.ring = append(g.ring, append([]byte(nil), k...))
		g.aeads = append(g.aeads, a)
	}
}

// command checks one message as memberlist's handleCommand reads it.
func (g *senderGuard) command(b []byte, depth int, src netip.AddrPort, book *senderBook) senderRefusal {
	if len(b) == 0 {
		return senderRefusal{}
	}
	switch b[0] {
	case mlCompress:
		return senderRefusal{reason: PacketRefusedCompressed}
	case mlCompound:
		if depth >= maxCompoundDepth {
			return senderRefusal{reason: PacketRefusedMalformed}
		}
		return g.compound(b[1:], depth+1, src, book)
	case mlUser:
		return g.user(b[1:], src, book)
	}
	return senderRefusal{}
}

// compound checks each part memberlist would handle (see checkCompound).
func (g *senderGuard) compound(b []byte, depth int, src netip.AddrPort, book *senderBook) senderRefusal {
	if len(b) < 1 {
		return senderRefusal{}
	}
	n := int(b[0])
	b = b[1:]
	if len(b) < 2*n {
		return senderRefusal{}
	}
	lens, b := b[:2*n], b[2*n:]
	for i := range n {
		l := int(lens[2*i])<<8 | int(lens[2*i+1])
		if len(b) < l {
			return senderRefusal{}
		}
		if r := g.command(b[:l], depth, src, book); r.reason != "" {
			return r
		}
		b = b[l:]
	}
	return senderRefusal{}
}

// user checks one user message: a counters message's sender must be
// allowed at src, and the message is then vouched for.
func (g *senderGuard) user(b []byte, src netip.AddrPort, book *senderBook) senderRefusal {
	d := mp.NewDecoder(b)
	if n, err := d.ArrayLen(); err != nil || n < 1 {
		return senderRefusal{}
	}
	if kind, err := d.Uint(); err != nil || (kind != msgCounters && (kind < msgOwnerCounters || kind > msgOwnerHeard)) {
		return senderRefusal{} // resets and newer kinds: not counters
	}
	sender, err := d.Bytes()
	if err != nil {
		return senderRefusal{} // malformed: receive drops it, and it is not vouched for
	}
	if !book.allows(src, sender) {
		return senderRefusal{reason: PacketRefusedSender, claimed: sender}
	}
	if g.stranger != nil && g.verify && book != nil && book.owner(src) == "" {
		if !book.named(sender) {
			g.stranger(src) // a keyed node that counts this one a member, unknown here (see repair.go)
		}
	}
	g.sums = append(g.sums, g.vouch.sum(b))
	return senderRefusal{}
}
