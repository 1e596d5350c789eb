package gossip

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// Fuzz targets for what peers send: counter packets, push-pull state and node
// metadata. Run one longer with
//
//	go test -run '^$' -fuzz '^FuzzDecodeCounters$' -fuzztime 5m ./gossip
//
// Inputs the fuzzer has found interesting live in testdata/fuzz and run as
// ordinary tests.

type originCounter struct {
	origin string
	c      Counter
}

func samplePackets() [][]byte {
	w := newPacketWriter("node-a", 300)
	w.add("node-a", Counter{Rule: "api", Key: "alice", Epoch: 1, Prev: 0, Used: 3})
	w.add("node-b", Counter{Rule: "api", Key: "bob", Epoch: 1 << 40, Prev: 1 << 33, Used: 1<<33 + 1})
	w.add("node-a", Counter{Rule: "login", Key: strings.Repeat("k", 200), Epoch: 2, Prev: 5, Used: 9})
	w.add("node-a", Counter{Rule: "window", Key: "carol", Epoch: 3, Window: 29_000_000, Prev: 1, Used: 4})
	w.add("node-b", Counter{Rule: "window", Key: "carol", Epoch: 1, Window: math.MaxUint64, Prev: 0, Used: 2})
	packets, _ := w.packets()
	return packets
}

// malformedPeerBytes are hand-made bad packets: lying counts, wrong types,
// negative numbers, oversized strings.
var malformedPeerBytes = [][]byte{
	{},
	{0x94, 0x01, 0xa1, 'a', 0xdd, 0x7f, 0xff, 0xff, 0xff},                                                           // 2^31 origins
	{0x94, 0x01, 0xa1, 'a', 0x91, 0xa1, 'a', 0xdd, 0x7f, 0xff, 0xff, 0xff},                                          // 2^31 entries
	{0x94, 0x02, 0xa1, 'a', 0xdd, 0x7f, 0xff, 0xff, 0xff},                                                           // 2^31 state entries
	{0x94, 0x02, 0xa1, 'a', 0x90, 0xdc, 0xff, 0xff},                                                                 // 65535 seen entries
	{0x94, 0x01, 0xa1, 'a', 0x91, 0xa1, 'a', 0x91, 0x96, 0x00, 0xa1, 'r', 0xa1, 'k', 0x01, 0x05, 0x01},              // prev above used
	{0x94, 0x01, 0xa1, 'a', 0x91, 0xa1, 'a', 0x91, 0x97, 0x00, 0xa1, 'r', 0xa1, 'k', 0x01, 0x00, 0x01, 0x00},        // window 0 sent
	{0x94, 0x02, 0xa1, 'a', 0x90, 0x91, 0x96, 0xa1, 'b', 0xa1, 'r', 0xa1, 'k', 0x01, 0x01, 0x00},                    // seen window 0 sent
	{0x94, 0x02, 0xa1, 'a', 0x91, 0x95, 0xa1, 'r', 0xa1, 'k', 0x01, 0x01, 0xcb, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0, 0x90}, // +Inf balance
	{0x92, 0xa1, 'v', 0xd9, 0xff},
	[]byte("GET / HTTP/1.1\r\n\r\n"),
}

// FuzzDecodeCounters feeds a counters packet to the decoder: a refused packet
// applies nothing, an accepted one respects the caps and re-encodes (with the
// package's packet writer) to a packet that decodes to the same entries.
func FuzzDecodeCounters(f *testing.F) {
	for _, p := range samplePackets() {
		f.Add(p)
	}
	for _, b := range malformedPeerBytes {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got []originCounter
		sender, err := decodeCounters(b, func(origin string, c Counter) { got = append(got, originCounter{origin, c}) })
		if err != nil {
			if !errors.Is(err, mp.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if len(got) > 0 {
				t.Fatalf("a refused packet applied %d entries", len(got))
			}
			return
		}
		if len(sender) > maxNameLen || len(got) > len(b) {
			t.Fatalf("sender of %d bytes, %d entries from %d bytes", len(sender), len(got), len(b))
		}
		w := newPacketWriter(sender, math.MaxInt)
		for _, e := range got {
			if len(e.origin) > maxNameLen || len(e.c.Rule) > maxRuleLen || len(e.c.Key) > maxKeyLen || e.c.Prev > e.c.Used {
				t.Fatalf("accepted an entry beyond the caps: %+v", e)
			}
			w.add(e.origin, e.c)
		}
		packets, _ := w.packets()
		if len(got) == 0 {
			return // the writer sends no empty packets
		}
		if len(packets) != 1 {
			t.Fatalf("%d entries re-encoded into %d packets", len(got), len(packets))
		}
		var again []originCounter
		s2, err := decodeCounters(packets[0], func(origin string, c Counter) { again = append(again, originCounter{origin, c}) })
		if err != nil || s2 != sender || !reflect.DeepEqual(again, got) {
			t.Fatalf("round trip: sender %q→%q, err %v\n got %v\nwant %v", sender, s2, err, again, got)
		}
	})
}

// FuzzCountersRoundTrip writes fuzzed counters with the packet writer and
// reads them back: what the writer produces within the caps is accepted
// unchanged, and beyond them refused. The entries' windows mix 0 (bucket
// counters) and the fuzzed window.
func FuzzCountersRoundTrip(f *testing.F) {
	f.Add("node-a", "node-b", "api", "alice", uint64(1), uint64(0), uint64(0), uint64(3), uint16(1300))
	f.Add("node-a", "node-b", "api", "alice", uint64(1), uint64(29_000_000), uint64(0), uint64(3), uint16(1300))
	f.Add("", "", "", "", uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(math.MaxUint64), uint16(0))
	f.Add("n", "o", strings.Repeat("r", maxRuleLen+1), "k", uint64(1), uint64(1), uint64(2), uint64(1), uint16(64))
	f.Fuzz(func(t *testing.T, sender, origin, rule, key string, epoch, window, prev, used uint64, limit uint16) {
		w := newPacketWriter(sender, int(limit))
		c := Counter{Rule: rule, Key: key, Epoch: epoch, Window: window, Prev: prev, Used: used}
		var written []Counter
		for i := range 3 {
			ci := c
			ci.Key = key[:len(key)*i/3]
			if i == 1 {
				ci.Window = 0
			}
			w.add(origin, ci)
			written = append(written, ci)
		}
		w.add(sender, c)
		written = append(written, c)
		packets, counts := w.packets()
		fieldsValid := len(sender) <= maxNameLen && len(rule) <= maxRuleLen && len(key) <= maxKeyLen && prev <= used
		total := 0
		for i, p := range packets {
			// Entries 0-2 come from origin, entry 3 from sender: a packet
			// holding only the last is valid whatever origin's length.
			valid := fieldsValid && (len(origin) <= maxNameLen || (total >= 3 && origin != sender))
			if counts[i] > 1 && len(p) > int(limit) {
				t.Fatalf("packet %d of %d bytes holds %d entries, limit %d", i, len(p), counts[i], limit)
			}
			var got []Counter
			s, err := decodeCounters(p, func(_ string, c Counter) { got = append(got, c) })
			if valid && (err != nil || s != sender || !reflect.DeepEqual(got, written[total:total+counts[i]])) {
				t.Fatalf("packet %d: sender %q, %v\n got %+v\nwant %+v", i, s, err, got, written[total:total+counts[i]])
			}
			if !valid && err == nil {
				t.Fatalf("packet %d beyond the caps accepted", i)
			}
			total += counts[i]
		}
		if total != 4 {
			t.Fatalf("%d entries written, want 4", total)
		}
	})
}

// FuzzDecodeState feeds a push-pull state to the decoder: an accepted state
// respects the caps, has finite balances, allocated no more entries than its
// bytes could hold, and re-encodes to a state that decodes the same.
func FuzzDecodeState(f *testing.F) {
	f.Add(encodeState("node-a",
		[]stateEntry{{c: Counter{Rule: "api", Key: "alice", Epoch: 3, Used: 12, Prev: 12}, balance: -8.5}, {c: Counter{Rule: "login", Key: "10.0.0.1"}, balance: 5}},
		[]seenEntry{{origin: "node-b", c: Counter{Rule: "api", Key: "alice", Epoch: 2, Used: 7, Prev: 7}}}))
	f.Add(encodeState("node-a",
		[]stateEntry{{c: Counter{Rule: "window", Key: "carol", Epoch: 3, Window: 29_000_000, Used: 12, Prev: 12}, balance: -2}, {c: Counter{Rule: "api", Key: "alice"}, balance: 5}},
		[]seenEntry{{origin: "node-b", c: Counter{Rule: "window", Key: "carol", Epoch: 2, Window: math.MaxUint64, Used: 7, Prev: 7}}, {origin: "node-c", c: Counter{Rule: "api", Key: "alice", Epoch: 1, Used: 1, Prev: 1}}}))
	f.Add(encodeState("", nil, nil))
	for _, b := range malformedPeerBytes {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		origin, entries, seen, err := decodeState(b)
		if err != nil {
			if !errors.Is(err, mp.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if origin != "" || entries != nil || seen != nil {
				t.Fatal("a refused state returned data")
			}
			return
		}
		if cap(entries)+cap(seen) > len(b) {
			t.Fatalf("allocated %d+%d entries for %d bytes", cap(entries), cap(seen), len(b))
		}
		if len(origin) > maxNameLen {
			t.Fatalf("origin of %d bytes", len(origin))
		}
		for _, e := range entries {
			if math.IsNaN(e.balance) || math.IsInf(e.balance, 0) || e.c.Prev != e.c.Used ||
				len(e.c.Rule) > maxRuleLen || len(e.c.Key) > maxKeyLen {
				t.Fatalf("accepted entry %+v", e)
			}
		}
		for _, e := range seen {
			if len(e.origin) > maxNameLen || e.c.Prev != e.c.Used || len(e.c.Rule) > maxRuleLen || len(e.c.Key) > maxKeyLen {
				t.Fatalf("accepted seen entry %+v", e)
			}
		}
		o2, e2, s2, err := decodeState(encodeState(origin, entries, seen))
		if err != nil || o2 != origin || !sameEntries(e2, entries) || !sameEntries(s2, seen) {
			t.Fatalf("round trip: %v\n%q %v %v\n%q %v %v", err, origin, entries, seen, o2, e2, s2)
		}
	})
}

// FuzzDecodeMeta feeds node metadata (carried in memberlist's alive messages)
// to the decoder, and checks what it accepts round-trips.
func FuzzDecodeMeta(f *testing.F) {
	f.Add(encodeMeta(Meta{Version: "v1.2.3", RulesHash: "0123456789abcdef"}))
	f.Add(encodeMeta(Meta{}))
	f.Add(encodeMeta(Meta{Version: strings.Repeat("v", 129)}))
	f.Add(encodeMeta(Meta{Version: "0.1.0", RulesHash: "h", Encrypted: true, Labelled: true, SecurityKnown: true}))
	f.Add(encodeMeta(Meta{Version: "0.1.0+git.1", SecurityKnown: true}))
	for _, b := range malformedPeerBytes {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			if !errors.Is(err, mp.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if len(m.Version) > 128 || len(m.RulesHash) > 128 {
			t.Fatalf("accepted %+v", m)
		}
		if got, err := decodeMeta(encodeMeta(m)); err != nil || got != m {
			t.Fatalf("round trip: %+v → %+v, %v", m, got, err)
		}
	})
}

// sameEntries compares decoded entries, nil and empty alike.
func sameEntries[E any](a, b []E) bool {
	return (len(a) == 0 && len(b) == 0) || reflect.DeepEqual(a, b)
}
