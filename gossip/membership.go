package gossip

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// Membership is what the syncer uses of memberlist once it runs: sending
// to a member, joining, leaving, re-advertising its metadata, and the
// member count and list. *memberlist.Memberlist is one (what Start makes);
// a simulator supplies another (see Syncer.Simulate). memberlist's callbacks
// into the syncer go the other way, through memberlist.Delegate and
// memberlist.EventDelegate.
type Membership interface {
	SendBestEffort(to *memberlist.Node, msg []byte) error
	SendReliable(to *memberlist.Node, msg []byte) error
	Join(existing []string) (int, error)
	Leave(timeout time.Duration) error
	UpdateNode(timeout time.Duration) error
	NumMembers() int
	Members() []*memberlist.Node
	LocalNode() *memberlist.Node
	Shutdown() error
}

var _ Membership = (*memberlist.Memberlist)(nil)

// membershipRef holds the syncer's Membership for an atomic.Pointer (which
// cannot hold an interface itself).
type membershipRef struct{ m Membership }
