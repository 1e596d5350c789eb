package gossip

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// A shared member table for simulations. Each syncer keeps its own copy of
// every live member (peers, with peerNames and peerIndex: members.go,
// targets.go), because memberlist rewrites its own nodes in place. A
// simulator running thousands of syncers in one process, all of which see
// the same membership, would hold N copies of N members (about 200 B per
// member per syncer: 20 GB at 10,000 nodes) and make N² join calls to form
// the cluster. SharedMembers is one table those syncers read instead: the
// simulator adds or removes a member once, then tells each live syncer
// through its event delegate (NotifyJoin/NotifyLeave), which then keeps
// only what is its own (the member count, the ring's fingerprint, the
// members that went away). Production syncers never have one.

// SharedMembers is a member table the simulated syncers of one process
// share (see SimulateShared). It is not safe for concurrent use: the
// simulator and every syncer over it run on one goroutine.
type SharedMembers struct {
	peers map[string]memberlist.Node
	names []string       // in the order they joined, as peerNames
	index map[string]int // of names
	fp    uint64         // XOR of memberHash of every member
}

// NewSharedMembers returns an empty table.
func NewSharedMembers() *SharedMembers {
	return &SharedMembers{peers: map[string]memberlist.Node{}, index: map[string]int{}}
}

// Add records a live member; false if it was one already.
func (m *SharedMembers) Add(n memberlist.Node) bool {
	if _, ok := m.index[n.Name]; ok {
		return false
	}
	m.peers[n.Name] = copyNode(&n)
	m.index[n.Name] = len(m.names)
	m.names = append(m.names, n.Name)
	m.fp ^= memberHash(n.Name)
	return true
}

// Remove forgets a member (swapping the last joined into its place, as
// removePeerLocked does); false if it was none.
func (m *SharedMembers) Remove(name string) bool {
	i, ok := m.index[name]
	if !ok {
		return false
	}
	last := len(m.names) - 1
	m.names[i] = m.names[last]
	m.index[m.names[i]] = i
	m.names[last] = ""
	m.names = m.names[:last]
	delete(m.index, name)
	delete(m.peers, name)
	m.fp ^= memberHash(name)
	return true
}

// Len is the number of members.
func (m *SharedMembers) Len() int { return len(m.names) }

// SimulateShared is Simulate over a member table shared with the other
// syncers of the simulation, instead of the syncer's own copies: the
// syncer starts with every member table holds (as if it had been told of
// each: no join calls), and reads the table from then on. The simulator
// changes the table first (Add, Remove) and then calls NotifyJoin or
// NotifyLeave on each live syncer over it, once per change.
func (s *Syncer) SimulateShared(m Membership, table *SharedMembers, now func() time.Time, seed uint64) (memberlist.Delegate, memberlist.EventDelegate, error) {
	dg, ev, err := s.Simulate(m, now, seed)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shared = table
	s.peers = table.peers
	s.members.Store(int64(table.Len()))
	s.owner.fp = table.fp // ownerMemberLocked's sum leaves this node out
	if _, ok := table.index[s.self]; ok {
		s.owner.fp ^= memberHash(s.self)
	}
	s.owner.ring = nil
	return dg, ev, nil
}

// peerNamesLocked is the live members' names in the order they joined:
// the shared table's in a simulation over one. Caller holds s.mu.
func (s *Syncer) peerNamesLocked() []string {
	if s.shared != nil {
		return s.shared.names
	}
	return s.peerNames
}
