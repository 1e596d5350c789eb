package gossip

import (
	"testing"
	"time"
)

// A node leaving in owner mode is settled only once its own counters are
// acknowledged and every aggregate it owns has told each contributor still
// a member the latest total (and heard it confirmed, from one that
// confirms); a departed contributor, its own share and counters relayed
// for others do not hold it.
func TestLeaveSettlesOwnCountersAndAnswers(t *testing.T) {
	k := aggKey{"api", "k", 0}
	tests := []struct {
		name    string
		pending []string // origins of pending counters
		dirty   bool
		subs    map[string]ownerSub // contributors; the aggregate's total is 10
		want    bool
	}{
		{name: "nothing", want: true},
		{name: "own counter unacknowledged", pending: []string{"me"}, want: false},
		{name: "a relayed counter", pending: []string{"a"}, want: true},
		{name: "a count not yet answered", dirty: true, subs: map[string]ownerSub{"a": {contrib: 4, sent: 6}}, want: false},
		{name: "a contributor told less than the total", subs: map[string]ownerSub{"a": {contrib: 4, sent: 5}}, want: false},
		{name: "an ack not yet sent", subs: map[string]ownerSub{"a": {contrib: 4, sent: 6, needAck: true}}, want: false},
		{name: "told, not confirmed", subs: map[string]ownerSub{"a": {contrib: 4, sent: 6, heardAcks: true, told: 5}}, want: false},
		{name: "told and confirmed", subs: map[string]ownerSub{"a": {contrib: 4, sent: 6, heardAcks: true, told: 6}}, want: true},
		{name: "told, an old version (no confirmations)", subs: map[string]ownerSub{"a": {contrib: 4, sent: 6}}, want: true},
		{name: "a departed contributor behind", subs: map[string]ownerSub{"gone": {contrib: 4, sent: 1}}, want: true},
		{name: "its own share", subs: map[string]ownerSub{"me": {contrib: 4}}, want: true},
		{name: "one of two behind", subs: map[string]ownerSub{"a": {contrib: 4, sent: 6}, "b": {contrib: 6, sent: 0}}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newOwnerSyncer("me", "a", "b")
			for i, origin := range tt.pending {
				s.pending[pendingKey{counterKey{origin, "api", "k"}, 0, uint64(i)}] = &pendingCounter{c: Counter{Rule: "api", Key: "k", Used: 1}}
			}
			if tt.subs != nil || tt.dirty {
				o := &ownedKey{total: 10, dirty: tt.dirty, subs: map[string]*ownerSub{}}
				for name, sub := range tt.subs {
					o.subs[name] = &sub
				}
				s.owner.mine = map[aggKey]*ownedKey{k: o}
			}
			s.mu.Lock()
			got := s.ownerSettledLocked()
			s.mu.Unlock()
			if got != tt.want {
				t.Fatalf("settled %v, want %v", got, tt.want)
			}
		})
	}
}

// Settling is bounded: an unacknowledged counter holds a leaving node no
// longer than it was given; a settled node, or one not in owner mode,
// does not wait at all.
func TestLeaveSettlingIsBounded(t *testing.T) {
	s, _ := newOwnerSyncer("me", "a")
	if !s.settleBeforeLeave(time.Hour) {
		t.Fatal("a node with nothing unsettled did not settle")
	}
	s.pending[pendingKey{counterKey{"me", "api", "k"}, 0, 1}] = &pendingCounter{c: Counter{Rule: "api", Key: "k", Used: 1}}
	began := time.Now()
	if s.settleBeforeLeave(100 * time.Millisecond) {
		t.Fatal("settled with its own counter unacknowledged")
	}
	if took := time.Since(began); took < 100*time.Millisecond || took > 30*time.Second {
		t.Fatalf("gave up after %s, want after 100ms (and well before 30 s)", took)
	}
	s.cfg.GossipMode = ModeDirect
	if !s.settleBeforeLeave(time.Hour) {
		t.Fatal("a node outside owner mode waited to settle")
	}
}

// A settled, leaving owner counts and acknowledges no more counters: their
// sender keeps them for the key's next owner. Before it leaves it counts
// them as any owner does.
func TestLeavingOwnerLeavesNewCountersToTheNextOwner(t *testing.T) {
	for _, leaving := range []bool{false, true} {
		s, _ := newOwnerSyncer("me", "a")
		s.leaving.Store(leaving)
		pw := newPacketWriter("a", 1300)
		pw.add("a", Counter{Rule: "api", Key: "k", Epoch: 5, Used: 3})
		ps, _ := pw.packets()
		if _, err := s.receiveOwnerCounters(toOwnerPacket(ps[0], uint64(time.Now().UnixNano()))); err != nil {
			t.Fatalf("leaving %v: %v", leaving, err)
		}
		s.mu.Lock()
		o := s.owner.mine[aggKey{"api", "k", 0}]
		s.mu.Unlock()
		switch {
		case leaving && o != nil:
			t.Fatalf("a leaving owner counted %d", o.total)
		case !leaving && (o == nil || o.total != 3):
			t.Fatalf("an owner did not count the counter: %+v", o)
		}
	}
}
