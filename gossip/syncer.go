package gossip

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

// Syncer is one daemon's membership in the cluster and its exchange of
// consumption with the other members.
type Syncer struct {
	addr   atomic.Pointer[string] // the address peers reach this node at, set by Start
	cfg    Config
	ledger Ledger
	log    hclog.Logger
	self   string
	// mlc is memberlist's configuration, made by New; ml is memberlist, set
	// once by Start, or by Simulate (nil before: see list).
	mlc *memberlist.Config
	ml  atomic.Pointer[membershipRef]

	// lifeMu serialises Start, Leave and Shutdown; life is where the syncer
	// is (lifecycle.go).
	lifeMu sync.Mutex
	life   lifeState

	// late is this daemon's own stalls and the counters read late after
	// them (stalllate.go).
	late lateCharges

	mu      sync.Mutex
	pending map[pendingKey]*pendingCounter
	relay   relayShares // relayed entries of pending by origin (relay.go)
	seen    map[counterKey]*seenRange
	// strangers holds, per (rule, key), the one allowance that every origin
	// not a member shares (see takeLocked); under mu.
	strangers map[[2]string]*strangerAllowance
	// offsets holds, per member, how far its stamps run ahead of this
	// node's clock (see originTimeLocked); under mu.
	offsets map[string]int64
	// heardAt holds, per member, when its counters or state were last
	// heard here (see away.go); under mu.
	heardAt map[string]time.Time
	meta    []byte
	rnd     *rand.Rand

	// members counts the nodes memberlist has reported joining and not yet
	// leaving, maintained by the event delegate: receive may run before
	// memberlist.Create has returned, so it must not touch s.ml.
	members atomic.Int64
	// failed are the members that went away, to try to rejoin and to count
	// dead or left in the census (census.go); under mu.
	failed map[string]failedMember
	// peers are copies of the live members' nodes, kept by the event
	// delegate. memberlist.Members returns pointers into its own state,
	// which it rewrites in place when a node comes back: reading them later
	// races with it, so the syncer sends to its own copies. Under mu.
	peers map[string]memberlist.Node
	// peerNames and peerIndex list the names in peers, for picking a
	// round's targets (targets.go). Under mu.
	peerNames []string
	peerIndex map[string]int
	paused    atomic.Bool
	leaving   atomic.Bool // set when Leave or Shutdown begins: memberlist's socket errors are then expected, joining stops
	stop      chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup
	stats     Stats
	resets    resetState  // under mu, but for its resend channel
	repair    repairState // push-pulls asked for counters first heard midway (repair.go); under mu
	// transport is memberlist's network, made by Start; tstats counts what
	// it refuses (here, so that they can be registered before Start).
	transport *transport
	tstats    TransportStats
	// senders maps members' addresses to their names for the sender
	// guard (senderguard.go); rebuilt under mu on membership events.
	senders atomic.Pointer[senderBook]

	// suspicious counts clamped or refused reports by origin (see
	// suspectLocked); under mu.
	suspicious map[string]uint64
	// suspiciousWhy counts the same reports by the check that clamped or
	// refused them (suspectLocked's why: a constant of the code, so a
	// few keys); under mu.
	suspiciousWhy map[string]uint64
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
	// censusID tags memberlist's metrics for Config.Census (censussink.go).
	censusID string
	// simulated is set by Simulate: no transport, so no sender book.
	simulated bool
	// mapOrder makes a simulated syncer iterate its maps as production
	// does (SimulateMapOrder).
	mapOrder bool
	// shared is a simulation's member table, read instead of peers,
	// peerNames and peerIndex (simshared.go); nil in production.
	shared *SharedMembers

	// owner is owner mode's state (owner.go); under mu.
	owner                   ownerState
	ownerSent, ownerRefused atomic.Uint64
}

type counterKey struct{ origin, rule, key string }

// pendingKey names a pending counter: one per window, so that the last
// counter of a window and the first of the next both go out, and one per
// epoch, so that a counter of a newer epoch, real or forged, never pushes
// another generation's counter out of the queue.
type pendingKey struct {
	counterKey
	window uint64
	epoch  uint64
}

type pendingCounter struct {
	c         Counter
	transmits int // rounds left to send it in
	// back holds, for this node's own counters, the Prev each of the last
	// rounds sent, newest first (sent of them valid): see carry.
	back [redundancy - 1]uint64
	sent int
	// rack is the highest of this node's own counter a replica or third
	// counted without acknowledging it: a third is sent it from there
	// (ownerchain.go).
	rack uint64
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
	// DeferredReports counts reports of origins that are not members here
	// that the allowance all non-members share for a key could not pay
	// though the origin's own could (a member's counters heard before this
	// node saw it join): the rest is left unheard, charged when the origin
	// is a member and reports it again or a push-pull lists it.
	DeferredReports atomic.Uint64
	// UnknownCounters counts counters of rules this node does not have, or
	// of keys longer than it accepts: neither charged nor remembered.
	UnknownCounters atomic.Uint64
	// RelaysDropped counts counters that were news but not queued for
	// relaying: their origin's share of the queue, or the queue, was full.
	RelaysDropped atomic.Uint64
	// Repairs counts push-pulls this node started because it first heard a
	// member's counter midway (see repair.go).
	Repairs atomic.Uint64
}

// Stats returns the syncer's counters.
func (s *Syncer) Stats() *Stats { return &s.stats }

// Transport returns what the gossip transport refused before memberlist.
func (s *Syncer) Transport() *TransportStats { return &s.tstats }

// Self is this node's name.
func (s *Syncer) Self() string { return s.self }
