package gossip

import (
	"net/netip"
	"testing"
)

// A node that first heard a peer's counter midway (its first packets lost)
// has not charged what lies below: a push-pull state from that peer
// explains it, the lower balance is taken, and the counter is then
// accounted for from its start, so a late packet naming it charges nothing.
func TestStateExplainsWhatLiesBelowACounterFirstHeardMidway(t *testing.T) {
	s, l, _ := newBoundSyncer()
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: 1, Prev: 40, Used: 50}))
	if got := bal(l, "k"); got != 90 {
		t.Fatalf("balance %v after a counter first heard midway, want 90", got)
	}
	s.mergeState(encodeState("peer", []stateEntry{{c: Counter{Rule: "r", Key: "k", Epoch: 1, Used: 50}, balance: 50}}, nil))
	if got := bal(l, "k"); got != 50 {
		t.Fatalf("balance %v after the peer's state, want 50 (its counter explains the 40 below)", got)
	}
	s.receive(packet(s, "peer", true, Counter{Rule: "r", Key: "k", Epoch: 1, Prev: 0, Used: 50}))
	if got := bal(l, "k"); got != 50 || s.stats.SuspiciousReports.Load() != 0 {
		t.Fatalf("a late packet of the explained part left the balance at %v (suspicious %d), want 50 and none",
			got, s.stats.SuspiciousReports.Load())
	}
}

// A member's counter first heard midway asks for a push-pull with its
// sender, once per seen range, and only when the part below is recent
// enough to matter (at most a burst and repairHorizon of rate).
func TestCounterFirstHeardMidwayAsksForARepair(t *testing.T) {
	tests := []struct {
		name   string
		sender string
		cs     []Counter
		want   bool
	}{
		{name: "heard from its start", sender: "peer", cs: []Counter{{Prev: 0, Used: 10}}},
		{name: "first heard midway", sender: "peer", cs: []Counter{{Prev: 40, Used: 50}}, want: true},
		{name: "midway, but the part below is old", sender: "peer", cs: []Counter{{Prev: 100 + 100*5 + 1, Used: 700}}},
		{name: "from a name that is no member", sender: "ghost", cs: []Counter{{Prev: 40, Used: 50}}},
		{name: "the start arrives first, then a later packet", sender: "peer", cs: []Counter{{Prev: 0, Used: 10}, {Prev: 20, Used: 30}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, _ := newBoundSyncer()
			for _, c := range tt.cs {
				c.Rule, c.Key, c.Epoch = "r", "k", 1
				s.receive(packet(s, tt.sender, true, c))
			}
			if got := s.repair.want[tt.sender]; got != tt.want {
				t.Fatalf("repair asked of %s: %v, want %v", tt.sender, got, tt.want)
			}
			if tt.want {
				delete(s.repair.want, tt.sender)
				s.receive(packet(s, tt.sender, true, Counter{Rule: "r", Key: "k", Epoch: 1, Prev: 50, Used: 60}))
				if s.repair.want[tt.sender] {
					t.Fatal("the same seen range asked for a repair twice")
				}
			}
		})
	}
}

// The sender guard tells the syncer of a keyed counters packet from a
// sender that is no member here (a peer that counts this node a member:
// this node restarted under its name), and of nothing else: not a
// member's packet, not an unkeyed one (its source could be made up).
func TestGuardNotesKeyedStrangers(t *testing.T) {
	body := func(sender string) []byte {
		w := newPacketWriter(sender, 1<<16)
		w.add(sender, Counter{Rule: "r", Key: "k", Epoch: 1, Used: 3})
		return first(w.packets())
	}
	tests := []struct {
		name   string
		keyed  bool
		sender string
		src    netip.AddrPort
		want   bool
	}{
		{"a keyed stranger", true, "s0", nobody, true},
		{"a member", true, "a", senderA, false},
		{"an unkeyed stranger", false, "s0", nobody, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var noted []netip.AddrPort
			g := &senderGuard{label: []byte("test"), encryption: tt.keyed, verify: tt.keyed,
				keys: testKeys, book: fixedBook, vouch: newVouches(), stranger: func(a netip.AddrPort) { noted = append(noted, a) }}
			p := labelled(userMsg(body(tt.sender)), "test")
			if tt.keyed {
				p = labelled(sealTest(t, 1, userMsg(body(tt.sender)), "test", 0), "test")
			}
			if r := g.check(p, tt.src); r.reason != "" {
				t.Fatalf("refused for %q", r.reason)
			}
			if got := len(noted) == 1 && noted[0] == tt.src; got != tt.want {
				t.Fatalf("noted %v, want the source noted: %v", noted, tt.want)
			}
		})
	}
	// The syncer holds a bounded number of strangers' addresses.
	s, _, _ := newBoundSyncer()
	for i := range 3 * maxStrangers {
		s.noteStranger(netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(1000+i)))
	}
	if len(s.repair.strangers) != maxStrangers {
		t.Fatalf("%d strangers held, want the cap %d", len(s.repair.strangers), maxStrangers)
	}
}
