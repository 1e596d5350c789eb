package gossip

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

// Config configures a Syncer. Zero fields take the defaults noted.
type Config struct {
	// NodeName must be unique in the cluster. Required.
	NodeName string
	// BindAddr and BindPort: where memberlist listens (UDP and TCP on the
	// same port). Port 0 picks a free one. Default 127.0.0.1:7946: loopback
	// only, so a Syncer gossips beyond its host only when told an address
	// (and then should have SecretKey or Keyring).
	BindAddr string
	BindPort int
	// AdvertiseAddr and AdvertisePort: what peers are told to reach; empty
	// means the bound address (or a private IP when bound to 0.0.0.0).
	AdvertiseAddr string
	AdvertisePort int
	// Join lists peers (host:port, names or addresses) to join. Joining is
	// retried with backoff in the background until one answers.
	Join []string

	// GossipInterval is how often pending counters are sent: the lag
	// between an admission here and its charge elsewhere. Default 20ms.
	GossipInterval time.Duration
	// GossipNodes is how many random peers each round reaches once the
	// cluster is larger than FanoutLimit. Default 4.
	GossipNodes int
	// FanoutLimit is the largest cluster in which counters go straight to
	// every member. Default 64: at 25 nodes direct fan-out converged in one
	// interval where relaying took three, and sent a twentieth of the bytes;
	// its price is N−1 packets per node per busy interval (about 3,150/s at
	// 64 nodes and 20ms), which stays cheap up to this size.
	FanoutLimit int
	// GossipMode chooses how counters travel: "direct" (to every member),
	// "relay" (to GossipNodes members, which relay), "owner" (to each key's
	// owner, which answers with the cluster's view; see owner.go) or "auto"
	// (default): direct up to FanoutLimit members, owner beyond when every
	// member speaks it, else relay.
	GossipMode string
	// AggregateAbove is, in owner mode, how many users of one key its owner
	// holds before it has them go through aggregators (see owneragg.go).
	// Default DefaultAggregateAbove; negative: never.
	AggregateAbove int
	// Rings, if set, shares owner rings between the syncers of one
	// process (a simulation's); nil: each syncer builds its own.
	Rings *RingCache
	// PushPullInterval is how often a full state exchange with one random
	// peer repairs lost packets. Default 10s.
	PushPullInterval time.Duration
	// ReconnectInterval is how often this node tries to rejoin members it
	// saw fail (memberlist never probes a dead node again, so a healed
	// partition would otherwise stay split). Default 5s.
	ReconnectInterval time.Duration
	// RejoinInterval is how often the Join list is resolved again and any
	// address in it that is not a member is joined (see rejoin.go).
	// Default DefaultRejoinInterval.
	RejoinInterval time.Duration
	// PacketSize bounds a counters packet. Default 1300 bytes, which fits
	// memberlist's UDP buffer with encryption and a label.
	PacketSize int

	// SecretKey (16, 24 or 32 bytes) or Keyring turns on encryption: a node
	// without the key can neither join nor be heard.
	SecretKey []byte
	Keyring   *memberlist.Keyring
	// Label is checked on every packet and stream (memberlist drops one
	// whose label differs before decrypting it, and authenticates the label
	// with the key), keeping clusters on one network apart. Default "sluice".
	Label string

	// Meta is advertised to peers (at most 512 bytes once encoded).
	Meta Meta

	// MaxSeen caps the (origin, rule, key) counters remembered. Default 1<<20.
	MaxSeen int
	// SeenTTL is how often counters no packet has mentioned since the last
	// time are forgotten: an idle key's counters go after one to two SeenTTL.
	// Default 1 minute.
	SeenTTL time.Duration
	// MaxPending caps counters waiting to be sent. Default 1<<18.
	MaxPending int

	// Logger receives the syncer's and memberlist's logs. Default: discard.
	Logger hclog.Logger
	// WrapTransport, if set, wraps memberlist's network transport (tests use
	// it to drop, duplicate, reorder or partition traffic).
	WrapTransport func(memberlist.Transport) memberlist.Transport
	// MemberlistConfig, if set, adjusts memberlist's configuration last
	// (tests shorten its timeouts).
	MemberlistConfig func(*memberlist.Config)
	// Census, if set, is the go-metrics sink the program installed as
	// go-metrics' global (see CensusSink): the syncer then reports how many
	// members memberlist suspects. Nil: MemberStates.Suspect is 0.
	Census *CensusSink
}

// Meta is what a node tells its peers about itself.
type Meta struct {
	Version   string
	RulesHash string
	// Encrypted and Labelled are what the member says of its gossip, valid
	// when SecurityKnown (nodes before this version do not say). A Syncer
	// fills them in from its own Config; what callers set is ignored.
	Encrypted, Labelled, SecurityKnown bool
	// Leaving is said by a member that is leaving (Syncer.Leave), so that
	// its peers count it left, not dead, once it has gone: memberlist knows
	// which, but does not tell (see census.go). A Syncer sets it; what
	// callers set is ignored.
	Leaving bool
}

// Defaults for Config's zero fields.
const (
	DefaultBindAddr         = "127.0.0.1"
	DefaultBindPort         = 7946
	DefaultGossipInterval   = 20 * time.Millisecond
	DefaultGossipNodes      = 4
	DefaultFanoutLimit      = 64
	DefaultPushPullInterval = 10 * time.Second
	DefaultPacketSize       = 1300
	DefaultLabel            = "sluice"
)

func (c *Config) setDefaults() error {
	if c.NodeName == "" {
		return errors.New("gossip: node name is required")
	}
	if c.BindAddr == "" {
		c.BindAddr = DefaultBindAddr
	}
	if c.GossipInterval <= 0 {
		c.GossipInterval = DefaultGossipInterval
	}
	if c.GossipNodes <= 0 {
		c.GossipNodes = DefaultGossipNodes
	}
	if c.FanoutLimit <= 0 {
		c.FanoutLimit = DefaultFanoutLimit
	}
	if err := checkGossipMode(c.GossipMode); err != nil {
		return err
	}
	if c.AggregateAbove == 0 {
		c.AggregateAbove = DefaultAggregateAbove
	}
	if c.PushPullInterval <= 0 {
		c.PushPullInterval = DefaultPushPullInterval
	}
	if c.ReconnectInterval <= 0 {
		c.ReconnectInterval = 5 * time.Second
	}
	if c.RejoinInterval <= 0 {
		c.RejoinInterval = DefaultRejoinInterval
	}
	if c.PacketSize <= 0 {
		c.PacketSize = DefaultPacketSize
	}
	if c.PacketSize < 256 || c.PacketSize > 1350 {
		return fmt.Errorf("gossip: packet size %d must be in [256, 1350]", c.PacketSize)
	}
	if c.Label == "" {
		c.Label = DefaultLabel
	}
	if c.SeenTTL <= 0 {
		c.SeenTTL = time.Minute
	}
	if c.MaxSeen <= 0 {
		c.MaxSeen = 1 << 20
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 1 << 18
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return fmt.Errorf("gossip: secret key of %d bytes; want 16, 24 or 32", len(c.SecretKey))
	}
	return nil
}
