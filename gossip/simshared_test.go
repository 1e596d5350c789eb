package gossip

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// nopMembership is a Membership that sends nowhere.
type nopMembership struct{ self memberlist.Node }

func (nopMembership) SendBestEffort(*memberlist.Node, []byte) error { return nil }
func (nopMembership) SendReliable(*memberlist.Node, []byte) error   { return nil }
func (nopMembership) Join([]string) (int, error)                    { return 0, nil }
func (nopMembership) Leave(time.Duration) error                     { return nil }
func (nopMembership) UpdateNode(time.Duration) error                { return nil }
func (nopMembership) NumMembers() int                               { return 0 }
func (nopMembership) Members() []*memberlist.Node                   { return nil }
func (m nopMembership) LocalNode() *memberlist.Node                 { return &m.self }
func (nopMembership) Shutdown() error                               { return nil }

// A simulated syncer over a shared member table sees what one keeping its
// own copies sees, through joins and leaves: the same members, round
// targets, member count, ring and owners.
func TestSharedMembersMatchOwnCopies(t *testing.T) {
	clock := func() time.Time { return time.Unix(1e9, 0) }
	node := func(i int) memberlist.Node {
		return memberlist.Node{Name: fmt.Sprint("n", i), Port: uint16(i), DMax: protoOwner}
	}
	table := NewSharedMembers()
	for i := range 20 {
		table.Add(node(i))
	}
	if table.Add(node(3)) || table.Len() != 20 {
		t.Fatalf("a member added twice: %d members", table.Len())
	}
	mk := func() *Syncer {
		s, err := New(Config{NodeName: "n3", GossipMode: ModeOwner}, newMemLedger())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	shared, own := mk(), mk()
	_, sharedEv, err := shared.SimulateShared(nopMembership{node(3)}, table, clock, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, ownEv, err := own.Simulate(nopMembership{node(3)}, clock, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		n := node(i)
		ownEv.NotifyJoin(&n)
	}
	same := func(when string) {
		t.Helper()
		shared.mu.Lock()
		defer shared.mu.Unlock()
		own.mu.Lock()
		defer own.mu.Unlock()
		names := func(ns []*memberlist.Node) []string {
			var out []string
			for _, n := range ns {
				out = append(out, n.Name)
			}
			return out
		}
		if a, b := names(shared.targetsLocked(true)), names(own.targetsLocked(true)); !slices.Equal(a, b) {
			t.Fatalf("%s: targets %v, own copies %v", when, a, b)
		}
		if a, b := shared.members.Load(), own.members.Load(); a != b {
			t.Fatalf("%s: %d members, own copies %d", when, a, b)
		}
		shared.refreshRingLocked()
		own.refreshRingLocked()
		if shared.owner.fp != own.owner.fp || shared.owner.ring.size() != own.owner.ring.size() {
			t.Fatalf("%s: ring of %d (fingerprint %x), own copies %d (%x)", when, shared.owner.ring.size(), shared.owner.fp,
				own.owner.ring.size(), own.owner.fp)
		}
		for k := range 200 {
			key := fmt.Sprint("key-", k)
			a1, a2 := shared.owner.ring.owners("r", key)
			b1, b2 := own.owner.ring.owners("r", key)
			if a1 != b1 || a2 != b2 {
				t.Fatalf("%s: %s owned by %s/%s, own copies %s/%s", when, key, a1, a2, b1, b2)
			}
		}
	}
	same("formed")
	joined := node(20)
	table.Add(joined)
	sharedEv.NotifyJoin(&joined)
	ownEv.NotifyJoin(&joined)
	same("after a join")
	gone := node(5)
	if !table.Remove(gone.Name) || table.Remove(gone.Name) {
		t.Fatal("a member removed other than once")
	}
	sharedEv.NotifyLeave(&gone)
	ownEv.NotifyLeave(&gone)
	same("after a leave")
	if _, _, err := shared.SimulateShared(nopMembership{node(3)}, table, clock, 1); err == nil {
		t.Fatal("a simulated syncer simulated again")
	}
}
