package sim

import (
	"fmt"
	"strconv"

	"github.com/sluicelabs/sluice/gossip"
)

// killOwner crashes the hot key's owner (Config.KillOwnerAt), as kill -9
// does: it sends nothing more, and the others declare it dead after
// DetectAfter; until then they fail over to the key's replica on their
// own (gossip's ownerFailover). It is not replaced, and stays in its slot,
// not alive, so that what it admitted still counts.
func (s *Sim) killOwner() { s.killHot(0) }

// killReplica crashes the hot key's replica (Config.KillReplicaAt) as
// killOwner crashes its owner: with both killed before the cluster
// declares either dead, nobody the others fail over to answers.
func (s *Sim) killReplica() { s.killHot(1) }

// killThird crashes the hot key's third member (Config.KillThirdAt) as
// killOwner crashes its owner: with owner and replica killed too before
// the cluster declares any dead, the whole failover chain (gossip's
// ownerchain.go) is silent.
func (s *Sim) killThird() { s.killHot(2) }

// killHot crashes the hot key's i-th member in ring order (0: its owner,
// 1: its replica, 2: its third) as a live node's ring names it now.
func (s *Sim) killHot(i int) {
	var live *node
	for _, n := range s.nodes {
		if n.alive {
			live = n
			break
		}
	}
	if live == nil {
		return
	}
	victim := live.syncer.ChainOf(ruleHot, string(s.hot), i)
	for _, n := range s.nodes {
		if n.alive && victim != "" && n.name == victim {
			n.alive = false
			s.crashed++
			s.endTrace(n) // isolate.go
			s.push(event{at: s.now + int64(s.cfg.DetectAfter), kind: evDeclare, node: int32(n.i), msg: []byte(n.name)})
			s.undeclared = append(s.undeclared, n.self)
			return
		}
	}
}

// hotThirdAggregates returns the first of hot-key-0, hot-key-1, ... whose
// third member on the ring of the starting nodes is at one of its
// aggregation points (gossip.ThirdAggregates; Config.HotKeyThirdAggregates).
func hotThirdAggregates(nodes int) ([]byte, error) {
	names := make([]string, nodes)
	for i := range names {
		names[i] = nameOf(i, 0)
	}
	for i := range 100_000 {
		if key := "hot-key-" + strconv.Itoa(i); gossip.ThirdAggregates(names, ruleHot, key) {
			return []byte(key), nil
		}
	}
	return nil, fmt.Errorf("sim: no hot key whose third member aggregates it among 100000 names at %d nodes", nodes)
}
