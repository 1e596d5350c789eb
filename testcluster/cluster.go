package testcluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
	"github.com/sluicelabs/sluice/gossip"
)

// Options describe a cluster. Zero fields take the defaults noted.
type Options struct {
	// N is the number of nodes. Default 3.
	N int
	// FirstShare turns on first contact's hold and the fair floor (see
	// daemon.Config.NoFirstShare), which sluiced always runs with.
	FirstShare bool
	// FirstContact is how the hold counts a node's share of the burst
	// (config.ClusterSettings.FirstContact); default: auto, as sluiced.
	FirstContact bucket.FirstContact
	// Rules is the rules file every node loads. Default: rule "api", 100/1s.
	Rules string
	// GossipInterval, FanoutLimit, GossipNodes and PushPullInterval tune
	// gossip (see package gossip). PushPullInterval defaults to 2s here.
	GossipInterval time.Duration
	FanoutLimit    int
	GossipNodes    int
	// GossipMode is gossip's mode (auto, direct, relay, owner); "" is auto.
	GossipMode string
	// AggregateAbove is gossip.Config.AggregateAbove (owner mode: users of
	// a key before they go through aggregators); 0 is gossip's default.
	AggregateAbove int
	// Old lists nodes, by index, that run as an earlier version would: they
	// advertise that delegate protocol (memberlist's DelegateProtocolMax)
	// and never aggregate before the owner (a rolling upgrade).
	Old              map[int]uint8
	PushPullInterval time.Duration
	// Key encrypts gossip (16, 24 or 32 bytes). Default: none.
	Key []byte
	// Keyring, if set instead of Key, gives every node a keyring file with
	// these keys (the first primary), which SetKeyring rewrites and reloads.
	Keyring [][]byte
	// Faults disturb every node's outgoing packets.
	Faults Faults
	// Now is the clock every node decides with. Default: the real clock.
	// A FakeClock makes bucket arithmetic exact in tests.
	Now func() time.Time
	// Logger receives every node's logs, named by node. Default: discard.
	Logger hclog.Logger
}

// Cluster is a running set of nodes. Its methods are safe for concurrent use.
type Cluster struct {
	opts  Options
	dir   string
	nodes []*Node
}

// Node is one daemon of the cluster.
type Node struct {
	Index int
	Name  string

	c         *Cluster
	mu        sync.Mutex
	daemon    *daemon.Daemon
	client    *clientlib.Client
	transport *faultTransport
	bindPort  int
	running   bool
}

// Start starts a cluster of opts.N nodes and waits (up to 30s) until every
// node sees every other as a member.
func Start(opts Options) (*Cluster, error) {
	if opts.N <= 0 {
		opts.N = 3
	}
	if opts.Rules == "" {
		opts.Rules = "rules:\n  api:\n    rate: 100/1s\n"
	}
	if opts.PushPullInterval <= 0 {
		opts.PushPullInterval = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	dir, err := os.MkdirTemp("", "tc")
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	c := &Cluster{opts: opts, dir: dir}
	for i := range opts.N {
		if err := os.WriteFile(c.rulesPath(i), []byte(opts.Rules), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("testcluster: %w", err)
		}
	}
	for i := range opts.N {
		n := &Node{Index: i, Name: "node-" + strconv.Itoa(i), c: c}
		c.nodes = append(c.nodes, n)
		var join []string
		if i > 0 {
			join = []string{c.nodes[0].Addr()}
		}
		if err := n.start(join); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.waitJoined(30 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// waitJoined waits until every node sees every other. Membership spreads by
// gossip, and in a large cluster started at once a node sometimes misses
// another's alive message and learns of it only at its next push-pull
// (4 s apart at 50 nodes): 50-node starts took 0.7 s, or 2-4.5 s one time
// in five. So after a second, each node still missing members exchanges
// state with node 0, which every node joined through and so knows them all.
func (c *Cluster) waitJoined(timeout time.Duration) error {
	want := len(c.nodes)
	if c.WaitMembers(want, min(time.Second, timeout)) == nil {
		return nil
	}
	seed := c.nodes[0].Addr()
	var wg sync.WaitGroup
	for _, n := range c.nodes[1:] {
		if d := n.Daemon(); d != nil && d.Syncer().NumAlive() < want {
			wg.Add(1)
			go func() { defer wg.Done(); d.Syncer().Join([]string{seed}) }()
		}
	}
	wg.Wait()
	return c.WaitMembers(want, timeout)
}

// Nodes returns the cluster's nodes.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node returns node i.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// rulesPath is node i's own rules file, a copy of Options.Rules at start.
func (c *Cluster) rulesPath(i int) string {
	return filepath.Join(c.dir, "rules-"+strconv.Itoa(i)+".yaml")
}

// keyringPath is node i's keyring file.
func (c *Cluster) keyringPath(i int) string {
	return filepath.Join(c.dir, "keyring-"+strconv.Itoa(i)+".json")
}

func (c *Cluster) writeKeyring(i int, keys [][]byte) error {
	encoded := make([]string, len(keys))
	for j, k := range keys {
		encoded[j] = base64.StdEncoding.EncodeToString(k)
	}
	data, err := json.Marshal(encoded)
	if err == nil {
		err = os.WriteFile(c.keyringPath(i), data, 0o600)
	}
	if err != nil {
		return fmt.Errorf("testcluster: keyring: %w", err)
	}
	return nil
}

// SetKeyring gives node i a new keyring (the first key primary) and reloads
// it while the node runs, as an operator rotating gossip keys would.
func (c *Cluster) SetKeyring(i int, keys [][]byte) error {
	if err := c.writeKeyring(i, keys); err != nil {
		return err
	}
	d := c.nodes[i].Daemon()
	if d == nil {
		return fmt.Errorf("testcluster: node %d is not running", i)
	}
	return d.Reload()
}

// SetRules gives node i new rules and reloads them, as an operator editing
// one host's file would; the nodes' rules then differ until they agree again.
func (c *Cluster) SetRules(i int, rules string) error {
	if err := os.WriteFile(c.rulesPath(i), []byte(rules), 0o600); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	d := c.nodes[i].Daemon()
	if d == nil {
		return fmt.Errorf("testcluster: node %d is not running", i)
	}
	return d.Reload()
}

func (n *Node) start(join []string) error {
	c := n.c
	s := config.DefaultSettings()
	s.NodeName = n.Name
	s.SocketPath = filepath.Join(c.dir, n.Name+".sock")
	s.RulesPath = c.rulesPath(n.Index)
	s.NoWatch = true // SetRules reloads; a watcher would reload a second time
	s.ShutdownTimeout = 2 * time.Second
	s.Cluster = config.ClusterSettings{
		Bind:             "127.0.0.1:" + strconv.Itoa(n.bindPort),
		Join:             join,
		GossipInterval:   c.opts.GossipInterval,
		GossipNodes:      c.opts.GossipNodes,
		FanoutLimit:      c.opts.FanoutLimit,
		GossipMode:       c.opts.GossipMode,
		PushPullInterval: c.opts.PushPullInterval,
		FirstContact:     c.opts.FirstContact,
		Key:              c.opts.Key,
		Label:            "testcluster",
		Insecure:         len(c.opts.Key) == 0 && len(c.opts.Keyring) == 0, // loopback, in one process
	}
	if len(c.opts.Keyring) > 0 {
		if _, err := os.Stat(c.keyringPath(n.Index)); err != nil { // a restart keeps a rotated ring
			if err := c.writeKeyring(n.Index, c.opts.Keyring); err != nil {
				return err
			}
		}
		s.Cluster.KeyringFile = c.keyringPath(n.Index)
	}
	var ft *faultTransport
	d, err := daemon.New(daemon.Config{
		Settings: s,
		Logger:   c.opts.Logger.Named(n.Name),
		Now:      c.opts.Now,
		// In-process clusters decide as before issue 20's first-share hold
		// and fair floor unless asked (their tests pause gossip to make
		// every node spend a full burst first).
		NoFirstShare: !c.opts.FirstShare,
		Gossip: func(g *gossip.Config) {
			g.WrapTransport = func(t memberlist.Transport) memberlist.Transport {
				ft = newFaultTransport(t, c.opts.Faults.Seed+uint64(n.Index)+1)
				ft.setFaults(c.opts.Faults)
				return ft
			}
			g.MemberlistConfig = loopbackTimings
			g.ReconnectInterval = 500 * time.Millisecond
			if c.opts.AggregateAbove != 0 {
				g.AggregateAbove = c.opts.AggregateAbove
			}
			if v, old := c.opts.Old[n.Index]; old {
				g.AggregateAbove = -1
				g.MemberlistConfig = func(m *memberlist.Config) {
					loopbackTimings(m)
					m.DelegateProtocolMax = v
				}
			}
		},
	})
	if err != nil {
		return fmt.Errorf("testcluster: start %s: %w", n.Name, err)
	}
	if err := d.Start(context.Background()); err != nil {
		return fmt.Errorf("testcluster: run %s: %w", n.Name, err)
	}
	client, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: s.SocketPath, Timeout: 5 * time.Second, DialTimeout: 15 * time.Second, Name: n.Name}) // a loaded machine may take seconds to answer the first handshake
	if err != nil {
		d.Shutdown(context.Background())
		return fmt.Errorf("testcluster: connect to %s: %w", n.Name, err)
	}
	n.mu.Lock()
	n.daemon, n.client, n.transport, n.running = d, client, ft, true
	if n.bindPort == 0 {
		_, port, _ := splitPort(d.Syncer().Addr())
		n.bindPort = port
	}
	n.mu.Unlock()
	return nil
}

// loopbackTimings make failure detection fit a loaded 2-core machine running
// many nodes in one process: prompt, but slow to accuse.
func loopbackTimings(m *memberlist.Config) {
	m.ProbeInterval = 500 * time.Millisecond
	m.ProbeTimeout = 250 * time.Millisecond
	m.SuspicionMult = 4
	m.GossipInterval = 100 * time.Millisecond
	m.TCPTimeout = 2 * time.Second
	m.DeadNodeReclaimTime = time.Second
}

func splitPort(addr string) (string, int, error) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			p, err := strconv.Atoi(addr[i+1:])
			return addr[:i], p, err
		}
	}
	return addr, 0, errors.New("no port")
}

// Addr is the node's gossip address.
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return "127.0.0.1:" + strconv.Itoa(n.bindPort)
}

// Daemon returns the node's daemon (nil while stopped).
func (n *Node) Daemon() *daemon.Daemon {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.daemon
}

// Running reports whether the node is up.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running
}

// Allow asks node i, through its socket, to admit a request of cost tokens.
func (c *Cluster) Allow(i int, rule, key string, cost int64) clientlib.Decision {
	n := c.nodes[i]
	n.mu.Lock()
	cl := n.client
	n.mu.Unlock()
	if cl == nil {
		return clientlib.Decision{Allowed: true, FailedOpen: true, Err: clientlib.ErrDaemonDown, Denied: -1}
	}
	return cl.AllowN(context.Background(), rule, key, cost)
}

// Balances returns every node's balance for key under rule (NaN for a stopped node).
func (c *Cluster) Balances(rule, key string) []float64 {
	out := make([]float64, len(c.nodes))
	for i, n := range c.nodes {
		d := n.Daemon()
		if d == nil {
			out[i] = math.NaN()
			continue
		}
		out[i], _ = d.Balance(rule, key)
	}
	return out
}

// WaitMembers polls until every running node counts want alive members.
func (c *Cluster) WaitMembers(want int, timeout time.Duration) error {
	return poll(timeout, func() bool {
		for _, n := range c.nodes {
			d := n.Daemon()
			if d != nil && d.Syncer().NumAlive() != want {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("every running node to see %d members", want) })
}

// WaitBalances polls until every running node's balance satisfies ok.
func (c *Cluster) WaitBalances(rule, key string, timeout time.Duration, ok func(node int, balance float64) bool) error {
	return poll(timeout, func() bool {
		for i, b := range c.Balances(rule, key) {
			if b == b && !ok(i, b) { // NaN: stopped node
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("balances of %s/%s to converge (now %v)", rule, key, c.Balances(rule, key))
	})
}

func poll(timeout time.Duration, cond func() bool, what func() string) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("testcluster: timed out after %s waiting for %s", timeout, what())
		}
		<-tick.C
	}
	return nil
}

// Stop shuts node i down gracefully: it answers what it received, sends its
// last counters and leaves the cluster.
func (c *Cluster) Stop(i int) error { return c.nodes[i].stop(true) }

// Crash stops node i abruptly: no leave, no last counters, as kill -9 would.
func (c *Cluster) Crash(i int) error { return c.nodes[i].stop(false) }

// stopTimeout bounds a node's Leave, and the wait for the requests it was
// answering when it stops.
const stopTimeout = 2 * time.Second

func (n *Node) stop(graceful bool) error {
	n.mu.Lock()
	if !n.running {
		n.mu.Unlock()
		return nil
	}
	d, cl := n.daemon, n.client
	n.daemon, n.client, n.running = nil, nil, false
	n.mu.Unlock()
	cl.Close()
	var err error
	if graceful {
		err = d.Leave(stopTimeout)
	}
	// Without Leave, Shutdown stops gossip first: the node vanishes without
	// a word or its last counters, as after kill -9.
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if serr := d.Shutdown(ctx); err == nil {
		err = serr
	}
	return err
}

// Restart starts a stopped node again on its old address, joining the rest.
func (c *Cluster) Restart(i int) error {
	n := c.nodes[i]
	if n.Running() {
		return fmt.Errorf("testcluster: %s is running", n.Name)
	}
	var join []string
	for _, m := range c.nodes {
		if m != n && m.Running() {
			join = append(join, m.Addr())
		}
	}
	return n.start(join)
}

// Partition splits the cluster: nodes in different groups can no longer
// exchange packets or streams. Nodes in no group keep talking to everyone.
func (c *Cluster) Partition(groups ...[]int) {
	group := map[int]int{}
	for g, members := range groups {
		for _, i := range members {
			group[i] = g + 1
		}
	}
	for i, n := range c.nodes {
		blocked := map[string]bool{}
		for j, m := range c.nodes {
			if gi, gj := group[i], group[j]; gi != 0 && gj != 0 && gi != gj {
				blocked[m.Addr()] = true
			}
		}
		n.mu.Lock()
		if n.transport != nil {
			n.transport.setBlocked(blocked)
		}
		n.mu.Unlock()
	}
}

// PauseGossip holds (true) or resumes (false) every node's sending.
func (c *Cluster) PauseGossip(paused bool) {
	for _, n := range c.nodes {
		if d := n.Daemon(); d != nil {
			d.Syncer().Pause(paused)
		}
	}
}

// Heal ends every partition.
func (c *Cluster) Heal() { c.Partition() }

// SetFaults changes the packet faults of every node.
func (c *Cluster) SetFaults(f Faults) {
	for _, n := range c.nodes {
		n.mu.Lock()
		if n.transport != nil {
			n.transport.setFaults(f)
		}
		n.mu.Unlock()
	}
}

// Close stops every node and removes the cluster's files.
func (c *Cluster) Close() error {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.stop(false) }()
	}
	wg.Wait()
	return os.RemoveAll(c.dir)
}

// FakeClock is a clock tests move by hand, shared by every node.
type FakeClock struct{ offset atomic.Int64 }

var fakeEpoch = time.Unix(1_800_000_000, 0)

// Now reads the clock.
func (f *FakeClock) Now() time.Time { return fakeEpoch.Add(time.Duration(f.offset.Load())) }

// Advance moves the clock forward.
func (f *FakeClock) Advance(d time.Duration) { f.offset.Add(int64(d)) }
