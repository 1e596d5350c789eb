package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicelabs/sluice/bucket"
)

// Scenario is the load a run drives.
type Scenario string

// Scenarios.
const (
	// Hot: every node offers requests on one key of one limit (the limit
	// saturated: Offered is several times its rate).
	Hot Scenario = "hot"
	// Spread: every node offers PerHost requests per second over Keys keys,
	// each under its own limit (the fixed per-host load of SCALING.md).
	Spread Scenario = "spread"
)

// Config is one run. Zero fields take the defaults noted.
type Config struct {
	Nodes    int           // cluster size. Required.
	Duration time.Duration // simulated time under load. Default 10 s.
	Seed     uint64        // same seed, same run

	// Gossip, as gossip.Config.
	GossipInterval   time.Duration // default 20 ms
	FanoutLimit      int           // default 64
	GossipNodes      int           // default 4
	PushPullInterval time.Duration // default 10 s (memberlist stretches it above 32 members)
	GossipMode       string        // auto (default), direct, relay or owner
	AggregateAbove   int           // owner mode: users of a key before they go through aggregators (gossip's default 64, as sluiced; negative: never)
	// FirstShare holds each node's new buckets to burst/Nodes for one
	// propagation delay, keeps the fair floor and, in owner mode, each
	// node's share of the owner's view, as sluiced does
	// (bucket.Store.SetFirstShare, SetOwnerView); off by default, as in
	// testcluster's in-process clusters.
	FirstShare bool
	// FirstContact is how, with FirstShare, the hold counts a node's share
	// of the burst (bucket.StoreConfig.FirstContact); default: auto, as
	// sluiced's default.
	FirstContact bucket.FirstContact

	// Network.
	Latency   time.Duration // one-way latency's fixed part. Default 100 µs.
	Jitter    time.Duration // mean of an exponential extra delay (reorders packets). Default 100 µs.
	Loss      float64       // fraction of best-effort packets lost
	Partition Partition     // a split of the cluster for a time, if To > From
	// ChurnPerMinute replaces that fraction of the nodes each minute: a
	// node crashes, the others declare it dead after DetectAfter, and a
	// new node (a new name) joins in its place at once.
	ChurnPerMinute float64
	// JoinSpread is how long the membership takes to form at the start:
	// node i learns of node j at a time drawn uniformly from [0,
	// JoinSpread) for each ordered pair (as memberlist spreads joins by
	// gossip). Until then i sends j nothing and refuses j's packets, as the
	// sender guard refuses a sender it does not know. Load starts at 0
	// regardless, as testcluster's does once every process serves. Default
	// 0: the cluster is formed before the load starts.
	JoinSpread time.Duration
	// DetectAfter is how long the cluster takes to declare a crashed node
	// dead. Default: memberlist's LAN suspicion timeout for the size,
	// 4·max(1, log10 N) probe intervals of 1 s.
	DetectAfter time.Duration
	// SilenceOwner silences the hot key's owner between From and To: it
	// sends nothing then (its answers are lost) but hears everything, as
	// a stalled owner on a loaded machine is late; Split is unused. The
	// others fail over to the key's replica after ownerFailover rounds
	// (the membership is left alone: memberlist's detection is slower).
	SilenceOwner Partition
	// Stall freezes nodes 0 to Split−1 between From and To, as a daemon
	// starved of CPU on a loaded machine is: it makes no gossip round, and
	// its requests and the packets and states sent to it wait until the
	// stall ends (a socket's buffer), when it runs on from where it was.
	Stall Partition
	// KillOwnerAt crashes the hot key's owner then (no replacement), if
	// above 0: the others fail over to its replica, and declare it dead
	// after DetectAfter (killowner.go).
	KillOwnerAt time.Duration
	// KillReplicaAt crashes the hot key's replica then (no replacement),
	// if above 0, as KillOwnerAt its owner: with both, owner and replica
	// crash before the cluster declares either dead (killowner.go).
	KillReplicaAt time.Duration
	// KillThirdAt crashes the hot key's third member then (no
	// replacement), if above 0, as KillOwnerAt its owner: with both
	// others, the whole chain failover (gossip's ownerchain.go) crashes
	// before the cluster declares any of them dead (killowner.go).
	KillThirdAt time.Duration

	// Load.
	Scenario Scenario // default Hot
	// HotKey names Hot's key (default "hot-key"). HotKeyThirdAggregates
	// instead names it the first of hot-key-0, hot-key-1, ... whose third
	// member on the starting ring is at one of its aggregation points (as
	// members before gossip's protoChainAgg name them: gossip's
	// ThirdAggregates), the keys the chain failover missed; at least 8
	// nodes, not with HotKey.
	HotKey                string
	HotKeyThirdAggregates bool

	Rate  float64 // the limit's rate per second. Default 100.
	Burst int64   // the limit's burst. Default: Rate.
	// Offered is the requests per second all nodes together offer on the
	// hot key (Hot), split evenly; default 5 × Rate, at least
	// MinPerNode per node.
	Offered    float64
	MinPerNode float64 // default 0
	// PerHost and Keys: Spread's load, requests per second per node spread
	// uniformly over Keys keys. Defaults 50/s and Nodes keys.
	PerHost float64
	Keys    int
	// Quiet is the end of the run without load (gossip goes on), so that
	// balances settle before Report.Balances reads them. Default 0.
	Quiet time.Duration
	// Probes measures convergence: a probe is one token consumed at one
	// node on a key of its own, at a random gap of up to ProbeEvery, and
	// its lag is until every other live node's ledger was charged it (or
	// adopted it). Default ProbeEvery 500 ms (the testcluster's).
	// In owner mode, where only the nodes that use a key hear of it, a
	// probe is a key ProbeHolders nodes hold instead (holders.go).
	ProbeEvery time.Duration
	// ProbeHolders is how many nodes hold an owner-mode probe's key.
	// Default 5 (fewer in smaller clusters).
	ProbeHolders int

	// Isolated is how many nodes (spread over the slots) have their inputs
	// recorded and replayed, after the run, into a syncer of their own for
	// Report.IsolatedCPU (isolate.go). Default 8; negative: none.
	Isolated int

	// copyMembers gives every syncer its own copy of the membership, as
	// in production, even when the membership is formed before the load
	// (by default the nodes then share one table: gossip.SharedMembers).
	// For tests comparing the two.
	copyMembers bool
}

// Partition cuts the nodes whose index is below Split from the others
// between From and To (simulated time since the start).
type Partition struct {
	From, To time.Duration
	Split    int
}

func (c *Config) setDefaults() error {
	if c.Nodes < 2 {
		return errors.New("sim: at least 2 nodes")
	}
	if c.Nodes > 65535 {
		return fmt.Errorf("sim: %d nodes; at most 65535", c.Nodes)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Duration, 10*time.Second)
	def(&c.GossipInterval, 20*time.Millisecond)
	def(&c.PushPullInterval, 10*time.Second)
	def(&c.Latency, 100*time.Microsecond)
	def(&c.Jitter, 100*time.Microsecond)
	def(&c.ProbeEvery, 500*time.Millisecond)
	if c.ProbeHolders <= 0 {
		c.ProbeHolders = 5
	}
	switch c.GossipMode {
	case "", "auto", "direct", "relay", "owner":
	default:
		return fmt.Errorf("sim: gossip mode %q; want auto, direct, relay or owner", c.GossipMode)
	}
	if c.DetectAfter <= 0 {
		c.DetectAfter = suspicionTimeout(c.Nodes)
	}
	if c.FanoutLimit <= 0 {
		c.FanoutLimit = 64
	}
	if c.GossipNodes <= 0 {
		c.GossipNodes = 4
	}
	if c.Scenario == "" {
		c.Scenario = Hot
	}
	if c.Scenario != Hot && c.Scenario != Spread {
		return fmt.Errorf("sim: unknown scenario %q (hot or spread)", c.Scenario)
	}
	if c.Rate <= 0 {
		c.Rate = 100
	}
	if c.Burst <= 0 {
		c.Burst = int64(c.Rate)
	}
	if c.Offered <= 0 {
		c.Offered = 5 * c.Rate
	}
	c.Offered = max(c.Offered, c.MinPerNode*float64(c.Nodes))
	if c.PerHost <= 0 {
		c.PerHost = 50
	}
	if c.Keys <= 0 {
		c.Keys = c.Nodes
	}
	if c.Isolated == 0 {
		c.Isolated = isolatedNodes
	}
	if len(c.HotKey) > maxHotKey {
		return fmt.Errorf("sim: hot key of %d bytes; at most %d", len(c.HotKey), maxHotKey)
	}
	if c.HotKeyThirdAggregates && (c.HotKey != "" || c.Nodes < 8) {
		return fmt.Errorf("sim: a hot key whose third aggregates it: not with a hot key named (%q), and at least 8 nodes (%d)", c.HotKey, c.Nodes)
	}
	if c.HotKey == "" {
		c.HotKey = "hot-key"
	}
	if c.Loss < 0 || c.Loss >= 1 {
		return fmt.Errorf("sim: loss %v outside [0, 1)", c.Loss)
	}
	if err := c.Partition.check("partition", c.Nodes); err != nil {
		return err
	}
	if err := c.SilenceOwner.check("owner silence", -1); err != nil {
		return err
	}
	if err := c.Stall.check("stall", -1); err != nil {
		return err
	}
	if c.Stall != (Partition{}) && (c.Stall.Split <= 0 || c.Stall.Split > c.Nodes) {
		return fmt.Errorf("sim: stall split %d of %d nodes: want 1 to %d", c.Stall.Split, c.Nodes, c.Nodes)
	}
	for _, k := range []struct {
		what string
		at   time.Duration
	}{{"owner kill", c.KillOwnerAt}, {"replica kill", c.KillReplicaAt}, {"third kill", c.KillThirdAt}} {
		if k.at < 0 || k.at >= c.Duration {
			return fmt.Errorf("sim: %s at %v: want 0 (never) or within the run's %v", k.what, k.at, c.Duration)
		}
	}
	return nil
}

// maxHotKey is the longest hot key name: a key of gossip's and the
// store's, kept short.
const maxHotKey = 256

// check refuses a window that is set but would never act: negative times,
// an end not after its start, or (nodes >= 0: a split) a split that leaves
// one side empty. The zero Partition is none.
func (p Partition) check(what string, nodes int) error {
	if p == (Partition{}) {
		return nil
	}
	if p.From < 0 || p.To <= p.From {
		return fmt.Errorf("sim: %s from %v to %v: want 0 <= from < to", what, p.From, p.To)
	}
	if nodes >= 0 && (p.Split <= 0 || p.Split >= nodes) {
		return fmt.Errorf("sim: %s split %d of %d nodes: want 1 to %d", what, p.Split, nodes, nodes-1)
	}
	return nil
}

// mode is how the nodes gossip, as gossip.Config.GossipMode decides it:
// "direct" (fan-out to every member), "relayed" or "owner". In auto mode
// a cluster above FanoutLimit is in owner mode: every simulated node
// speaks it.
func (c *Config) mode() string {
	switch c.GossipMode {
	case "direct", "owner":
		return c.GossipMode
	case "relay":
		return "relayed"
	}
	if c.Nodes > c.FanoutLimit {
		return "owner"
	}
	return "direct"
}
