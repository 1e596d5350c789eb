package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/gossip"
)

// Sim is one run: the nodes, the network between them and the clock.
type Sim struct {
	cfg     Config
	rnd     *rand.Rand
	q       queue
	seq     uint64
	now     int64     // virtual nanoseconds since the start
	base    time.Time // the virtual clock's start
	nodes   []*node
	alive   int // members believed alive: up, or crashed and not yet declared dead
	crashed int // of which crashed
	lim     limits
	hot     []byte
	keys    [][]byte
	m       measure
	rings   *gossip.RingCache // owner mode's rings, shared by every node
	// table is the membership every node reads when they all see the same
	// (the membership formed before the load): one table instead of a copy
	// per node, and no N² joins to form it. Nil with JoinSpread, where
	// each node learns the others at its own times.
	table *gossip.SharedMembers
	// undeclared are the crashed members not yet declared dead: still
	// members to the others, so a replacement learns of them on joining.
	undeclared []memberlist.Node
	silent     string // the hot key's owner, once silenced (Config.SilenceOwner)
	// traces are the recorded nodes' inputs (isolate.go); isolating is set
	// on the Sim a replay runs in.
	traces    []*trace
	isolating bool
}

// epoch is the virtual clock's start: fixed, so runs repeat.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// binWidth is the resolution of the admitted-over-time record.
const binWidth = 10 * time.Millisecond

// New prepares a run: every node made and joined to every other.
func New(cfg Config) (*Sim, error) {
	s, err := bare(cfg)
	if err != nil {
		return nil, err
	}
	cfg = s.cfg
	s.m.init(s)
	if cfg.JoinSpread <= 0 && !cfg.copyMembers {
		s.table = gossip.NewSharedMembers()
		for i := range cfg.Nodes {
			s.table.Add(s.selfNode(i, 0))
		}
	}
	s.nodes = make([]*node, cfg.Nodes)
	for i := range s.nodes {
		if s.nodes[i], err = s.newNode(i, 0); err != nil {
			return nil, err
		}
	}
	s.alive = cfg.Nodes
	s.startTraces() // isolate.go
	if s.table == nil {
		for _, n := range s.nodes {
			for _, m := range s.nodes {
				if at := s.joinAt(n.i, m.i); at == 0 {
					s.notifyJoin(n, &m.self)
				} else {
					s.push(event{at: at, kind: evJoin, node: int32(n.i), from: int32(m.i)})
				}
			}
		}
	}
	for _, n := range s.nodes {
		s.schedule(n)
	}
	s.push(event{at: s.rnd.Int64N(int64(cfg.ProbeEvery)), kind: evProbe})
	s.push(event{at: int64(2 * time.Second), kind: evSample})
	if cfg.ChurnPerMinute > 0 {
		s.push(event{at: s.churnGap(), kind: evChurn})
	}
	if cfg.KillOwnerAt > 0 {
		s.push(event{at: int64(cfg.KillOwnerAt), kind: evKillOwner})
	}
	if cfg.KillReplicaAt > 0 {
		s.push(event{at: int64(cfg.KillReplicaAt), kind: evKillReplica})
	}
	if cfg.KillThirdAt > 0 {
		s.push(event{at: int64(cfg.KillThirdAt), kind: evKillThird})
	}
	return s, nil
}

// bare is a run of cfg with its limits and keys and no nodes yet.
func bare(cfg Config) (*Sim, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Sim{cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d)), base: epoch}
	var err error
	if s.lim.hot, err = bucket.NewLimit(int64(cfg.Rate*1000), 1000*time.Second, cfg.Burst); err != nil {
		return nil, fmt.Errorf("sim: the limit: %w", err)
	}
	if s.lim.probe, err = bucket.NewLimit(1_000_000, time.Hour, 1_000_000); err != nil {
		return nil, fmt.Errorf("sim: the probes' limit: %w", err)
	}
	s.hot = []byte(cfg.HotKey)
	if cfg.HotKeyThirdAggregates {
		if s.hot, err = hotThirdAggregates(cfg.Nodes); err != nil {
			return nil, err
		}
	}
	if cfg.Scenario == Spread {
		s.keys = make([][]byte, cfg.Keys)
		for i := range s.keys {
			s.keys[i] = []byte("key-" + strconv.Itoa(i)) // as BenchmarkGossipCost names them
		}
	}
	return s, nil
}

// selfNode is the member of slot i, generation gen: addressed by its slot,
// advertising the delegate protocol of the simulated mode (ownershare.go).
func (s *Sim) selfNode(i int, gen uint32) memberlist.Node {
	return memberlist.Node{Name: nameOf(i, gen), Port: uint16(i), DMax: s.dmax(i)}
}

// aggregateAbove is gossip's AggregateAbove (0: its default, as sluiced).
func (s *Sim) aggregateAbove() int { return s.cfg.AggregateAbove }

func nameOf(i int, gen uint32) string {
	if gen == 0 {
		return fmt.Sprintf("n%05d", i)
	}
	return fmt.Sprintf("n%05d.%d", i, gen)
}

// newNode makes the node of slot i, generation gen: a store, its ledger
// and a syncer over the simulated membership.
func (s *Sim) newNode(i int, gen uint32) (*node, error) {
	n := &node{i: i, gen: gen, name: nameOf(i, gen), alive: true}
	seed := s.cfg.Seed*1_000_003 + uint64(i)*65_537 + uint64(gen)
	n.store = bucket.NewStore(bucket.StoreConfig{MaxKeys: max(4096, 4*len(s.keys)), Shards: 1, TrackConsumption: true,
		EpochBase: uint64(s.clock().UnixNano()), Seed: seed + 1, FirstContact: s.cfg.FirstContact})
	if s.cfg.FirstShare {
		n.store.SetFirstShare(s.cfg.Nodes, firstShareHold(s.cfg))
	}
	n.self = s.selfNode(i, gen)
	sy, err := gossip.New(gossip.Config{NodeName: n.name, GossipInterval: s.cfg.GossipInterval, GossipNodes: s.cfg.GossipNodes,
		FanoutLimit: s.cfg.FanoutLimit, PushPullInterval: s.cfg.PushPullInterval, GossipMode: s.cfg.GossipMode, AggregateAbove: s.aggregateAbove(), Rings: s.ringCache()}, ledger{s, n})
	if err != nil {
		return nil, fmt.Errorf("sim: node %d: %w", i, err)
	}
	n.syncer = sy
	if s.table != nil {
		n.dg, n.ev, err = sy.SimulateShared(membership{s, n}, s.table, s.clock, seed)
	} else {
		n.dg, n.ev, err = sy.Simulate(membership{s, n}, s.clock, seed)
	}
	if err != nil {
		return nil, fmt.Errorf("sim: node %d: %w", i, err)
	}
	return n, nil
}

// schedule starts a node's periodic events, each at a random phase.
func (s *Sim) schedule(n *node) {
	at := func(every time.Duration) int64 { return s.now + s.rnd.Int64N(int64(every)) }
	s.push(event{at: at(s.cfg.GossipInterval), kind: evRound, node: int32(n.i), gen: n.gen})
	s.push(event{at: at(pushPullEvery(s.cfg.PushPullInterval, s.cfg.Nodes)), kind: evPushPull, node: int32(n.i), gen: n.gen})
	s.push(event{at: at(time.Minute), kind: evPrune, node: int32(n.i), gen: n.gen})
	s.push(event{at: at(s.requestGap()), kind: evRequest, node: int32(n.i), gen: n.gen})
}

// requestGap is the time between one node's requests.
func (s *Sim) requestGap() time.Duration {
	perNode := s.cfg.PerHost
	if s.cfg.Scenario == Hot {
		perNode = s.cfg.Offered / float64(s.cfg.Nodes)
	}
	return time.Duration(float64(time.Second) / perNode)
}

func (s *Sim) churnGap() int64 {
	perSecond := s.cfg.ChurnPerMinute * float64(s.cfg.Nodes) / 60
	return s.now + int64(s.rnd.ExpFloat64()/perSecond*float64(time.Second))
}

// clock is the virtual time.
func (s *Sim) clock() time.Time { return s.base.Add(time.Duration(s.now)) }

// Run runs the simulation to its end and reports what it measured.
func (s *Sim) Run() *Report {
	runtime.LockOSThread() // so that the thread's CPU time is the run's
	defer runtime.UnlockOSThread()
	cpu0, measured := threadCPU()
	wall := time.Now()
	end := int64(s.cfg.Duration)
	for s.q.Len() > 0 {
		e := s.pop()
		if e.at >= end {
			break
		}
		s.now = e.at
		s.handle(e)
	}
	s.now = end
	el := time.Since(wall)
	cpu := el
	if cpu1, ok := threadCPU(); ok && measured {
		cpu = cpu1 - cpu0
	}
	return s.m.report(s, el, cpu)
}

func (s *Sim) current(e event) (*node, bool) {
	n := s.nodes[e.node]
	return n, n.alive && n.gen == e.gen
}

func (s *Sim) handle(e event) {
	if s.stalled(e) {
		e.at = int64(s.cfg.Stall.To) // it waits for the stall's end (stall.go)
		s.push(e)
		return
	}
	switch e.kind {
	case evPacket:
		s.deliver(e)
	case evState:
		s.state(e)
	case evRequest:
		n, ok := s.current(e)
		if !ok {
			return
		}
		s.request(n)
		if e.at += int64(s.requestGap()); e.at < int64(s.cfg.Duration-s.cfg.Quiet) {
			s.push(e)
		}
	case evRound:
		n, ok := s.current(e)
		if !ok {
			return
		}
		n.trace.add(traceEvent{at: s.now, kind: trRound})
		start := time.Now()
		n.syncer.Flush()
		n.busy += time.Since(start)
		s.hotSample(n) // hotkey.go
		e.at += int64(s.cfg.GossipInterval)
		s.push(e)
	case evPushPull:
		n, ok := s.current(e)
		if !ok {
			return
		}
		s.pushPull(n)
		e.at += int64(pushPullEvery(s.cfg.PushPullInterval, s.cfg.Nodes))
		s.push(e)
	case evPrune:
		n, ok := s.current(e)
		if !ok {
			return
		}
		n.trace.add(traceEvent{at: s.now, kind: trPrune})
		n.syncer.PruneSeen()
		e.at += int64(time.Minute)
		s.push(e)
	case evProbe:
		s.probe()
		s.push(event{at: s.now + 1 + s.rnd.Int64N(int64(s.cfg.ProbeEvery)), kind: evProbe})
	case evProbeMeasure:
		s.measureProbe(int(e.from))
	case evKillOwner:
		s.killOwner()
	case evKillReplica:
		s.killReplica()
	case evKillThird:
		s.killThird()
	case evSample:
		s.m.sample(s)
		e.at += int64(2 * time.Second)
		s.push(e)
	case evChurn:
		s.churn()
		s.push(event{at: s.churnGap(), kind: evChurn})
	case evJoin:
		n, m := s.nodes[e.node], s.nodes[e.from]
		if n.alive && n.gen == 0 && m.gen == 0 {
			s.notifyJoin(n, &m.self)
		}
	case evDeclare:
		gone := memberlist.Node{Name: string(e.msg), Port: uint16(e.node)}
		s.undeclared = slices.DeleteFunc(s.undeclared, func(m memberlist.Node) bool { return m.Name == gone.Name })
		if s.table != nil {
			s.table.Remove(gone.Name)
		}
		for _, n := range s.nodes {
			if n.alive && n.name != gone.Name {
				s.notifyLeave(n, &gone)
			}
		}
		s.alive--
		s.crashed--
	}
}

// request is one request of a node's load.
func (s *Sim) request(n *node) {
	key := s.hot
	if s.cfg.Scenario == Spread {
		key = s.keys[s.rnd.IntN(len(s.keys))]
	}
	n.requests++
	r, err := s.take(n, 0, key, s.lim.hot)
	if err != nil || !r.Allowed {
		return
	}
	n.admitted++
	n.windowAdmitted++
	s.hotAdmitted(n) // hotkey.go
	if b := s.bin(); b < len(s.m.bins) && s.cfg.Scenario == Hot {
		s.m.bins[b]++
	}
}

// churn crashes a random live node and starts its replacement (a new
// name in the same slot), which joins every live member.
func (s *Sim) churn() {
	i := s.rnd.IntN(len(s.nodes))
	old := s.nodes[i]
	if !old.alive {
		return
	}
	old.alive = false
	s.crashed++
	s.endTrace(old) // isolate.go
	s.m.retire(old)
	s.push(event{at: s.now + int64(s.cfg.DetectAfter), kind: evDeclare, node: int32(i), msg: []byte(old.name)})
	if s.table != nil {
		s.table.Add(s.selfNode(i, old.gen+1)) // the replacement starts knowing the table
	}
	n, err := s.newNode(i, old.gen+1)
	if err != nil {
		panic(err) // the configuration was valid for the first generation
	}
	s.nodes[i] = n
	s.alive++
	if s.table == nil {
		// It learns every member, the crashed ones not yet declared dead
		// too (as in the shared table).
		for _, m := range s.undeclared {
			s.notifyJoin(n, &m)
		}
	}
	for _, m := range s.nodes {
		if m.alive {
			if s.table == nil {
				s.notifyJoin(n, &m.self)
			}
			if m != n {
				s.notifyJoin(m, &n.self)
			}
		}
	}
	s.undeclared = append(s.undeclared, old.self)
	s.schedule(n)
	s.pushPull(n) // memberlist's join is a push-pull
}

// joinAt is when node i learns of node j as the cluster forms (see
// Config.JoinSpread): 0 for itself, or without a spread.
func (s *Sim) joinAt(i, j int) int64 {
	if i == j || s.cfg.JoinSpread <= 0 {
		return 0
	}
	h := splitmix(s.cfg.Seed ^ uint64(i)<<32 ^ uint64(j) ^ 0xa0761d6478bd642f)
	return 1 + int64(h%uint64(s.cfg.JoinSpread))
}

// knows reports whether node i knows node j as a member now: only the
// first generations' pairs are ever unknown (a replacement joins at once).
func (s *Sim) knows(i, j int) bool {
	return s.nodes[i].gen > 0 || s.nodes[j].gen > 0 || s.now >= s.joinAt(i, j)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// ringCache is the owner rings every node of the run shares.
func (s *Sim) ringCache() *gossip.RingCache {
	if s.rings == nil {
		s.rings = gossip.NewRingCache()
	}
	return s.rings
}

// firstShareHold is sluiced's first-contact hold for the simulated cluster
// (daemon/firstshare.go): two gossip intervals and 30 ms, plus a round per
// relay hop and one per 512 members above the fan-out limit.
func firstShareHold(c Config) time.Duration {
	rounds := 2
	if c.Nodes > c.FanoutLimit && c.GossipMode != "direct" {
		g := max(c.GossipNodes, 2)
		rounds += int(math.Ceil(math.Log(float64(c.Nodes))/math.Log(float64(g)))) + (c.Nodes+511)/512
	}
	return time.Duration(rounds)*c.GossipInterval + 30*time.Millisecond
}
