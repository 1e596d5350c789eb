package daemon

import (
	"math"
	"time"

	"github.com/sluicelabs/sluice/gossip"
)

// First contact (issue 20): a bucket a daemon creates in a cluster is held
// to its share of the burst (burst / members, plus the rate since it was
// created) for one propagation delay, so a key new to the cluster is not
// admitted a full burst on every node before any gossip arrives (see
// bucket/firstshare.go). The daemon keeps the store's idea of the cluster's
// size and of that delay current.

// firstShareInterval is how often the hold is brought up to date with the
// membership.
const firstShareInterval = 50 * time.Millisecond

// networkSlack is what the hold allows, beyond the gossip rounds, for a
// packet to cross the network and be handled on a busy host.
const networkSlack = 30 * time.Millisecond

// firstShareHold is one propagation delay of a cluster of n members: two
// gossip intervals (the round that sends a counter can come up to one
// interval after the admission) and the network, with direct fan-out; a
// relayed cluster adds a round per hop, about log_GossipNodes(n), and a
// round per 512 members: in owner mode a key's owner answers at most 512
// users a round (gossip's ownerAnswerBudget), so when every member meets a
// new key at once the last answers come that many rounds later (the hold
// ends at a node's first answer; simulated, 3,000 nodes: first second 699
// → 205, allowed 200).
func firstShareHold(n int, interval time.Duration, fanoutLimit, gossipNodes int) time.Duration {
	if interval <= 0 {
		interval = gossip.DefaultGossipInterval
	}
	if fanoutLimit <= 0 {
		fanoutLimit = gossip.DefaultFanoutLimit
	}
	if gossipNodes <= 1 {
		gossipNodes = gossip.DefaultGossipNodes
	}
	rounds := 2
	if n > fanoutLimit {
		rounds += int(math.Ceil(math.Log(float64(n))/math.Log(float64(gossipNodes)))) + (n+511)/512
	}
	return time.Duration(rounds)*interval + networkSlack
}

// updateFirstShare sets the store's hold from the members alive now.
func (d *Daemon) updateFirstShare() {
	if d.syncer == nil || d.noFirstShare {
		return
	}
	n := d.syncer.NumAlive()
	c := d.settings.Cluster
	d.store.SetFirstShare(n, firstShareHold(n, c.GossipInterval, c.FanoutLimit, c.GossipNodes))
}
