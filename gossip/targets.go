package gossip

import (
	"cmp"
	"slices"

	"github.com/hashicorp/memberlist"
)

// A round's targets. The live members' names are also kept in a slice
// (peerNames, in the order they joined, with peerIndex locating each), so
// that a relayed round picks its GossipNodes random targets in O(GossipNodes)
// instead of copying and shuffling every member, and a fan-out round visits
// members in an order that does not depend on map iteration (a simulation
// with a seed then repeats itself). Both under mu.

// addPeerLocked records a live member's name. Caller holds s.mu.
func (s *Syncer) addPeerLocked(name string) {
	if _, ok := s.peerIndex[name]; ok {
		return
	}
	if s.peerIndex == nil {
		s.peerIndex = map[string]int{}
	}
	s.peerIndex[name] = len(s.peerNames)
	s.peerNames = append(s.peerNames, name)
}

// removePeerLocked forgets a member's name (swapping the last into its
// place). Caller holds s.mu.
func (s *Syncer) removePeerLocked(name string) {
	i, ok := s.peerIndex[name]
	if !ok {
		return
	}
	last := len(s.peerNames) - 1
	s.peerNames[i] = s.peerNames[last]
	s.peerIndex[s.peerNames[i]] = i
	s.peerNames[last] = ""
	s.peerNames = s.peerNames[:last]
	delete(s.peerIndex, name)
}

// othersLocked is how many live members there are besides this node.
// Caller holds s.mu.
func (s *Syncer) othersLocked() int {
	if _, ok := s.peers[s.self]; ok {
		return len(s.peers) - 1
	}
	return len(s.peers)
}

// targetsLocked returns copies of the members a round sends to: every
// member but this one with fan-out, else GossipNodes distinct random ones
// (all of them when there are no more). Caller holds s.mu.
func (s *Syncer) targetsLocked(fanout bool) []*memberlist.Node {
	others := s.othersLocked()
	names := s.peerNamesLocked()
	if fanout || others <= s.cfg.GossipNodes {
		targets := make([]*memberlist.Node, 0, others)
		for _, name := range names {
			if n, ok := s.peers[name]; ok && name != s.self {
				targets = append(targets, &n)
			}
		}
		return targets
	}
	if len(names) == 0 {
		return nil
	}
	picked := make([]int, 0, s.cfg.GossipNodes)
	for tries := 0; len(picked) < s.cfg.GossipNodes && tries < 64*s.cfg.GossipNodes; tries++ {
		i := s.rnd.IntN(len(names))
		if names[i] == s.self || slices.Contains(picked, i) {
			continue
		}
		picked = append(picked, i)
	}
	slices.SortFunc(picked, cmp.Compare[int])
	targets := make([]*memberlist.Node, 0, len(picked))
	for _, i := range picked {
		if n, ok := s.peers[names[i]]; ok {
			targets = append(targets, &n)
		}
	}
	return targets
}
