package gossip

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/go-metrics"
	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/internal/backoff"
)

// A Syncer's life follows serf's agent: New (validate, nothing running) →
// Start (bind, run) → Leave (tell the cluster) → Shutdown (stop everything).

// Lifecycle errors.
var (
	// ErrStarted is returned by Start on a syncer already started.
	ErrStarted = errors.New("gossip: already started")
	// ErrShutdown is returned by Start after Shutdown, or after a Start that
	// failed: a syncer runs at most once (memberlist cannot rejoin once it
	// has left either); make a new one.
	ErrShutdown = errors.New("gossip: shut down")
	// ErrNotStarted is returned by Join before Start.
	ErrNotStarted = errors.New("gossip: not started")
)

// lifeState is where a syncer is in its life; under Syncer.lifeMu.
type lifeState int

const (
	created lifeState = iota
	running
	left
	shutDown
)

// New validates cfg and prepares a syncer. It binds no port, starts no
// goroutine (neither Sluice's nor memberlist's) and talks to no one: all of
// that is Start's. What New checks: the node name, the packet size, the
// secret key's length, the label's length; what only binding can reveal (a
// port in use, an address not on this host) Start reports.
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
	s.mlc = s.memberlistConfig()
	if len(s.mlc.Label) > memberlist.LabelMaxSize {
		return nil, fmt.Errorf("gossip: label of %d bytes; at most %d", len(s.mlc.Label), memberlist.LabelMaxSize)
	}
	if s.mlc.SecretKey != nil {
		if err := memberlist.ValidateKey(s.mlc.SecretKey); err != nil {
			return nil, fmt.Errorf("gossip: secret key: %w", err)
		}
	}
	return s, nil
}

// deadNameReclaim is how long a member must have been dead before its
// name may come back from another address (memberlist's
// DeadNodeReclaimTime). Memberlist's default, never, refuses a member
// restarted on a new address under its name (a StatefulSet's pod
// rescheduled, a VM given a new address) as a name conflict until every
// node has forgotten the dead one: about 40 s (GossipToTheDeadTime, 30 s,
// after it was declared dead), while its consumption is refused as
// coming from the wrong address. A member declared dead has already
// missed its probes and its suspicion timeout, so its name is free at
// once; a live member's name is never taken (that conflict is still
// refused).
const deadNameReclaim = time.Nanosecond

// memberlistConfig is memberlist's configuration for this syncer, its
// transport left for Start to bind.
func (s *Syncer) memberlistConfig() *memberlist.Config {
	cfg := s.cfg
	mlc := memberlist.DefaultLANConfig()
	mlc.Name = cfg.NodeName
	mlc.BindAddr, mlc.BindPort = cfg.BindAddr, cfg.BindPort
	mlc.AdvertiseAddr, mlc.AdvertisePort = cfg.AdvertiseAddr, cfg.AdvertisePort
	mlc.PushPullInterval = cfg.PushPullInterval
	mlc.DeadNodeReclaimTime = deadNameReclaim
	mlc.EnableCompression = false // counters are small binary; compression doubled CPU
	mlc.Label = cfg.Label
	// This node reads stamped counters packets (see stamp.go); its current
	// delegate version stays 0 so that older members still accept it.
	mlc.DelegateProtocolMax = protoChainWalk // owner mode (owner.go), with users in answers (ownershare.go), aggregation (owneragg.go), the third out of it (ownerchainagg.go) and the chain walking past a silent third (ownerchainwalk.go)
	mlc.SecretKey, mlc.Keyring = cfg.SecretKey, cfg.Keyring
	mlc.Delegate = (*delegate)(s)
	mlc.Events = (*events)(s)
	mlc.Logger = memberlistLog(cfg.Logger.Named("memberlist"), &s.leaving)
	if cfg.Census != nil {
		s.censusID = newCensusID()
		mlc.MetricLabels = append(mlc.MetricLabels, metrics.Label{Name: censusLabel, Value: s.censusID})
	}
	if cfg.MemberlistConfig != nil {
		cfg.MemberlistConfig(mlc)
	}
	return mlc
}

// Start binds memberlist's port (UDP and TCP), starts memberlist and the
// syncer's own loops (sending, resending resets, reconnecting, pruning) and,
// if peers were given, joins them in the background, retrying with backoff
// until one answers. A Start that fails has stopped whatever it began; the
// syncer cannot be started again, and Shutdown is still safe to call.
func (s *Syncer) Start() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	switch s.life {
	case created:
	case shutDown:
		return ErrShutdown
	default:
		return ErrStarted
	}
	if err := s.startMemberlist(); err != nil {
		s.life = shutDown
		s.stopOnce.Do(func() { close(s.stop) })
		return err
	}
	s.life = running
	s.wg.Add(5)
	go s.every(repairTick, s.repairOne)
	go s.resendLoop()
	go s.every(s.cfg.GossipInterval, s.round)
	go s.every(s.cfg.ReconnectInterval, s.reconnect)
	go s.every(s.cfg.SeenTTL, s.pruneSeen)
	if len(s.cfg.Join) > 0 {
		s.wg.Add(2)
		go s.joinLoop()
		go s.every(s.cfg.RejoinInterval, s.rejoin)
	}
	return nil
}

// startMemberlist binds the transport and creates memberlist on it.
func (s *Syncer) startMemberlist() error {
	cfg, mlc := s.cfg, s.mlc
	nt, err := newTransport(cfg.BindAddr, cfg.BindPort, mlc.Logger, &s.tstats)
	if err != nil {
		return fmt.Errorf("gossip: bind %s:%d: %w", cfg.BindAddr, cfg.BindPort, err)
	}
	mlc.BindPort = nt.Port()
	if mlc.AdvertiseAddr != "" && mlc.AdvertisePort == 0 {
		mlc.AdvertisePort = mlc.BindPort
	}
	mlc.Transport = nt
	if cfg.WrapTransport != nil {
		mlc.Transport = cfg.WrapTransport(nt)
	}
	nt.isMember = s.memberAddr
	nt.configure(mlc.Label, mlc.SecretKey != nil || (mlc.Keyring != nil && len(mlc.Keyring.GetKeys()) > 0), mlc.GossipVerifyIncoming)
	nt.senders = &senderGuard{label: []byte(mlc.Label), encryption: nt.guard.encryption, verify: mlc.GossipVerifyIncoming,
		keys: func() [][]byte {
			if mlc.Keyring == nil {
				return nil
			}
			return mlc.Keyring.GetKeys()
		},
		book: s.senders.Load, vouch: newVouches(), stranger: s.noteStranger}
	s.transport = nt
	ml, err := memberlist.Create(mlc)
	if err != nil {
		nt.Shutdown()
		return fmt.Errorf("gossip: start memberlist: %w", err)
	}
	// memberlist's own node is rewritten under its lock by UpdateNode
	// (SetMeta): read the address once, before anything can update it.
	addr := ml.LocalNode().Address()
	s.addr.Store(&addr)
	s.ml.Store(&membershipRef{ml})
	s.watchStalls() // stalllate.go
	nt.open()       // only now does memberlist's member list hold this node
	return nil
}

// stopped reports whether Shutdown has begun (or Start failed).
func (s *Syncer) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// list is memberlist once Start has created it (or the simulated
// membership Simulate gave), else nil.
func (s *Syncer) list() Membership {
	if r := s.ml.Load(); r != nil {
		return r.m
	}
	return nil
}

// Addr is the address and port peers reach this node at; "" before Start.
func (s *Syncer) Addr() string {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Join joins the given peers now, returning how many answered.
func (s *Syncer) Join(peers []string) (int, error) {
	ml := s.list()
	if ml == nil {
		return 0, ErrNotStarted
	}
	return ml.Join(peers)
}

// Leave tells the cluster this node is going and waits up to timeout for
// that to be sent. In owner mode it first spends up to half of timeout
// settling: until its own counters are acknowledged and its aggregates'
// answers are out (leavesettle.go). Joining and reconnecting stop; counters still go out and
// come in until Shutdown, which is what must follow. Leave before Start, a
// second time or after Shutdown does nothing.
func (s *Syncer) Leave(timeout time.Duration) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.life != running {
		return nil
	}
	// In owner mode, first let what this node counted and owns reach the
	// others while it is still a full member (leavesettle.go).
	began := time.Now()
	s.settleBeforeLeave(timeout / leaveSettleShare)
	timeout = max(0, timeout-time.Since(began))
	s.life = left
	s.leaving.Store(true)
	// First say it is leaving (in its metadata), then leave: peers that
	// heard the first count it left, not dead (census.go). Each waits for
	// memberlist to send its broadcast, half the time each.
	err := s.advertiseLeaving(timeout / 2)
	if lerr := s.list().Leave(timeout - timeout/2); lerr != nil {
		err = fmt.Errorf("gossip: leave: %w", lerr)
	}
	return err
}

// Shutdown stops everything Start began: the syncer's loops, memberlist and
// the transport (its sockets and every stream it screens). Without a Leave
// first the cluster is told nothing, as after a crash. It is idempotent and
// safe before Start and after a failed Start.
func (s *Syncer) Shutdown() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.life == shutDown {
		return nil
	}
	s.life = shutDown
	s.leaving.Store(true)
	s.stopOnce.Do(func() { close(s.stop) })
	s.wg.Wait()
	var err error
	if ml := s.list(); ml != nil {
		if err = ml.Shutdown(); err != nil {
			err = fmt.Errorf("gossip: shut memberlist down: %w", err)
		}
	}
	if s.transport != nil {
		s.transport.Shutdown() // memberlist shut down a wrapped transport only
	}
	if s.cfg.Census != nil {
		s.cfg.Census.forget(s.censusID)
	}
	return err
}

// LeaveAndShutdown is Leave then Shutdown: how a daemon stops. The error is
// Leave's, else Shutdown's.
func (s *Syncer) LeaveAndShutdown(timeout time.Duration) error {
	err := s.Leave(timeout)
	if serr := s.Shutdown(); err == nil {
		err = serr
	}
	return err
}

// joinLoop joins the configured peers, with backoff, until one answers or
// the syncer leaves.
func (s *Syncer) joinLoop() {
	defer s.wg.Done()
	retry := backoff.Policy{Min: 200 * time.Millisecond, Max: 30 * time.Second, Spread: 0.5}
	for attempt := 1; !s.leaving.Load(); attempt++ {
		n, err := s.list().Join(s.cfg.Join)
		if n > 0 {
			s.log.Info("joined cluster", "peers_answered", n, "members", s.list().NumMembers())
			return
		}
		wait := retry.Delay(attempt, rand.Float64())
		s.log.Warn("join failed; retrying", "peers", s.cfg.Join, "error", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

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
