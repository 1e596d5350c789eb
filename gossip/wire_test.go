package gossip

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicelabs/sluice/ipc/mp"
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
