package gossip

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/ipc/mp"
)

// Syncer is one daemon's membership in the cluster and its exchange of
// consumption with the other members.
type Syncer struct {
	cfg    Config
	ledger Ledger
	log    hclog.Logger
	ml     *memberlist.Memberlist
	self   string

	mu      sync.Mutex
	pending map[pendingKey]*pendingCounter
	seen    map[counterKey]*seenRange
	// strangers holds, per (rule, key), the one allowance that every origin
	// not a member shares (see takeLocked); under mu.
	strangers map[[2]string]*strangerAllowance
	// offsets holds, per member, how far its stamps run ahead of this
	// node's clock (see originTimeLocked); under mu.
	offsets map[string]int64
	meta    []byte
	rnd     *rand.Rand

	// members counts the nodes memberlist has reported joining and not yet
	// leaving, maintained by the event delegate: receive may run before
	// memberlist.Create has returned, so it must not touch s.ml.
	members atomic.Int64
	failed  map[string]failedMember // members that went away, to try to rejoin; under mu
	// peers are copies of the live members' nodes, kept by the event
	// delegate. memberlist.Members returns pointers into its own state,
	// which it rewrites in place when a node comes back: reading them later
	// races with it, so the syncer sends to its own copies. Under mu.
	peers    map[string]memberlist.Node
	paused   atomic.Bool
	leaving  atomic.Bool // set when Leave or Shutdown begins: memberlist's socket errors are then expected
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	stats    Stats
	census   *censusSink
	resets   resetState // under mu, but for its resend channel
	// transport is memberlist's network, for its counters.
	transport *transport

	// suspicious counts clamped or refused reports by origin (see
	// suspectLocked); under mu.
	suspicious map[string]uint64
	// rejoined holds, for members that came back after being declared
	// dead or leaving, when (since born) and how long they were away;
	// under mu, at most maxOrigins entries.
	rejoined   map[string]rejoin
	suspectLog logLimiter // warnings of suspicious reports
	badLog     logLimiter // warnings of packets dropped whole
	// now is the clock (nil: time.Now); tests replace it. born is when the
	// syncer was made, on it.
	now  func() time.Time
	born time.Time
}

type counterKey struct{ origin, rule, key string }

// pendingKey names a pending counter: one per window, so that the last
// counter of a window and the first of the next both go out.
type pendingKey struct {
	counterKey
	window uint64
}

type pendingCounter struct {
	c         Counter
	transmits int // rounds left to send it in
}

// Stats counts a syncer's traffic; read it with Stats.
type Stats struct {
	PacketsSent, BytesSent         atomic.Uint64
	CountersSent                   atomic.Uint64 // counter entries sent, once per target
	PacketsReceived, BytesReceived atomic.Uint64
	BadPackets                     atomic.Uint64 // peers' packets that failed to decode
	TokensCharged                  atomic.Uint64 // tokens charged here on peers' behalf
	SeenPruned                     atomic.Uint64 // idle counters forgotten
	StatesMerged                   atomic.Uint64
	ResetsApplied                  atomic.Uint64 // (limit, key) resets applied here, made here or heard
	IgnoredPackets                 atomic.Uint64 // messages of a kind this version does not know
	// SuspiciousReports counts peers' reports clamped or refused because
	// they claimed more than the origin could have admitted, an epoch far
	// ahead of this node's clock, or a push-pull balance deeper than one
	// burst of debt (see Syncer.Suspicious for them by origin).
	SuspiciousReports atomic.Uint64
	// UnknownCounters counts counters of rules this node does not have, or
	// of keys longer than it accepts: neither charged nor remembered.
	UnknownCounters atomic.Uint64
}

// New creates the syncer and binds memberlist's port. It joins no one and
// sends nothing until Start.
func New(cfg Config, ledger Ledger) (*Syncer, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Syncer{
		cfg:     cfg,
		ledger:  ledger,
		log:     cfg.Logger,
		self:    cfg.NodeName,
		pending: map[pendingKey]*pendingCounter{},
		seen:    map[counterKey]*seenRange{},
		failed:  map[string]failedMember{},
		peers:   map[string]memberlist.Node{},
		rnd:     rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		stop:    make(chan struct{}),
		resets:  newResetState(),
	}
	s.born = s.clock()
	s.meta = encodeMeta(s.ownMeta(cfg.Meta))
	s.census = installCensus()

	mlc := memberlist.DefaultLANConfig()
	mlc.Name = cfg.NodeName
	mlc.BindAddr, mlc.BindPort = cfg.BindAddr, cfg.BindPort
	mlc.AdvertiseAddr, mlc.AdvertisePort = cfg.AdvertiseAddr, cfg.AdvertisePort
	mlc.PushPullInterval = cfg.PushPullInterval
	mlc.EnableCompression = false // counters are small binary; compression doubled CPU
	mlc.Label = cfg.Label
	// This node reads stamped counters packets (see stamp.go); its current
	// delegate version stays 0 so that older members still accept it.
	mlc.DelegateProtocolMax = protoStamped
	mlc.MetricLabels = []metrics.Label{{Name: censusLabel, Value: cfg.NodeName}}
	mlc.SecretKey, mlc.Keyring = cfg.SecretKey, cfg.Keyring
	mlc.Delegate = (*delegate)(s)
	mlc.Events = (*events)(s)
	mlc.Logger = memberlistLog(cfg.Logger.Named("memberlist"), &s.leaving)
	nt, err := newTransport(cfg.BindAddr, cfg.BindPort, mlc.Logger)
	if err != nil {
		return nil, fmt.Errorf("gossip: bind %s:%d: %w", cfg.BindAddr, cfg.BindPort, err)
	}
	mlc.BindPort = nt.Port()
	if mlc.AdvertiseAddr != "" && mlc.AdvertisePort == 0 {
		mlc.AdvertisePort = mlc.BindPort
	}
	mlc.Transport = nt
	if cfg.WrapTransport != nil {
		mlc.Transport = cfg.WrapTransport(nt)
	}
	if cfg.MemberlistConfig != nil {
		cfg.MemberlistConfig(mlc)
	}
	nt.configure(mlc.Label, mlc.SecretKey != nil || (mlc.Keyring != nil && len(mlc.Keyring.GetKeys()) > 0), mlc.GossipVerifyIncoming)
	s.transport = nt
	s.ml, err = memberlist.Create(mlc)
	if err != nil {
		nt.Shutdown()
		return nil, fmt.Errorf("gossip: start memberlist: %w", err)
	}
	nt.open() // only now does memberlist's member list hold this node
	return s, nil
}

// Start begins gossiping and, if peers were given, joining them in the
// background (retrying with backoff until one answers).
func (s *Syncer) Start() {
	s.wg.Add(4)
	go s.resendLoop()
	go s.every(s.cfg.GossipInterval, s.round)
	go s.every(s.cfg.ReconnectInterval, s.reconnect)
	go s.every(s.cfg.SeenTTL, s.pruneSeen)
	if len(s.cfg.Join) > 0 {
		s.wg.Add(1)
		go s.joinLoop()
	}
}

// Addr is the address and port peers reach this node at.
func (s *Syncer) Addr() string {
	n := s.ml.LocalNode()
	return n.Address()
}

// Join joins the given peers now, returning how many answered.
func (s *Syncer) Join(peers []string) (int, error) { return s.ml.Join(peers) }

// Leave tells the cluster this node is going, waits up to timeout for that
// to spread, and shuts the syncer down. It is safe to call more than once.
func (s *Syncer) Leave(timeout time.Duration) error {
	var err error
	s.stopOnce.Do(func() {
		s.leaving.Store(true)
		close(s.stop)
		s.wg.Wait()
		err = s.ml.Leave(timeout)
		if serr := s.ml.Shutdown(); err == nil {
			err = serr
		}
	})
	return err
}

// Shutdown stops without telling anyone, as a crash would. Tests use it.
func (s *Syncer) Shutdown() error {
	var err error
	s.stopOnce.Do(func() {
		s.leaving.Store(true)
		close(s.stop)
		s.wg.Wait()
		err = s.ml.Shutdown()
		s.census.forget(s.self)
	})
	return err
}

// Pause holds sending: consumption accumulates and goes out, coalesced, once
// resumed. Membership and receiving carry on. Tests use it to make "all of
// this load lands before any gossip" deterministic.
func (s *Syncer) Pause(paused bool) { s.paused.Store(paused) }

// Flush sends what is pending now instead of at the next round.
func (s *Syncer) Flush() { s.round() }

// Stats returns the syncer's counters.
func (s *Syncer) Stats() *Stats { return &s.stats }

// Transport returns what the gossip transport refused before memberlist.
func (s *Syncer) Transport() *TransportStats { return &s.transport.stats }

// Member is one node as this node sees it.
type Member struct {
	Name string
	Addr string
	// State is "alive" for a member in the cluster (memberlist counts a
	// suspected member as alive until it is declared dead) and "gone" for one
	// that died or left within the last hour and has not come back.
	State string
	Since time.Time // when it went away, for a gone member
	Meta  Meta      // what it advertises; zero for a gone member
}

// Members lists the members as this node sees them, itself included, alive
// ones first, each group by name.
func (s *Syncer) Members() []Member {
	s.mu.Lock()
	out := make([]Member, 0, len(s.peers)+len(s.failed))
	for _, n := range s.peers {
		m := Member{Name: n.Name, Addr: n.Address(), State: "alive"}
		m.Meta, _ = decodeMeta(n.Meta)
		out = append(out, m)
	}
	for name, f := range s.failed {
		out = append(out, Member{Name: name, Addr: f.addr, State: "gone", Since: f.since})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int {
		if a.State != b.State {
			return strings.Compare(a.State, b.State) // "alive" < "gone"
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// ErrNoKeyring is returned by SetKeys when the syncer was not started with a
// keyring (plain-text gossip, or a single SecretKey, cannot rotate).
var ErrNoKeyring = errors.New("gossip: not started with a keyring")

// SetKeys makes keys the gossip keyring, the first one primary (used to
// encrypt; every key is tried to decrypt), while gossip runs. Rotating
// without downtime takes three steps, each on every node before the next:
// add the new key ([old, new]), make it primary ([new, old]), drop the old
// one ([new]). Keys already in the ring are kept; the primary is switched
// before any key is removed.
func (s *Syncer) SetKeys(keys [][]byte) error {
	kr := s.cfg.Keyring
	if kr == nil {
		return ErrNoKeyring
	}
	if len(keys) == 0 {
		return errors.New("gossip: a keyring needs at least one key")
	}
	have := kr.GetKeys()
	for _, k := range keys {
		if !slices.ContainsFunc(have, func(h []byte) bool { return bytes.Equal(h, k) }) {
			if err := kr.AddKey(k); err != nil {
				return fmt.Errorf("gossip: add key: %w", err)
			}
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return fmt.Errorf("gossip: use key: %w", err)
	}
	for _, h := range have {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(h, k) }) {
			if err := kr.RemoveKey(h); err != nil {
				return fmt.Errorf("gossip: remove key: %w", err)
			}
		}
	}
	return nil
}

// Keys returns the gossip keys, the primary first; nil without a keyring.
func (s *Syncer) Keys() [][]byte {
	if s.cfg.Keyring == nil {
		return nil
	}
	return s.cfg.Keyring.GetKeys()
}

// Self is this node's name.
func (s *Syncer) Self() string { return s.self }

// OriginCount is how much of one key's consumption an origin has reported
// here, in the origin's current bucket epoch and window.
type OriginCount struct {
	Origin string
	Epoch  uint64
	Window uint64 // 0 for bucket algorithms
	Used   uint64 // the highest cumulative count heard
}

// Origins lists what every other node has reported of rule/key, by origin.
// It scans the table of counters heard, so it is for operators, not for
// the request path.
func (s *Syncer) Origins(rule, key string) []OriginCount {
	s.mu.Lock()
	var out []OriginCount
	for k, sr := range s.seen {
		if k.rule == rule && k.key == key {
			out = append(out, OriginCount{Origin: k.origin, Epoch: sr.cur.epoch, Window: sr.cur.window, Used: sr.cur.hi})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b OriginCount) int { return strings.Compare(a.Origin, b.Origin) })
	return out
}

// NumAlive is the number of members (this one included) believed alive.
func (s *Syncer) NumAlive() int { return s.ml.NumMembers() }

// SetMeta re-advertises this node's metadata, e.g. after a rules reload.
func (s *Syncer) SetMeta(m Meta) error {
	s.mu.Lock()
	s.meta = encodeMeta(s.ownMeta(m))
	s.mu.Unlock()
	return s.ml.UpdateNode(time.Second)
}

func (s *Syncer) joinLoop() {
	defer s.wg.Done()
	backoff := 200 * time.Millisecond
	for {
		n, err := s.ml.Join(s.cfg.Join)
		if n > 0 {
			s.log.Info("joined cluster", "peers_answered", n, "members", s.ml.NumMembers())
			return
		}
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		s.log.Warn("join failed; retrying", "peers", s.cfg.Join, "error", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// rejoin is a member's return: when, on the syncer's clock since it was
// made, and how long it had been away.
type rejoin struct{ at, away time.Duration }

// failedMember is a member that went away, and when.
type failedMember struct {
	addr  string
	since time.Time
}

// reconnectGiveUp is how long a member that went away is tried again.
const reconnectGiveUp = time.Hour

// every runs fn every interval until the syncer stops.
func (s *Syncer) every(interval time.Duration, fn func()) {
	defer s.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// reconnect tries to rejoin members that went away: after a partition
// heals, or a crashed node returns, the two sides find each other again.
func (s *Syncer) reconnect() {
	s.retryOwed()
	s.mu.Lock()
	addrs := make([]string, 0, len(s.failed))
	for name, f := range s.failed {
		if time.Since(f.since) > reconnectGiveUp {
			delete(s.failed, name)
			continue
		}
		addrs = append(addrs, f.addr)
	}
	s.mu.Unlock()
	if len(addrs) == 0 {
		return
	}
	if n, _ := s.ml.Join(addrs); n > 0 {
		s.log.Info("rejoined members that had gone away", "answered", n)
	}
}

// retransmits is how many rounds a counter is sent in when gossip is relayed.
func retransmits(n int) int { return 3 * int(math.Ceil(math.Log10(float64(n+1)))) }

// round sends what is pending: to every member in small clusters, to
// GossipNodes random members in large ones.
func (s *Syncer) round() {
	if s.paused.Load() {
		return
	}
	var own []Counter
	s.ledger.Drain(func(c Counter) { own = append(own, c) })

	s.mu.Lock()
	targets := make([]*memberlist.Node, 0, len(s.peers))
	for name := range s.peers {
		if name != s.self {
			n := s.peers[name]
			targets = append(targets, &n)
		}
	}
	fanout := len(targets)+1 <= s.cfg.FanoutLimit
	transmits := 1
	if !fanout {
		transmits = retransmits(len(targets) + 1)
	}
	for _, c := range own {
		if !s.staleLocked(c) { // consumption a reset forgave is not reported
			s.queueLocked(s.self, c, transmits)
		}
	}
	if len(s.pending) == 0 || len(targets) == 0 {
		s.mu.Unlock()
		return
	}
	packets, counts := s.packPendingLocked()
	if !fanout && len(targets) > s.cfg.GossipNodes {
		s.rnd.Shuffle(len(targets), func(i, j int) { targets[i], targets[j] = targets[j], targets[i] })
		targets = targets[:s.cfg.GossipNodes]
	}
	s.mu.Unlock()

	at := uint64(max(0, s.clock().UnixNano()))
	for i, plain := range packets {
		var stamped []byte
		for _, n := range targets {
			p := plain
			if readsStamps(n) {
				if stamped == nil {
					stamped = stampPacket(plain, at)
				}
				p = stamped
			}
			if err := s.ml.SendBestEffort(n, p); err != nil {
				s.log.Debug("send failed", "to", n.Name, "error", err)
				continue
			}
			s.stats.PacketsSent.Add(1)
			s.stats.BytesSent.Add(uint64(len(p)))
			s.stats.CountersSent.Add(uint64(counts[i]))
		}
	}
}

// packPendingLocked writes the pending counters into packets, counting one
// transmission of each and dropping those sent often enough. Windowed
// counters go in ascending window order, so a receiver meets the last
// counter of a window before the first of the next; bucket counters (window
// 0) go first, in any order. Windowed counters never share a packet with
// bucket counters: a peer of a version before windows refuses a packet
// holding any, and must not lose the bucket counters with them during a
// rolling upgrade. Caller holds s.mu.
func (s *Syncer) packPendingLocked() ([][]byte, []int) {
	w := newPacketWriter(s.self, s.cfg.PacketSize)
	send := func(k pendingKey, p *pendingCounter) {
		w.add(k.origin, p.c)
		if p.transmits--; p.transmits <= 0 {
			delete(s.pending, k)
		}
	}
	var windowed []pendingKey
	for k, p := range s.pending {
		if k.window == 0 {
			send(k, p)
		} else {
			windowed = append(windowed, k)
		}
	}
	slices.SortFunc(windowed, func(a, b pendingKey) int { return cmp.Compare(a.window, b.window) })
	w.flush()
	for _, k := range windowed {
		send(k, s.pending[k])
	}
	return w.packets()
}

// queueLocked makes c pending, coalescing with what is already pending for
// the same (origin, rule, key, window): one entry each, the newest counter,
// the earliest previous value not yet sent. A counter of another window is
// another entry, so a key moving to a new window leaves its old window's
// last counter queued beside the new one. Caller holds s.mu.
//
// At MaxPending, new relayed entries are dropped, and so are this node's own
// windowed ones (a key leaves one entry per window while no member is there
// to take them); push-pull repairs what is dropped. This node's own bucket
// counters are always queued: one per key, bounded by the ledger's keys.
func (s *Syncer) queueLocked(origin string, c Counter, transmits int) {
	k := pendingKey{counterKey{origin, c.Rule, c.Key}, c.Window}
	p, ok := s.pending[k]
	if !ok {
		if len(s.pending) >= s.cfg.MaxPending && (origin != s.self || c.Window != 0) {
			return
		}
		s.pending[k] = &pendingCounter{c: c, transmits: transmits}
		return
	}
	switch compareGen(c.Epoch, c.Window, p.c.Epoch, p.c.Window) {
	case 1:
		*p = pendingCounter{c: c, transmits: transmits}
	case 0:
		p.c.Used = max(p.c.Used, c.Used)
		p.c.Prev = min(p.c.Prev, c.Prev)
		p.transmits = max(p.transmits, transmits)
	}
}

// stateBudget bounds a push-pull state (memberlist allows 20 MiB).
const stateBudget = 8 << 20

func (s *Syncer) localState() []byte {
	var entries []stateEntry
	size := 0
	s.ledger.Snapshot(func(c Counter, balance float64) bool {
		size += entryOverhead + len(c.Rule) + len(c.Key) + 9
		if size > stateBudget/2 {
			return false
		}
		entries = append(entries, stateEntry{c: c, balance: balance})
		return true
	})
	// What this node has charged of others' counters for those keys: a
	// receiver adopting a balance must not charge them again.
	listed := make(map[[2]string]bool, len(entries))
	for _, e := range entries {
		listed[[2]string{e.c.Rule, e.c.Key}] = true
	}
	var seen []seenEntry
	size = 0
	s.mu.Lock()
	for k, sr := range s.seen {
		if !listed[[2]string{k.rule, k.key}] {
			continue
		}
		if size += entryOverhead + len(k.origin) + len(k.rule) + len(k.key); size > stateBudget/2 {
			break
		}
		seen = append(seen, seenEntry{origin: k.origin, c: Counter{Rule: k.rule, Key: k.key, Epoch: sr.cur.epoch, Window: sr.cur.window, Used: sr.cur.hi}})
	}
	s.mu.Unlock()
	return encodeState(s.self, entries, seen)
}

func encodeMeta(m Meta) []byte {
	b := mp.AppendArrayHeader(nil, 2)
	b = mp.AppendStr(b, versionWithSecurity(m))
	return mp.AppendStr(b, m.RulesHash)
}

func decodeMeta(b []byte) (Meta, error) {
	d := mp.NewDecoder(b)
	var m Meta
	if n, err := d.ArrayLen(); err != nil || n != 2 {
		return m, orMalformed(err, &d, "meta must have 2 fields")
	}
	v, err := str(&d, 128, "version")
	if err != nil {
		return m, err
	}
	h, err := str(&d, 128, "rules hash")
	if err != nil {
		return m, err
	}
	m = Meta{RulesHash: h}
	m.Version, m.Encrypted, m.Labelled, m.SecurityKnown = splitSecurity(v)
	return m, d.End()
}

// delegate adapts the syncer to memberlist.Delegate.
type delegate Syncer

func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}

func (d *delegate) NotifyMsg(b []byte)                         { (*Syncer)(d).receive(b) }
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return (*Syncer)(d).localState() }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     { (*Syncer)(d).mergeState(buf) }

// events logs membership changes.
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
			e.rejoined[n.Name] = rejoin{at: (*Syncer)(e).sinceBorn(), away: time.Since(f.since)}
		}
	}
	delete(e.failed, n.Name)
	node := copyNode(n)
	e.peers[n.Name] = node
	e.mu.Unlock()
	(*Syncer)(e).queueResend(node)
	e.log.Info("member joined", "name", n.Name, "addr", n.Address())
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	e.members.Add(-1)
	// memberlist does not say here whether the node died or left, so both
	// are retried; a node that left refuses the connection, which is cheap.
	e.mu.Lock()
	delete(e.peers, n.Name)
	if len(e.failed) < maxOrigins {
		e.failed[n.Name] = failedMember{addr: n.Address(), since: time.Now()}
	}
	e.mu.Unlock()
	e.log.Info("member left or died", "name", n.Name)
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	e.mu.Lock()
	e.peers[n.Name] = copyNode(n)
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
