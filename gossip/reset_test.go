package gossip

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

func TestResetMessageRoundTripsAndRejectsMalformed(t *testing.T) {
	entries := []resetEntry{{"api", "alice", 7}, {"api#1", "alice", 7}}
	for _, resend := range []bool{false, true} {
		sender, got, gotResend, err := decodeResets(encodeResets("n1", entries, resend))
		if err != nil || sender != "n1" || len(got) != 2 || got[0] != entries[0] || got[1] != entries[1] || gotResend != resend {
			t.Fatalf("round trip (resend %v): %q %+v %v %v", resend, sender, got, gotResend, err)
		}
	}
	entry := func(limit, key string, at uint64) []byte {
		b := mp.AppendArrayHeader(nil, 3)
		b = mp.AppendUint(b, msgReset)
		b = mp.AppendStr(b, "n1")
		b = mp.AppendArrayHeader(b, 1)
		b = mp.AppendArrayHeader(b, 3)
		b = mp.AppendStr(b, limit)
		b = mp.AppendStr(b, key)
		return mp.AppendUint(b, at)
	}
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "reset message"},
		{"empty key", entry("api", "", 1), "empty limit or key"},
		{"instant 0", entry("api", "k", 0), "instant 0"},
		{"rule too long", entry(strings.Repeat("r", maxRuleLen+1), "k", 1), "limit of"},
		{"truncated", entry("api", "k", 1)[:12], "reset message"},
		{"trailing bytes", append(entry("api", "k", 1), 0), "reset message"},
		{"resend false", mp.AppendBool(append(mp.AppendArrayHeader(nil, 4), entry("api", "k", 1)[1:]...), false), "resend sent false"},
		{"lying count", mp.AppendArrayHeader(mp.AppendStr(mp.AppendUint(mp.AppendArrayHeader(nil, 3), msgReset), "n1"), 1<<30), "longer than frame"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, _, err := decodeResets(tt.b); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// An older peer's decoder refuses a reset message whole (wrong type), so it
// applies none of it; this version ignores kinds newer than it knows.
func TestResetKindIsRefusedByOlderDecodersAndUnknownKindsIgnored(t *testing.T) {
	if _, err := decodeCounters(encodeResets("n1", []resetEntry{{"api", "k", 1}}, false), func(string, Counter) {
		t.Fatal("an older decoder applied an entry of a reset message")
	}); err == nil {
		t.Fatal("the counters decoder accepted a reset message")
	}
	l := newResetLedger()
	s := newBareSyncer(l)
	future := mp.AppendUint(mp.AppendArrayHeader(nil, 2), msgAggNotice+1)
	s.receive(append(future, 0xc0))
	if s.stats.IgnoredPackets.Load() != 1 || s.stats.BadPackets.Load() != 0 {
		t.Fatalf("unknown kind: ignored %d, bad %d; want 1, 0", s.stats.IgnoredPackets.Load(), s.stats.BadPackets.Load())
	}
}

// resetLedger is a memLedger that records resets.
type resetLedger struct {
	*memLedger
	resets    []resetEntry
	olderOnly []bool
}

func newResetLedger() *resetLedger { return &resetLedger{memLedger: newMemLedger()} }

func (l *resetLedger) Reset(limit, key string, at uint64, olderOnly bool) {
	l.mu.Lock()
	l.resets = append(l.resets, resetEntry{limit, key, at})
	l.olderOnly = append(l.olderOnly, olderOnly)
	l.mu.Unlock()
}

// newBareSyncer is a syncer without memberlist, for receive and apply.
func newBareSyncer(l Ledger) *Syncer {
	s := &Syncer{cfg: Config{MaxSeen: 100, MaxPending: 100, FanoutLimit: 10}, ledger: l, self: "me",
		seen: map[counterKey]*seenRange{}, pending: map[pendingKey]*pendingCounter{}, resets: newResetState(), log: hclog.NewNullLogger()}
	s.members.Store(3)
	return s
}

// After a reset, a peer's counters of the key's earlier epochs charge
// nothing, whether they were already heard (a duplicate), arrive late (in
// flight at the reset), or come from a push-pull state; counters of a later
// epoch charge as usual. A second, older reset changes nothing.
func TestResetRefusesEarlierEpochsAndChargesLaterOnes(t *testing.T) {
	l := newResetLedger()
	s := newBareSyncer(l)
	counters := func(cs ...Counter) []byte {
		w := newPacketWriter("peer", 1<<16)
		for _, c := range cs {
			w.add("peer", c)
		}
		p, _ := w.packets()
		return stampNow(p[0])
	}
	s.receive(counters(Counter{Rule: "api", Key: "k", Epoch: 10, Prev: 0, Used: 5}))
	s.mu.Lock()
	s.queueLocked("peer", Counter{Rule: "api", Key: "k", Epoch: 10, Used: 5}, 3)
	s.queueLocked("peer", Counter{Rule: "api", Key: "other", Epoch: 10, Used: 5}, 3)
	s.mu.Unlock()
	if got := l.get("api/k"); got != 5 {
		t.Fatalf("charged %d before the reset, want 5", got)
	}

	if n := s.applyResets([]resetEntry{{"api", "k", 100}}, false); n != 1 || len(l.resets) != 1 {
		t.Fatalf("applied %d resets, ledger saw %v", n, l.resets)
	}
	if _, ok := s.pending[pendingKey{counterKey{"peer", "api", "k"}, 0, 10}]; ok {
		t.Error("a pending counter of the reset key survived the reset")
	}
	if _, ok := s.pending[pendingKey{counterKey{"peer", "api", "other"}, 0, 10}]; !ok {
		t.Error("the reset dropped another key's pending counter")
	}
	if len(s.Origins("api", "k")) != 0 {
		t.Error("counters heard before the reset are still listed")
	}
	// Late and duplicate counters of the old epoch: nothing.
	s.receive(counters(Counter{Rule: "api", Key: "k", Epoch: 10, Prev: 5, Used: 9}, Counter{Rule: "api", Key: "k", Epoch: 10, Prev: 0, Used: 5}))
	s.mergeState(encodeState("peer", []stateEntry{{c: Counter{Rule: "api", Key: "k", Epoch: 10, Used: 9, Prev: 9}, balance: -50}}, nil))
	if got := l.get("api/k"); got != 5 {
		t.Fatalf("charged %d after the reset by old counters, want still 5", got)
	}
	// The peer's bucket after the reset: charged.
	s.receive(counters(Counter{Rule: "api", Key: "k", Epoch: 101, Prev: 0, Used: 2}))
	if got := l.get("api/k"); got != 7 {
		t.Fatalf("charged %d, want 5 + 2 after the reset", got)
	}
	// An older reset, or the same one heard again, is not applied again.
	if n := s.applyResets([]resetEntry{{"api", "k", 50}, {"api", "k", 100}}, false); n != 0 || len(l.resets) != 1 {
		t.Fatalf("applied %d stale resets", n)
	}
	// A newer one is; told again on a rejoin, it clears only older buckets.
	s.receive(encodeResets("peer", []resetEntry{{"api", "k", 200}}, true))
	if len(l.resets) != 2 || l.resets[1].at != 200 || !l.olderOnly[1] || l.olderOnly[0] {
		t.Fatalf("resets applied %v, older only %v", l.resets, l.olderOnly)
	}
}

func TestResetTableIsBounded(t *testing.T) {
	s := newBareSyncer(newResetLedger())
	for i := range maxResets + 10 {
		s.applyResets([]resetEntry{{"api", "k" + strconv.Itoa(i), uint64(i + 1)}}, false)
	}
	if n := len(s.resets.table); n > maxResets {
		t.Fatalf("reset table holds %d, cap %d", n, maxResets)
	}
}

// Any bytes: decodeResets refuses them with ErrMalformed or returns entries
// that re-encode to the same bytes.
func FuzzDecodeResets(f *testing.F) {
	f.Add(encodeResets("n1", []resetEntry{{"api", "alice", 7}, {"api#1", "alice", 7}}, false))
	f.Add(encodeResets("n1", []resetEntry{{"api", "k", 1}}, true))
	for _, b := range malformedPeerBytes {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sender, entries, resend, err := decodeResets(b)
		if err != nil {
			if !errors.Is(err, mp.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if again := encodeResets(sender, entries, resend); !bytes.Equal(again, b) {
			// msgpack has several encodings of one value; ours is canonical,
			// so a decoded message must at least decode again the same.
			s2, e2, r2, err := decodeResets(again)
			if err != nil || s2 != sender || r2 != resend || !slices.Equal(e2, entries) {
				t.Fatalf("re-encoding changed the message: %v", err)
			}
		}
	})
}
