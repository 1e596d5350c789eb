package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

func TestPacketsFitAndRoundTrip(t *testing.T) {
	w := newPacketWriter("node-a", 300)
	var want []Counter
	for i := range 40 {
		c := Counter{Rule: "api", Key: fmt.Sprintf("user-%03d", i), Epoch: 1 << 40, Prev: uint64(i), Used: uint64(i) + 1<<33}
		origin := "node-a"
		if i%3 == 0 {
			origin = "node-b" // relayed counters carry their own origin
		}
		w.add(origin, c)
		want = append(want, c)
	}
	packets, counts := w.packets()
	if len(packets) < 2 {
		t.Fatalf("%d packets for 40 entries under a 300-byte limit", len(packets))
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	if len(counts) != len(packets) || total != 40 {
		t.Fatalf("entry counts %v for %d packets of 40 entries", counts, len(packets))
	}
	var got []Counter
	for _, p := range packets {
		if len(p) > 300 {
			t.Fatalf("packet of %d bytes exceeds the 300-byte limit", len(p))
		}
		sender, err := decodeCounters(p, func(origin string, c Counter) {
			if wantOrigin := map[bool]string{true: "node-b", false: "node-a"}[len(got)%3 == 0]; origin != wantOrigin {
				t.Errorf("entry %d origin %s, want %s", len(got), origin, wantOrigin)
			}
			got = append(got, c)
		})
		if err != nil || sender != "node-a" {
			t.Fatalf("decode: sender %q err %v", sender, err)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("round trip lost or changed entries:\n got %v\nwant %v", got, want)
	}
}

func TestStateRoundTripsAndRejectsNonFinite(t *testing.T) {
	in := []stateEntry{{c: Counter{Rule: "r", Key: "k", Epoch: 9, Used: 12, Prev: 12}, balance: -8.5}}
	inSeen := []seenEntry{{origin: "node-b", c: Counter{Rule: "r", Key: "k", Epoch: 3, Used: 7, Prev: 7}}}
	origin, out, seen, err := decodeState(encodeState("node-a", in, inSeen))
	if err != nil || origin != "node-a" || fmt.Sprint(out) != fmt.Sprint(in) || fmt.Sprint(seen) != fmt.Sprint(inSeen) {
		t.Fatalf("state round trip: %q %v %v %v", origin, out, seen, err)
	}
	nanState := encodeState("x", []stateEntry{{c: Counter{Rule: "r", Key: "k"}, balance: 0}}, nil)
	// Overwrite the float64 (before the empty seen list) with NaN's bits.
	copy(nanState[len(nanState)-9:len(nanState)-1], []byte{0x7f, 0xf8, 0, 0, 0, 0, 0, 1})
	if _, _, _, err := decodeState(nanState); !errors.Is(err, mp.ErrMalformed) {
		t.Fatalf("NaN balance accepted: %v", err)
	}
}

func TestDecodeCountersRejectsGarbageAndAppliesNothing(t *testing.T) {
	good := func() []byte {
		w := newPacketWriter("a", 1300)
		w.add("a", Counter{Rule: "r", Key: "k", Epoch: 1, Used: 3})
		return first(w.packets())
	}()
	mpk := func(v any) []byte { b, _ := msgpack.Marshal(v); return b }
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)-1]},
		{"trailing byte", append(append([]byte{}, good...), 0)},
		{"not msgpack", []byte("GET / HTTP/1.1\r\n")},
		{"wrong type", mpk([]any{2, "a", []any{}, []any{}})},
		{"origin index out of range", mpk([]any{1, "a", []any{"a"}, []any{[]any{1, "r", "k", 1, 0, 1}}})},
		{"prev above used", mpk([]any{1, "a", []any{"a"}, []any{[]any{0, "r", "k", 1, 5, 1}}})},
		{"negative counter", mpk([]any{1, "a", []any{"a"}, []any{[]any{0, "r", "k", 1, 0, -1}}})},
		{"rule too long", mpk([]any{1, "a", []any{"a"}, []any{[]any{0, strings.Repeat("r", 200), "k", 1, 0, 1}}})},
		{"lying entry count", append(mpk([]any{1, "a", []any{"a"}})[:0:0], 0x94, 0x01, 0xa1, 'a', 0x91, 0xa1, 'a', 0xdd, 0x7f, 0xff, 0xff, 0xff)},
		{"good entry then garbage", mpk([]any{1, "a", []any{"a"}, []any{[]any{0, "r", "k", 1, 0, 1}, "junk"}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			applied := 0
			if _, err := decodeCounters(tt.b, func(string, Counter) { applied++ }); err == nil {
				t.Fatal("accepted")
			}
			if applied != 0 {
				t.Fatalf("a rejected packet applied %d entries", applied)
			}
		})
	}
}

func first(packets [][]byte, _ []int) []byte { return packets[0] }

// Counter entries carry a window only when it is not 0, and read back as
// written either way.
func TestCountersRoundTripWithAndWithoutWindow(t *testing.T) {
	tests := []struct {
		name   string
		c      Counter
		fields byte // the entry's msgpack fixarray header
	}{
		{"bucket", Counter{Rule: "api", Key: "alice", Epoch: 3, Prev: 1, Used: 4}, 0x96},
		{"first window", Counter{Rule: "api", Key: "alice", Epoch: 3, Window: 1, Prev: 1, Used: 4}, 0x97},
		{"large window", Counter{Rule: "api", Key: "alice", Epoch: 1 << 40, Window: 29_000_000, Prev: 0, Used: 1 << 33}, 0x97},
		{"largest window", Counter{Rule: "api", Key: "alice", Epoch: 1, Window: math.MaxUint64, Prev: 0, Used: 1}, 0x97},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newPacketWriter("a", 1300)
			w.add("b", tt.c)
			p := first(w.packets())
			// [1, "a", ["b"], [entry]]: the entry starts after 8 bytes.
			if p[8] != tt.fields {
				t.Fatalf("entry header 0x%02x, want 0x%02x", p[8], tt.fields)
			}
			if size := len(p) - 8; size > entryOverhead+len(tt.c.Rule)+len(tt.c.Key) {
				t.Fatalf("entry of %d bytes exceeds entryOverhead's bound", size)
			}
			var got []Counter
			if _, err := decodeCounters(p, func(origin string, c Counter) { got = append(got, c) }); err != nil || len(got) != 1 || got[0] != tt.c {
				t.Fatalf("round trip: %+v, %v; want %+v", got, err, tt.c)
			}
		})
	}
}

// A bucket counter's packet is byte for byte what it was before windows, so
// older peers read it.
func TestBucketEncodingsAreUnchanged(t *testing.T) {
	w := newPacketWriter("a", 1300)
	w.add("b", Counter{Rule: "api", Key: "alice", Epoch: 1 << 40, Prev: 2, Used: 300})
	want := []byte{
		0x94, 0x01, 0xa1, 'a', // [1, "a",
		0x91, 0xa1, 'b', //        ["b"],
		0x91, 0x96, 0x00, 0xa3, 'a', 'p', 'i', 0xa5, 'a', 'l', 'i', 'c', 'e', // [[0, "api", "alice",
		0xcf, 0, 0, 1, 0, 0, 0, 0, 0, // 1<<40,
		0x02,             // 2,
		0xcd, 0x01, 0x2c, // 300]]]
	}
	if got := first(w.packets()); !bytes.Equal(got, want) {
		t.Fatalf("bucket counters packet changed:\n got % x\nwant % x", got, want)
	}

	state := encodeState("a",
		[]stateEntry{{c: Counter{Rule: "r", Key: "k", Epoch: 1, Used: 5, Prev: 5}, balance: -1.5}},
		[]seenEntry{{origin: "b", c: Counter{Rule: "r", Key: "k", Epoch: 2, Used: 7, Prev: 7}}})
	want = []byte{
		0x94, 0x02, 0xa1, 'a', // [2, "a",
		0x91, 0x95, 0xa1, 'r', 0xa1, 'k', 0x01, 0x05, 0xcb, 0xbf, 0xf8, 0, 0, 0, 0, 0, 0, // [["r", "k", 1, 5, -1.5]],
		0x91, 0x95, 0xa1, 'b', 0xa1, 'r', 0xa1, 'k', 0x02, 0x07, // [["b", "r", "k", 2, 7]]]
	}
	if !bytes.Equal(state, want) {
		t.Fatalf("bucket push-pull state changed:\n got % x\nwant % x", state, want)
	}
}

// Entries as older peers write them (no window) still decode, with Window 0.
func TestEntriesWithoutWindowDecode(t *testing.T) {
	mpk := func(v any) []byte { b, _ := msgpack.Marshal(v); return b }
	var got []Counter
	_, err := decodeCounters(mpk([]any{1, "a", []any{"b"}, []any{[]any{0, "r", "k", 4, 1, 3}}}), func(_ string, c Counter) { got = append(got, c) })
	if want := (Counter{Rule: "r", Key: "k", Epoch: 4, Prev: 1, Used: 3}); err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("six-field counter: %+v, %v", got, err)
	}
	_, entries, seen, err := decodeState(mpk([]any{2, "a", []any{[]any{"r", "k", 4, 3, -2.0}}, []any{[]any{"b", "r", "k", 5, 6}}}))
	if err != nil || len(entries) != 1 || entries[0].c != (Counter{Rule: "r", Key: "k", Epoch: 4, Prev: 3, Used: 3}) ||
		len(seen) != 1 || seen[0].c != (Counter{Rule: "r", Key: "k", Epoch: 5, Prev: 6, Used: 6}) {
		t.Fatalf("five-field state and seen entries: %+v %+v %v", entries, seen, err)
	}
}

func TestStateRoundTripsWindows(t *testing.T) {
	in := []stateEntry{
		{c: Counter{Rule: "r", Key: "k", Epoch: 9, Window: 77, Used: 12, Prev: 12}, balance: -8.5},
		{c: Counter{Rule: "r", Key: "bucket", Epoch: 9, Used: 1, Prev: 1}, balance: 2},
	}
	inSeen := []seenEntry{
		{origin: "node-b", c: Counter{Rule: "r", Key: "k", Epoch: 3, Window: math.MaxUint64, Used: 7, Prev: 7}},
		{origin: "node-c", c: Counter{Rule: "r", Key: "k", Epoch: 3, Used: 7, Prev: 7}},
	}
	origin, out, seen, err := decodeState(encodeState("node-a", in, inSeen))
	if err != nil || origin != "node-a" || !slices.Equal(out, in) || !slices.Equal(seen, inSeen) {
		t.Fatalf("state round trip: %q %+v %+v %v", origin, out, seen, err)
	}
}

// A window of 0 must be omitted, not sent; entries of other lengths, and
// windows that are not unsigned integers, are refused too.
func TestMalformedWindowsAreRefused(t *testing.T) {
	mpk := func(v any) []byte { b, _ := msgpack.Marshal(v); return b }
	counters := func(entry ...any) []byte { return mpk([]any{1, "a", []any{"a"}, []any{entry}}) }
	state := func(entry ...any) []byte { return mpk([]any{2, "a", []any{entry}, []any{}}) }
	seen := func(entry ...any) []byte { return mpk([]any{2, "a", []any{}, []any{entry}}) }
	tests := []struct {
		name string
		b    []byte
	}{
		{"counter with window 0", counters(0, "r", "k", 1, 0, 1, 0)},
		{"counter with a negative window", counters(0, "r", "k", 1, 0, 1, -1)},
		{"counter with a string window", counters(0, "r", "k", 1, 0, 1, "5")},
		{"counter of 8 fields", counters(0, "r", "k", 1, 0, 1, 5, 5)},
		{"counter of 5 fields", counters(0, "r", "k", 1, 1)},
		{"state entry with window 0", state("r", "k", 1, 1, 0.5, 0)},
		{"state entry with a float window", state("r", "k", 1, 1, 0.5, 2.0)},
		{"state entry of 7 fields", state("r", "k", 1, 1, 0.5, 2, 2)},
		{"seen entry with window 0", seen("b", "r", "k", 1, 1, 0)},
		{"seen entry with a negative window", seen("b", "r", "k", 1, 1, -3)},
		{"seen entry of 7 fields", seen("b", "r", "k", 1, 1, 2, 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.b[1] == msgCounters {
				applied := 0
				_, err = decodeCounters(tt.b, func(string, Counter) { applied++ })
				if applied != 0 {
					t.Fatalf("a refused packet applied %d entries", applied)
				}
			} else {
				_, _, _, err = decodeState(tt.b)
			}
			if !errors.Is(err, mp.ErrMalformed) {
				t.Fatalf("want ErrMalformed, got %v", err)
			}
		})
	}
}
