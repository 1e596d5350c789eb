package gossip

import (
	"fmt"
	"math"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// Wire formats, msgpack arrays decoded by hand with every count and length
// checked against the bytes present before anything is allocated:
//
//	counters packet  [1, sender, [origin, ...], [[origin_index, rule, key, epoch, prev, used(, window)], ...](, sent_at)]
//	push-pull state  [2, origin, [[rule, key, epoch, used, balance(, window)], ...], [[seen_origin, rule, key, epoch, used(, window)], ...]]
//
// The state's second list is what the sender has already charged of other
// origins' counters for the keys it lists: a receiver that takes the
// sender's balance takes these too, so it never charges them again.
//
// The trailing window is present exactly when a counter's Window is not 0
// (windowed algorithms); bucket algorithms' counters omit it, so their
// entries are what they were before windows existed and older peers read
// them. An entry that carries a window of 0 is malformed: each counter has
// one encoding. The packet's trailing sent_at (see stamp.go) is sent only
// to members that advertise they read it. Older peers refuse packets holding windowed entries, which
// only rules with windowed algorithms produce.
const (
	msgCounters = 1
	msgState    = 2
)

// Caps on what a peer may make this node decode.
const (
	maxOrigins      = 1024
	maxNameLen      = 512 // node names
	maxRuleLen      = 128
	maxKeyLen       = 64 << 10
	maxStateEntries = 1 << 20
)

// entryOverhead bounds the encoded size of a counter entry beyond its
// strings: array header, origin index, two string headers, three uint64s
// and the optional window.
const entryOverhead = 1 + 3 + 2*5 + 3*9 + 9

// entryFields is the number of fields of an entry with base fields before
// the optional window: one more when w is not 0.
func entryFields(base int, w uint64) int {
	if w != 0 {
		return base + 1
	}
	return base
}

// appendWindow appends w as an entry's last field, unless it is 0.
func appendWindow(b []byte, w uint64) []byte {
	if w != 0 {
		b = mp.AppendUint(b, w)
	}
	return b
}

// readWindow reads the optional window closing an entry of n fields, base of
// them without it. A window of 0 must be omitted, not sent.
func readWindow(d *mp.Decoder, n, base int) (uint64, error) {
	if n == base {
		return 0, nil
	}
	w, err := d.Uint()
	if err != nil {
		return 0, err
	}
	if w == 0 {
		return 0, d.Fail("window 0 sent instead of omitted")
	}
	return w, nil
}

// packetWriter batches counter entries into packets no larger than limit.
type packetWriter struct {
	limit   int
	sender  string
	origins []string
	index   map[string]int
	body    []byte
	n       int
	out     [][]byte // finished packets
	counts  []int    // entries in each finished packet
}

func newPacketWriter(sender string, limit int) *packetWriter {
	return &packetWriter{limit: limit, sender: sender, index: map[string]int{}}
}

func (w *packetWriter) headerSize(extraOrigin string) int {
	n := 1 + 1 + 5 + len(w.sender) + 5 + 5
	for _, o := range w.origins {
		n += 5 + len(o)
	}
	if extraOrigin != "" {
		n += 5 + len(extraOrigin)
	}
	return n
}

// add appends one counter from origin, starting a new packet when it would not fit.
func (w *packetWriter) add(origin string, c Counter) { w.addEntry(origin, c, 0, false) }

// addEntry is add; with users, the entry carries users after used (a
// group counter, owneraggwire.go).
func (w *packetWriter) addEntry(origin string, c Counter, users uint64, withUsers bool) {
	size := entryOverhead + len(c.Rule) + len(c.Key)
	base := 6
	if withUsers {
		size += 9
		base = 7
	}
	newOrigin := ""
	if _, ok := w.index[origin]; !ok {
		newOrigin = origin
	}
	if w.n > 0 && w.headerSize(newOrigin)+len(w.body)+size > w.limit {
		w.flush()
		newOrigin = origin
	}
	idx, ok := w.index[origin]
	if !ok {
		idx = len(w.origins)
		w.origins = append(w.origins, origin)
		w.index[origin] = idx
	}
	b := mp.AppendArrayHeader(w.body, entryFields(base, c.Window))
	b = mp.AppendUint(b, uint64(idx))
	b = mp.AppendStr(b, c.Rule)
	b = mp.AppendStr(b, c.Key)
	b = mp.AppendUint(b, c.Epoch)
	b = mp.AppendUint(b, c.Prev)
	b = mp.AppendUint(b, c.Used)
	if withUsers {
		b = mp.AppendUint(b, users)
	}
	w.body = appendWindow(b, c.Window)
	w.n++
}

func (w *packetWriter) flush() {
	if w.n == 0 {
		return
	}
	p := make([]byte, 0, w.headerSize("")+len(w.body))
	p = mp.AppendArrayHeader(p, 4)
	p = mp.AppendUint(p, msgCounters)
	p = mp.AppendStr(p, w.sender)
	p = mp.AppendArrayHeader(p, len(w.origins))
	for _, o := range w.origins {
		p = mp.AppendStr(p, o)
	}
	p = mp.AppendArrayHeader(p, w.n)
	p = append(p, w.body...)
	w.out = append(w.out, p)
	w.counts = append(w.counts, w.n)
	w.origins, w.body, w.n = w.origins[:0], w.body[:0], 0
	clear(w.index)
}

// packets finishes the last packet and returns them all, and how many
// entries each holds.
func (w *packetWriter) packets() ([][]byte, []int) {
	w.flush()
	out, counts := w.out, w.counts
	w.out, w.counts = nil, nil
	return out, counts
}

func str(d *mp.Decoder, max int, what string) (string, error) {
	b, err := d.Bytes()
	if err != nil {
		return "", err
	}
	if len(b) > max {
		return "", d.Fail(fmt.Sprintf("%s of %d bytes, limit %d", what, len(b), max))
	}
	return string(b), nil
}

// decodeCounters decodes a counters packet, stamped or not, calling fn per
// entry after the whole packet has been validated: a malformed packet
// applies nothing.
func decodeCounters(b []byte, fn func(origin string, c Counter)) (sender string, err error) {
	return decodeCountersChecked(b, nil, fn)
}

// decodeCountersChecked is decodeCounters that, once the packet is valid,
// asks admit (if not nil) whether to apply it, passing its sender and its
// stamp (see stamp.go); an error from admit is returned and nothing applied.
func decodeCountersChecked(b []byte, admit func(sender string, sentAt uint64, stamped bool) error, fn func(origin string, c Counter)) (sender string, err error) {
	return decodeCountersUsers(b, admit, false, func(origin string, c Counter, _ uint64) { fn(origin, c) })
}

// decodeCountersUsers is decodeCountersChecked; withUsers, every entry
// carries a users count after used (a group counter, owneraggwire.go),
// passed to fn.
func decodeCountersUsers(b []byte, admit func(sender string, sentAt uint64, stamped bool) error, withUsers bool, fn func(origin string, c Counter, users uint64)) (sender string, err error) {
	base := 6
	if withUsers {
		base = 7
	}
	d := mp.NewDecoder(b)
	fields, err := d.ArrayLen()
	if err != nil || (fields != 4 && fields != 5) {
		return "", fmt.Errorf("counters packet: %w", orMalformed(err, &d, "want 4 or 5 fields"))
	}
	if t, err := d.Uint(); err != nil || t != msgCounters {
		return "", fmt.Errorf("counters packet: %w", orMalformed(err, &d, "wrong type"))
	}
	if sender, err = str(&d, maxNameLen, "sender"); err != nil {
		return "", fmt.Errorf("counters packet: %w", err)
	}
	no, err := d.ArrayLen()
	if err != nil || no > maxOrigins {
		return "", fmt.Errorf("counters packet: %w", orMalformed(err, &d, "too many origins"))
	}
	origins := make([]string, no)
	for i := range origins {
		if origins[i], err = str(&d, maxNameLen, "origin"); err != nil {
			return "", fmt.Errorf("counters packet: %w", err)
		}
	}
	ne, err := d.ArrayLen()
	if err != nil {
		return "", fmt.Errorf("counters packet: %w", err)
	}
	type item struct {
		origin string
		c      Counter
		users  uint64
	}
	items := make([]item, 0, min(ne, 256))
	for range ne {
		m, err := d.ArrayLen()
		if err != nil || (m != base && m != base+1) {
			return "", fmt.Errorf("counters packet: %w", orMalformed(err, &d, fmt.Sprintf("entry must have %d or %d fields", base, base+1)))
		}
		oi, err := d.Uint()
		if err != nil || oi >= uint64(len(origins)) {
			return "", fmt.Errorf("counters packet: %w", orMalformed(err, &d, "origin index out of range"))
		}
		var c Counter
		if c.Rule, err = str(&d, maxRuleLen, "rule"); err != nil {
			return "", fmt.Errorf("counters packet: %w", err)
		}
		if c.Key, err = str(&d, maxKeyLen, "key"); err != nil {
			return "", fmt.Errorf("counters packet: %w", err)
		}
		for _, f := range []*uint64{&c.Epoch, &c.Prev, &c.Used} {
			if *f, err = d.Uint(); err != nil {
				return "", fmt.Errorf("counters packet: %w", err)
			}
		}
		if c.Prev > c.Used {
			return "", fmt.Errorf("counters packet: %w", d.Fail("prev above used"))
		}
		var users uint64
		if withUsers {
			if users, err = d.Uint(); err != nil {
				return "", fmt.Errorf("counters packet: %w", err)
			}
		}
		if c.Window, err = readWindow(&d, m, base); err != nil {
			return "", fmt.Errorf("counters packet: %w", err)
		}
		items = append(items, item{origins[oi], c, users})
	}
	var sentAt uint64
	if fields == 5 {
		if sentAt, err = d.Uint(); err != nil {
			return "", fmt.Errorf("counters packet: %w", err)
		}
	}
	if err := d.End(); err != nil {
		return "", fmt.Errorf("counters packet: %w", err)
	}
	if admit != nil {
		if err := admit(sender, sentAt, fields == 5); err != nil {
			return sender, fmt.Errorf("counters packet from %.64q: %w", sender, err)
		}
	}
	for _, it := range items {
		fn(it.origin, it.c, it.users)
	}
	return sender, nil
}

// stateEntry is one line of a push-pull state.
type stateEntry struct {
	c       Counter
	balance float64
}

// seenEntry is another origin's counter the state's sender has charged.
type seenEntry struct {
	origin string
	c      Counter
}

func encodeState(origin string, entries []stateEntry, seen []seenEntry) []byte {
	b := mp.AppendArrayHeader(nil, 4)
	b = mp.AppendUint(b, msgState)
	b = mp.AppendStr(b, origin)
	b = mp.AppendArrayHeader(b, len(entries))
	for _, e := range entries {
		b = mp.AppendArrayHeader(b, entryFields(5, e.c.Window))
		b = mp.AppendStr(b, e.c.Rule)
		b = mp.AppendStr(b, e.c.Key)
		b = mp.AppendUint(b, e.c.Epoch)
		b = mp.AppendUint(b, e.c.Used)
		b = mp.AppendFloat64(b, e.balance)
		b = appendWindow(b, e.c.Window)
	}
	b = mp.AppendArrayHeader(b, len(seen))
	for _, e := range seen {
		b = mp.AppendArrayHeader(b, entryFields(5, e.c.Window))
		b = mp.AppendStr(b, e.origin)
		b = mp.AppendStr(b, e.c.Rule)
		b = mp.AppendStr(b, e.c.Key)
		b = mp.AppendUint(b, e.c.Epoch)
		b = mp.AppendUint(b, e.c.Used)
		b = appendWindow(b, e.c.Window)
	}
	return b
}

func decodeState(b []byte) (origin string, entries []stateEntry, seen []seenEntry, err error) {
	origin, entries, seen, err = decodeStateBody(b)
	if err != nil {
		return "", nil, nil, fmt.Errorf("push-pull state: %w", err)
	}
	return origin, entries, seen, nil
}

func decodeStateBody(b []byte) (origin string, entries []stateEntry, seen []seenEntry, err error) {
	d := mp.NewDecoder(b)
	if n, err := d.ArrayLen(); err != nil || n != 4 {
		return "", nil, nil, orMalformed(err, &d, "want 4 fields")
	}
	if t, err := d.Uint(); err != nil || t != msgState {
		return "", nil, nil, orMalformed(err, &d, "wrong type")
	}
	if origin, err = str(&d, maxNameLen, "origin"); err != nil {
		return "", nil, nil, err
	}
	n, err := d.ArrayLen()
	if err != nil || n > maxStateEntries {
		return "", nil, nil, orMalformed(err, &d, "too many entries")
	}
	entries = make([]stateEntry, 0, min(n, 4096))
	for range n {
		m, err := d.ArrayLen()
		if err != nil || (m != 5 && m != 6) {
			return "", nil, nil, orMalformed(err, &d, "entry must have 5 or 6 fields")
		}
		var e stateEntry
		if e.c, err = readCounter(&d); err != nil {
			return "", nil, nil, err
		}
		if e.balance, err = d.Float64(); err != nil {
			return "", nil, nil, err
		}
		if math.IsNaN(e.balance) || math.IsInf(e.balance, 0) {
			return "", nil, nil, d.Fail("balance not finite")
		}
		if e.c.Window, err = readWindow(&d, m, 5); err != nil {
			return "", nil, nil, err
		}
		entries = append(entries, e)
	}
	n, err = d.ArrayLen()
	if err != nil || n > maxStateEntries {
		return "", nil, nil, orMalformed(err, &d, "too many seen entries")
	}
	seen = make([]seenEntry, 0, min(n, 4096))
	for range n {
		m, err := d.ArrayLen()
		if err != nil || (m != 5 && m != 6) {
			return "", nil, nil, orMalformed(err, &d, "seen entry must have 5 or 6 fields")
		}
		var e seenEntry
		if e.origin, err = str(&d, maxNameLen, "origin"); err != nil {
			return "", nil, nil, err
		}
		if e.c, err = readCounter(&d); err != nil {
			return "", nil, nil, err
		}
		if e.c.Window, err = readWindow(&d, m, 5); err != nil {
			return "", nil, nil, err
		}
		seen = append(seen, e)
	}
	return origin, entries, seen, d.End()
}

// readCounter reads rule, key, epoch and used; Prev is set to Used (a state
// reports where a counter stands, not what changed). The caller reads the
// window, which comes after the entry's other fields.
func readCounter(d *mp.Decoder) (c Counter, err error) {
	if c.Rule, err = str(d, maxRuleLen, "rule"); err != nil {
		return c, err
	}
	if c.Key, err = str(d, maxKeyLen, "key"); err != nil {
		return c, err
	}
	if c.Epoch, err = d.Uint(); err != nil {
		return c, err
	}
	if c.Used, err = d.Uint(); err != nil {
		return c, err
	}
	c.Prev = c.Used
	return c, nil
}

func orMalformed(err error, d *mp.Decoder, what string) error {
	if err != nil {
		return err
	}
	return d.Fail(what)
}
