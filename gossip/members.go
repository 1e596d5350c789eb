package gossip

// Membership bookkeeping: the event delegate keeps the syncer's own copies
// of the live members (peers), the members that went away (failed, for
// reconnecting and for the census) and the members that came back
// (rejoined).

import (
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

// rejoin is a member's return: when, on the syncer's clock since it was
// made, and how long it had been away.
type rejoin struct{ at, away time.Duration }

// failedMember is a member that went away, how, and when.
type failedMember struct {
	addr  string
	since time.Time
	heard time.Time // when its counters were last heard here (zero: never; see goneSinceLocked)
	left  bool      // it said it was leaving; otherwise memberlist declared it dead
}

// reconnectGiveUp is how long a member that went away is tried again.
const reconnectGiveUp = time.Hour

// reconnect tries to rejoin members that went away: after a partition
// heals, or a crashed node returns, the two sides find each other again.
func (s *Syncer) reconnect() {
	s.retryOwed()
	if s.leaving.Load() {
		return // this node said it was going: it rejoins no one
	}
	s.mu.Lock()
	addrs := make([]string, 0, len(s.failed))
	for name, f := range s.failed {
		if s.clock().Sub(f.since) > reconnectGiveUp {
			delete(s.failed, name)
			s.noteSenderLocked(name) // senderbook.go: its address is no longer reserved
			continue
		}
		addrs = append(addrs, f.addr)
	}
	s.mu.Unlock()
	if len(addrs) == 0 {
		return
	}
	if n, _ := s.list().Join(addrs); n > 0 {
		s.log.Info("rejoined members that had gone away", "answered", n)
	}
}

// NumAlive is the number of members (this one included) believed alive
// (memberlist counts a suspected member as alive); 0 before Start.
func (s *Syncer) NumAlive() int {
	ml := s.list()
	if ml == nil {
		return 0
	}
	return ml.NumMembers()
}

// events adapts the syncer to memberlist.EventDelegate: it keeps the
// membership bookkeeping and logs the changes.
type events Syncer

// The callbacks run with memberlist's node lock held, so *n may be read
// (and copied) here, and only here.

func (e *events) NotifyJoin(n *memberlist.Node) {
	e.members.Add(1)
	e.mu.Lock()
	if f, ok := e.failed[n.Name]; ok {
		if e.rejoined == nil {
			e.rejoined = map[string]rejoin{}
		}
		if _, ok := e.rejoined[n.Name]; ok || len(e.rejoined) < maxOrigins {
			e.rejoined[n.Name] = rejoin{at: (*Syncer)(e).sinceBorn(), away: max(0, (*Syncer)(e).clock().Sub((*Syncer)(e).goneSinceLocked(f)))}
		}
	}
	delete(e.failed, n.Name)
	node := copyNode(n)
	if e.shared != nil { // a simulation's table holds it already (simshared.go)
		(*Syncer)(e).ownerMemberLocked(n.Name)
	} else {
		e.peers[n.Name] = node
		if _, ok := e.peerIndex[n.Name]; !ok {
			(*Syncer)(e).ownerMemberLocked(n.Name) // owner.go
		}
		(*Syncer)(e).addPeerLocked(n.Name)
	}
	(*Syncer)(e).noteSenderLocked(n.Name) // senderbook.go
	e.mu.Unlock()
	(*Syncer)(e).queueResend(node)
	e.log.Info("member joined", "name", n.Name, "addr", n.Address())
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	e.members.Add(-1)
	// memberlist does not say whether the node died or left (n.State is
	// never set: memberlist v0.7.0 keeps the state in its own nodeState,
	// which shadows Node.State), but a Sluice node says in its metadata
	// that it is leaving before it leaves (Syncer.Leave). Both are retried;
	// a node that left refuses the connection, which is cheap.
	m, _ := decodeMeta(n.Meta)
	left := m.Leaving
	e.mu.Lock()
	if e.shared != nil { // a simulation's table dropped it already (simshared.go)
		(*Syncer)(e).ownerMemberLocked(n.Name)
	} else {
		delete(e.peers, n.Name)
		if _, ok := e.peerIndex[n.Name]; ok {
			(*Syncer)(e).ownerMemberLocked(n.Name) // owner.go
		}
		(*Syncer)(e).removePeerLocked(n.Name)
	}
	if _, ok := e.failed[n.Name]; ok || len(e.failed) < maxOrigins {
		e.failed[n.Name] = failedMember{addr: n.Address(), since: (*Syncer)(e).clock(), heard: e.heardAt[n.Name], left: left}
	}
	(*Syncer)(e).noteSenderLocked(n.Name) // senderbook.go
	e.mu.Unlock()
	how := "dead"
	if left {
		how = "left"
	}
	e.log.Info("member left or died", "name", n.Name, "as", how)
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	e.mu.Lock()
	if e.shared == nil {
		e.peers[n.Name] = copyNode(n)
	}
	(*Syncer)(e).noteSenderLocked(n.Name) // senderbook.go
	e.owner.ring = nil                    // its capability may have changed (owner.go)
	e.mu.Unlock()
	e.log.Debug("member updated", "name", n.Name)
}

// copyNode copies a node, its address and metadata included.
func copyNode(n *memberlist.Node) memberlist.Node {
	c := *n
	c.Addr = append(net.IP(nil), n.Addr...)
	c.Meta = append([]byte(nil), n.Meta...)
	return c
}
