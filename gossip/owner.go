package gossip

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/memberlist"
)

// Owner mode: gossip whose cost per node is set by the node's own traffic.
//
// Every (rule, key) has an owner, chosen on the owner ring (ownerring.go)
// over the members that speak the owner protocol. Each node still decides
// locally. Every GossipInterval it sends each key it touched its own
// cumulative counter for the key (kind 4, ownerwire.go), to the key's owner
// only, and repeats it until the owner acknowledges it. The owner keeps,
// per key it is sent (an aggregate), each contributor's share and their
// sum, charges its own bucket with what it counts, and answers every
// contributor whose view is behind (kind 5): the cumulative consumption of
// every other origin in the aggregate, and how far it has counted the
// contributor's own counter. The contributor charges what the answer adds
// to what it heard before. A node that never touches a key never hears of
// it; a node's packets per interval are one per owner of the keys it
// touched plus one answer per node that sent it keys, whatever the size of
// the cluster.
//
// What keeps it right:
//   - Counters are cumulative and the owner counts, per contributor and
//     epoch, only what lies above the highest it has counted and above the
//     counter's prev (the contributor's last acknowledged value): repeats,
//     duplicates and reordering count nothing twice.
//   - Answers are cumulative too, per (owner, gen), gen naming the
//     receiver's subscription to the owner's aggregate (made anew with the
//     aggregate, or when the receiver comes back after ownerSubTTL without
//     using the key): a receiver charges only what an answer adds to the
//     last one it heard of that subscription, holding the last two per key
//     (so two owners during a membership change are both charged once). A
//     receiver that first hears of a subscription charges others−prev, prev
//     being what the owner counts it as having heard (0 in a new aggregate,
//     all but the key's debt in an established one: newcomerPrevLocked);
//     the subscription's first answers all carry that prev, so one that
//     missed the first is still charged it (ownerfirst.go).
//   - A node hears of a key only while it uses it (every interval the key
//     changes for ownerActiveTTL after its last counter, then once a second
//     until ownerSubTTL), so what it hears is set by its own traffic.
//   - A new owner (after a member joins or goes) makes a new aggregate and
//     learns from the next counters, which carry everything the old owner
//     had not acknowledged: nothing is lost beyond what the old owner had
//     acknowledged and not yet told (one interval), and, when only its ack
//     was lost, one interval of one node is counted twice.
//   - Guards: kinds 4 and 5 pass the sender guard (a packet's sender is the
//     member at its source address) and the stamp check; an owner counts a
//     contributor's counters only when it is a member and the sender itself,
//     within that origin's allowance for the key; a receiver takes an answer
//     only from the key's owner or replica on its own ring, and no more than
//     every other member's allowance together could have admitted since.
//   - Memory: the aggregates' contributors and the answers heard are capped
//     by MaxSeen each, and forgotten after SeenTTL without traffic.
//
// A key that many nodes use goes through aggregators before its owner
// (owneragg.go): its owner then hears from and answers about √N of them.
//
// Mode choice (Config.GossipMode): "direct" sends to every member, "relay"
// to a few that relay, "owner" as above; "auto" (the default) is direct up
// to FanoutLimit members and owner beyond when every member speaks it
// (advertises protoOwner), else relay: a rolling upgrade keeps relaying
// until its last old node is gone.

// Gossip modes (Config.GossipMode).
const (
	ModeAuto   = "auto"
	ModeDirect = "direct"
	ModeRelay  = "relay"
	ModeOwner  = "owner"
)

// ownerResends is how many rounds in a row an unacknowledged counter is
// sent to its owner; after that it is sent every ownerBackoff rounds until
// acknowledged or SeenTTL has passed.
const (
	ownerResends = 8
	ownerBackoff = 8
)

// A node whose counters for a key go unanswered for ownerFailover rounds
// sends them to the key's replica instead, for ownerFailoverHold rounds
// (then tries the owner again): an owner that died is replaced in a few
// intervals, not after memberlist's failure detection (seconds). The
// replica aggregates what it is sent as any node does, and its answers are
// taken (a key's replica may answer for it). A replica silent as long
// sends them on to the key's third member (ownerchain.go).
const (
	ownerFailover     = 16
	ownerFailoverHold = 512
)

// How long a contributor keeps hearing of a key after it last sent a
// counter for it. While it is active (ownerActiveTTL, at least 50 gossip
// intervals) it is answered every interval the key changes; after that,
// until ownerSubTTL, at most once per ownerIdlePush: a node that stopped
// using a key (or is refused: it sends no counter then) still has its
// bucket charged, at most that late, so its view never drifts a full
// refill above the cluster's. Then it hears no more of the key (hearing of
// every key it ever touched would make every node hear of every key,
// whatever its own traffic); when it uses the key again it is a newcomer,
// told the key's debt at once (newcomerPrevLocked).
const (
	ownerActiveTTL = 2 * time.Second
	ownerSubTTL    = 10 * time.Second
	ownerIdlePush  = time.Second
)

// activeTTL is ownerActiveTTL, at least 50 gossip intervals; subTTL is
// ownerSubTTL, at least 5 activeTTL.
func (s *Syncer) activeTTL() time.Duration { return max(ownerActiveTTL, 50*s.cfg.GossipInterval) }
func (s *Syncer) subTTL() time.Duration    { return max(ownerSubTTL, 5*s.activeTTL()) }

// ownerAnswerBudget bounds the answers a node sends per round, over all
// the keys it owns: a key that thousands of nodes use makes its owner
// answer each of them every interval, so beyond the budget the others wait
// for the next rounds (each is answered about every users/budget rounds,
// and the view they decide on is that much older). At the default 20 ms,
// at most 25,600 answers a second.
const ownerAnswerBudget = 512

// freshAggregate is, in gossip intervals, how young an aggregate is whose
// whole total a new contributor is told: one made anew (a new owner, after
// a membership change) holds only what its contributors had not had
// acknowledged, which nobody has charged yet.
const freshAggregate = 4

// aggKey names an aggregate: a key under a rule, in a window (0 for bucket
// algorithms).
type aggKey struct {
	rule, key string
	window    uint64
}

// ownedKey is an owner's aggregate for one key.
type ownedKey struct {
	born    time.Duration // since the syncer's birth
	heard   time.Duration // the last contribution, since the syncer's birth
	total   uint64
	subs    map[string]*ownerSub
	dirty   bool    // a contribution arrived since the last answers
	users   uint64  // contributors heard lately (ownershare.go)
	balance float64 // the key's balance here, as of the last answers (NaN: unknown)
}

// ownerSub is one contributor to an aggregate.
type ownerSub struct {
	serial    uint64 // names this subscription in answers (their gen)
	contrib   uint64 // counted into the total from this contributor
	epoch, hi uint64 // its counter's epoch and the highest Used counted
	sent      uint64 // others, as last told to it
	first     uint64 // the prev its first answers carry (ownerfirst.go)
	early     uint8  // answers sent so far, up to ownerFirstAnswers
	needAck   bool
	// What it confirmed hearing (ownerrepeat.go): the highest others, that
	// it sends heard messages at all, and that it started from first.
	told                 uint64
	heardAcks, confirmed bool
	repeats              uint8         // answers repeated since the last news
	heard                time.Duration // its last counter, since born
	seen                 time.Duration // its last counter or touch (ownershare.go)
	answered             time.Duration // its last answer, since born
	allow                allowance
	agg                  *aggSub // aggregation (owneragg.go); nil: none
}

// heardKey is what a node heard from the aggregates of one key.
type heardKey struct{ slots [2]heardSlot }

type heardSlot struct {
	owner     string
	gen, last uint64
	start     uint64 // the prev it was started with, lowered by a later smaller prev (ownerrepeat.go)
	// first is the sender's prev it was started with, lowered as start:
	// start itself when the subscription started where the sender said,
	// else (owneragg.go's aggFirstLocked started it from what this node
	// knew already) what its heard messages confirm, and a smaller prev
	// then charges nothing (this node knew what lies below start).
	first uint64
	at    time.Duration
	// sent is when the latest of its answers was sent, on this node's
	// clock (ownerchargeonce.go, noteAnswerSentLocked); 0: not noted.
	sent time.Duration
	// base is its last when this node last switched to its sender from
	// another aggregator (or when it started): last − base is what it
	// charged through it since, which a subscription it comes back to
	// adds (owneraggswitch.go).
	base uint64
	// own marks answers to this node's own counter while it aggregates the
	// key (aggOwnAnswerLocked): they charge nothing, and they give way to
	// its group's (owneragg.go, aggHeardSlot).
	own bool
}

// ownerState is a syncer's owner-mode state; under Syncer.mu.
type ownerState struct {
	ring *ownerRing
	// last is the ring last built, and changed the members that joined or
	// went since (at most ringDeltaMax + 1): the next ring is last updated
	// for them (ownerringdelta.go).
	last    *ownerRing
	changed []string
	fp      uint64 // XOR of memberHash over the members but this node
	capable bool   // every member speaks owner mode
	mine    map[aggKey]*ownedKey
	subs    int // contributors over all of mine
	heard   map[aggKey]*heardKey
	lastGen uint64 // the last subscription serial given
	swept   time.Duration
	round   uint64
	// waiting holds, per (rule, key) whose counters were sent and not yet
	// answered, the round of the first such send; failover, per key sent to
	// its replica, the round that began (see ownerFailover). Each at most
	// MaxSeen entries.
	waiting   map[[2]string]uint64
	failover  map[[2]string]failover
	lastOwn   map[[2]string]time.Duration // per key, when its own counter was last queued (ownershare.go)
	selfViews []keyView                   // views for this node's own ledger: of keys it owns and uses, and owners lost
	// toConfirm holds what this node heard and has yet to confirm to the
	// owners (ownerrepeat.go); at most MaxSeen entries.
	toConfirm map[heardTo]heardDue
	agg       aggState    // aggregation before the owner (owneragg.go)
	pairs     chargePairs // keys failed over lately, charged once (ownerchargeonce.go)
}

// failover is a key's counters sent to the replica (and still to owner)
// since round at: it ends after ownerFailoverHold rounds, when owner
// answers, or when the ring names another owner (ownerfailover.go).
type failover struct {
	at    uint64
	owner string
	ended uint64 // the round it ended, 0 while it lasts (ownerfailover.go)
	// sent is the round of the first send to the replica it has not
	// answered (0: none), third the third member the counters go to as
	// well since the replica left them unanswered ("": none; ownerchain.go).
	sent  uint64
	third string
	// tsent is the round of the first send to third it has not answered
	// (0: none): after ownerFailover such rounds the chain walks on to the
	// key's next member (ownerchainwalk.go), which becomes third.
	tsent uint64
	// replica is the replica it went to, as last seen (ownerfailovermove.go).
	replica string
}

// OwnerStats counts owner mode's work; read it with Syncer.OwnerStats.
type OwnerStats struct {
	Aggregates, Contributors int // held now
	AnswersSent              uint64
	AnswersRefused           uint64 // from a node that is neither owner, replica, chained third (ownerchain.go) nor aggregator here, or about a key this node holds nothing of (ownerunsolicited.go)
}

// OwnerStats returns what this node holds and did as an owner.
func (s *Syncer) OwnerStats() OwnerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return OwnerStats{Aggregates: len(s.owner.mine), Contributors: s.owner.subs,
		AnswersSent: s.ownerSent.Load(), AnswersRefused: s.ownerRefused.Load()}
}

// checkGossipMode validates Config.GossipMode.
func checkGossipMode(m string) error {
	switch m {
	case "", ModeAuto, ModeDirect, ModeRelay, ModeOwner:
		return nil
	}
	return fmt.Errorf("gossip: mode %q; want auto, direct, relay or owner", m)
}

// refreshRingLocked rebuilds the ring if a membership event dropped it
// (members.go), from the syncer's RingCache when it has one, and counts
// the members that do not speak owner mode. Caller holds s.mu.
func (s *Syncer) refreshRingLocked() {
	if s.owner.ring != nil {
		return
	}
	build := func() *ownerRing {
		if r := s.ringFromLastLocked(); r != nil { // ownerringdelta.go
			return r
		}
		names := make([]string, 0, len(s.peers)+1)
		names = append(names, s.self)
		for name := range s.peers {
			names = append(names, name)
		}
		return newOwnerRing(names)
	}
	if s.cfg.Rings != nil {
		fp := s.owner.fp ^ memberHash(s.self) ^ mix64(uint64(s.othersLocked()+1))
		s.owner.ring = s.cfg.Rings.get(fp, build)
	} else {
		s.owner.ring = build()
	}
	s.owner.capable = true
	if s.cfg.GossipMode == "" || s.cfg.GossipMode == ModeAuto {
		for name, n := range s.peers {
			if name != s.self && n.DMax < protoOwner {
				s.owner.capable = false
				break
			}
		}
	}
}

// ownerMemberLocked records that a member joined (or left) for the ring's
// fingerprint and drops the ring, to be rebuilt when next used. Call it
// only when the member's presence changes. Caller holds s.mu.
func (s *Syncer) ownerMemberLocked(name string) {
	if name != s.self {
		s.owner.fp ^= memberHash(name)
	}
	s.ringChangedLocked(name) // ownerringdelta.go
	s.owner.ring = nil
}

// ownerMode reports whether this node gossips in owner mode now.
func (s *Syncer) ownerMode() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ownerModeLocked()
}

// ownerModeLocked reports whether this node gossips in owner mode now.
// Caller holds s.mu.
func (s *Syncer) ownerModeLocked() bool {
	switch s.cfg.GossipMode {
	case ModeOwner:
		return true
	case ModeDirect, ModeRelay:
		return false
	}
	s.refreshRingLocked()
	return s.othersLocked()+1 > s.cfg.FanoutLimit && s.owner.capable
}

// fanoutLocked reports whether, with n members, counters go straight to
// every member (direct) rather than relayed, outside owner mode.
func (s *Syncer) fanoutLocked(n int) bool {
	switch s.cfg.GossipMode {
	case ModeDirect:
		return true
	case ModeRelay:
		return false
	}
	return n <= s.cfg.FanoutLimit
}

// ownerOut is what a round sends one member.
type ownerOut struct {
	to      memberlist.Node
	packets [][]byte
	counts  []int // counters (or answers) in each packet
	heard   bool  // heard messages (ownerrepeat.go)
}

// ownerRoundLocked is a round in owner mode: this node's own pending
// counters go to their keys' owners (or into its own aggregates), and the
// aggregates it owns answer their contributors. Relayed counters still
// pending from another mode are dropped. Caller holds s.mu; the caller
// sends what it returns once it has let go of it.
func (s *Syncer) ownerRoundLocked() []ownerOut {
	s.refreshRingLocked()
	s.owner.round++
	now := s.sinceBorn()
	at := uint64(max(0, s.clock().UnixNano()))
	maxAge := -int(s.cfg.SeenTTL / s.cfg.GossipInterval)
	writers := map[string]*packetWriter{}
	for k, p := range inOrder(s.simRand(), s.pending, comparePendingKeys) { // simorder.go
		if k.origin != s.self {
			s.dropPendingLocked(k)
			continue
		}
		if s.aggSendLocked(k, p, now, maxAge) { // through an aggregator (owneragg.go)
			continue
		}
		owner := s.ownerForLocked(k.rule, k.key)
		also := s.failoverAlsoLocked(k.rule, k.key, owner) // the owner (and the replica), while failed over (ownerfailover.go, ownerchain.go)
		third := s.chainThirdLocked(aggKey{k.rule, k.key, k.window})
		if owner == s.self || owner == "" {
			s.aggregateOwnLocked(chainCounter(p.c, p.rack, third != "" && owner == third), now) // ownerchain.go
			if also == ([2]string{}) {
				s.dropPendingLocked(k)
				continue
			}
			owner = "" // the replica's (or third's) own, failed over: counted here once, still sent to the owner
		}
		p.transmits--
		if p.transmits < maxAge {
			s.dropPendingLocked(k) // never acknowledged: push-pull repairs
			continue
		}
		if p.transmits < 0 && -p.transmits%ownerBackoff != 0 {
			continue
		}
		for _, to := range [3]string{owner, also[0], also[1]} {
			if to == "" {
				continue
			}
			w := writers[to]
			if w == nil {
				w = newPacketWriter(s.self, s.cfg.PacketSize)
				writers[to] = w
			}
			w.add(s.self, chainCounter(p.c, p.rack, third != "" && to == third)) // ownerchain.go: a third counts from where the replica did
		}
	}
	var out []ownerOut
	for name, w := range inOrder(s.simRand(), writers, compareNames) {
		n, ok := s.peers[name]
		if !ok {
			continue
		}
		packets, counts := w.packets()
		for i := range packets {
			packets[i] = toOwnerPacket(packets[i], at)
		}
		out = append(out, ownerOut{to: n, packets: packets, counts: counts})
	}
	out = append(out, s.answersLocked(now, at)...)
	out = append(out, s.aggRoundLocked(now, at)...)  // owneragg.go
	return append(out, s.heardMessagesLocked(at)...) // ownerrepeat.go
}

// ownerForLocked is where this node sends its counters of (rule, key): the
// owner, or the replica while failed over to it. Called once per pending
// counter sent, it also starts and ends failovers. Caller holds s.mu.
func (s *Syncer) ownerForLocked(rule, key string) string {
	owner, replica := s.owner.ring.owners(rule, key)
	k := [2]string{rule, key}
	st := &s.owner
	if owner == s.self || replica == "" {
		delete(st.failover, k)
		return owner
	}
	routed := s.failoverRoutesLocked(k, owner) // ownerfailover.go
	if routed {
		owner = cmp.Or(s.chainRoutesLocked(k, replica), replica) // ownerchain.go
	}
	at, ok := st.waiting[k]
	switch {
	case !ok && len(st.waiting) < s.cfg.MaxSeen:
		if st.waiting == nil {
			st.waiting = map[[2]string]uint64{}
		}
		st.waiting[k] = st.round
	case ok && st.round-at >= ownerFailover && !routed && s.failoverRoomLocked(k):
		if st.failover == nil {
			st.failover = map[[2]string]failover{}
		}
		st.failover[k] = failover{at: st.round, owner: owner}
		delete(st.waiting, k)
		owner = replica
		s.ownerLostLocked(rule, key) // ownershare.go
	}
	return owner
}

// OwnerOf returns the owner and replica of (rule, key) on this node's ring
// (the members that speak owner mode); "" for a replica when there is
// none.
func (s *Syncer) OwnerOf(rule, key string) (owner, replica string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshRingLocked()
	return s.owner.ring.owners(rule, key)
}

// answersLocked makes the answers of this node's aggregates that changed,
// and forgets contributors (and aggregates) idle for SeenTTL, and answers
// heard that long ago. Caller holds s.mu.
func (s *Syncer) answersLocked(now time.Duration, at uint64) []ownerOut {
	sweep := now-s.owner.swept >= s.cfg.SeenTTL/2
	if sweep {
		s.owner.swept = now
		for k, h := range s.owner.heard {
			if now-max(h.slots[0].at, h.slots[1].at) > s.cfg.SeenTTL {
				delete(s.owner.heard, k)
			}
		}
		for k, at := range s.owner.waiting {
			if s.owner.round-at > ownerFailoverHold {
				delete(s.owner.waiting, k)
			}
		}
		for t, d := range s.owner.toConfirm {
			if s.owner.round-d.round > ownerFailoverHold {
				delete(s.owner.toConfirm, t) // its owner is gone
			}
		}
	}
	writers := map[string]*answerWriter{}
	budget := ownerAnswerBudget
	for k, o := range inOrder(s.simRand(), s.owner.mine, compareAggKeys) {
		if !o.dirty && !sweep {
			continue
		}
		o.dirty = false
		s.countUsersLocked(k, o, now)
		users := s.aggViewUsersLocked(k, o)                          // owneragg.go: a group's, the cluster's as its owner told it
		for name, sub := range s.answerOrderLocked(o.subs, budget) { // ownerorder.go
			if now-sub.lastHeard() > s.subTTL() {
				delete(o.subs, name)
				s.owner.subs--
				continue
			}
			if name == s.self && users > 0 {
				s.selfViewLocked(k, users) // this node's own share (ownershare.go)
			}
			others, skip := s.aggOthersLocked(k, o, name, sub, o.total-sub.contrib, now) // owneragg.go
			if skip {
				continue
			}
			repeat := others == sub.sent && !sub.needAck
			if name == s.self || (repeat && !s.repeatDueLocked(sub, now)) { // ownerrepeat.go
				continue
			}
			if now-sub.heard > s.activeTTL() && now-sub.answered < ownerIdlePush && !sub.needAck { // a touch is answered at once (ownershare.go)
				o.dirty = true // an idle contributor's turn comes later
				continue
			}
			if budget == 0 {
				o.dirty = true // the rest next round (map order: a random rest)
				continue
			}
			budget--
			sub.answered = now
			if repeat {
				sub.repeats = min(sub.repeats+1, 255)
			} else {
				sub.repeats = 0
			}
			w := writers[name]
			if w == nil {
				w = &answerWriter{limit: s.cfg.PacketSize, sender: s.self, at: at, users: readsUsers(s.peers[name])}
				writers[name] = w
			}
			w.add(ownerAnswer{rule: k.rule, key: k.key, window: k.window, gen: sub.serial, prev: sub.answerPrev(),
				others: others, ackEpoch: sub.epoch, ackUsed: sub.hi, users: users, balance: o.balance})
			sub.sent, sub.needAck = others, false
		}
		for _, sub := range o.subs {
			if sub.told < sub.sent || (sub.heardAcks && !sub.confirmed) {
				o.dirty = true // repeated until confirmed (ownerrepeat.go)
				break
			}
		}
		if len(o.subs) == 0 && now-o.heard > s.cfg.SeenTTL {
			delete(s.owner.mine, k) // kept till then: one who comes back is told the key's debt (newcomerPrevLocked)
		}
	}
	out := make([]ownerOut, 0, len(writers))
	for name, w := range inOrder(s.simRand(), writers, compareNames) {
		n, ok := s.peers[name]
		if !ok {
			continue
		}
		packets := w.packets()
		counts := make([]int, len(packets))
		out = append(out, ownerOut{to: n, packets: packets, counts: counts})
	}
	return out
}

// sendOwner sends a round's packets.
func (s *Syncer) sendOwner(out []ownerOut) {
	ml := s.list()
	if ml == nil {
		return
	}
	for _, o := range out {
		for i, p := range o.packets {
			if err := ml.SendBestEffort(&o.to, p); err != nil {
				s.log.Debug("send failed", "to", o.to.Name, "error", err)
				continue
			}
			s.stats.PacketsSent.Add(1)
			s.stats.BytesSent.Add(uint64(len(p)))
			if o.counts[i] > 0 {
				s.stats.CountersSent.Add(uint64(o.counts[i]))
			} else if !o.heard {
				s.ownerSent.Add(1)
			}
		}
	}
}

// aggregateFor returns the aggregate of k, making it (with a new
// generation) if need be. Caller holds s.mu.
func (s *Syncer) aggregateFor(k aggKey) *ownedKey {
	o := s.owner.mine[k]
	if o == nil {
		if s.owner.mine == nil {
			s.owner.mine = map[aggKey]*ownedKey{}
		}
		if len(s.owner.mine) >= s.cfg.MaxSeen {
			for victim, v := range s.owner.mine { // map iteration starts at a random entry
				s.owner.subs -= len(v.subs)
				delete(s.owner.mine, victim)
				break
			}
		}
		o = &ownedKey{born: s.sinceBorn(), subs: map[string]*ownerSub{}}
		s.owner.mine[k] = o
	}
	return o
}

// subFor returns origin's entry in o, making it unless MaxSeen contributors
// are held already (nil then). Caller holds s.mu.
func (s *Syncer) subFor(o *ownedKey, origin string, c Counter) *ownerSub {
	sub := o.subs[origin]
	if sub == nil {
		if s.owner.subs >= s.cfg.MaxSeen {
			return nil // what is not counted is admitted more, never less
		}
		if s.owner.lastGen == 0 { // serials start at the clock: a restarted owner's are new
			s.owner.lastGen = uint64(max(0, s.clock().UnixNano()))
		}
		s.owner.lastGen++
		sub = &ownerSub{serial: s.owner.lastGen, epoch: c.Epoch, hi: c.Prev, sent: s.newcomerPrevLocked(o, c)}
		sub.first = sub.sent
		o.subs[origin] = sub
		s.owner.subs++
	}
	return sub
}

// newcomerDebtSlack is how far above a whole number of tokens a newcomer's
// debt may lie and still be that number: floating-point noise, not a token.
const newcomerDebtSlack = 1e-6

// newcomerPrevLocked is what a contributor new to aggregate o is told it
// heard before (its first answer charges it the rest). An aggregate made
// anew (a new owner: it holds only what its contributors had not had
// acknowledged, which nobody has charged) tells it everything. An
// established one tells it the key's debt as the owner sees it: the
// newcomer's bucket is new (full) or has heard of the key from elsewhere,
// so charging it the aggregate's whole history would count old
// consumption that has since been refilled, and charging it nothing would
// give it a full burst the cluster has already spent (every newcomer one
// more burst: the first-contact overshoot growing with N). The debt is
// how far the owner's own balance lies below a full bucket, at most what
// the others consumed. Without a BoundedLedger (tests), nothing. Caller
// holds s.mu.
func (s *Syncer) newcomerPrevLocked(o *ownedKey, c Counter) uint64 {
	if s.sinceBorn()-o.born <= freshAggregate*s.cfg.GossipInterval {
		return 0
	}
	a, balance, ok := s.limitOf(c.Rule, c.Key)
	if !ok {
		return o.total
	}
	debt := max(0, a.Burst-a.Soft-balance)
	// Every token consumed is charged but those wholly refilled since: the
	// debt's fraction is a token still owed. Truncated, a bucket that
	// refilled a hair since the debt was taken told each newcomer one token
	// less; rounded, one that refilled more than half a token (a newcomer
	// late by half a token's refill, as on a loaded machine) did, while the
	// newcomer's own bucket had refilled as much (TestNewcomerIsToldTheWholeDebt).
	// newcomerDebtSlack keeps a float's noise above a whole debt from
	// charging a token more.
	return o.total - min(o.total, uint64(math.Ceil(debt-newcomerDebtSlack)))
}

// aggregateOwnLocked adds this node's own consumption of a key it owns to
// the key's aggregate. Caller holds s.mu.
func (s *Syncer) aggregateOwnLocked(c Counter, now time.Duration) {
	o := s.aggregateFor(aggKey{c.Rule, c.Key, c.Window})
	sub := s.subFor(o, s.self, c)
	if sub == nil {
		return
	}
	d := ownNew(sub, c) // ownerfailover.go
	sub.contrib += d
	o.total += d
	sub.heard, sub.seen, o.heard = now, now, now
	o.dirty = o.dirty || d > 0
}

// aggregateLocked counts a contributor's counter into the key's aggregate
// and returns the tokens newly counted (to charge here too): what lies
// above both the highest counted and the counter's prev, in the
// contributor's current epoch, within its allowance. at is the counter's
// time on the origin's clock, now this node's. Caller holds s.mu.
func (s *Syncer) aggregateLocked(bounded bool, a Allowance, origin string, c Counter, at, now time.Duration) uint64 {
	o := s.aggregateFor(aggKey{c.Rule, c.Key, c.Window})
	sub := s.subFor(o, origin, c)
	if sub == nil {
		return 0
	}
	heardFromLocked(o, sub, c, now)
	switch {
	case c.Epoch < sub.epoch:
		return 0 // a late counter of an epoch left behind
	case c.Epoch > sub.epoch:
		sub.epoch, sub.hi = c.Epoch, c.Prev
		sub.allow.newEpoch = true
	}
	base := max(sub.hi, c.Prev)
	sub.hi = max(sub.hi, c.Used)
	if c.Used <= base {
		return 0
	}
	tokens := c.Used - base
	if bounded {
		give := sub.allow.take(a, tokens, at, s.awayLocked(origin, at))
		if give < tokens {
			s.suspectLocked(origin, c, "more than the origin could have admitted", tokens, give)
		}
		tokens = give
	}
	sub.contrib += tokens
	o.total += tokens
	return tokens
}

// receiveOwner applies an owner-mode message: counters sent to this node
// as an owner, or an owner's answer.
func (s *Syncer) receiveOwner(kind uint64, b []byte) {
	if t := s.transport; t != nil && t.senders != nil && !t.senders.vouch.take(b) {
		s.tstats.countPacket(PacketRefusedUnchecked)
		s.badLog.warn(s.log, s.clock(), "refused an owner message the transport did not check (not from a packet)", "bytes", len(b))
		return
	}
	var charges []charge
	var users []keyView
	var err error
	switch kind {
	case msgOwnerHeard:
		err = s.receiveHeard(b) // ownerrepeat.go
	case msgOwnerCounters:
		charges, err = s.receiveOwnerCounters(b)
	default:
		charges, users, err = s.receiveAnswerViews(b)
	}
	if err != nil {
		s.stats.BadPackets.Add(1)
		s.badLog.warn(s.log, s.clock(), "dropped a gossip packet", "bytes", len(b), "error", err)
		return
	}
	s.charge(charges)
	s.tellViews(users)             // after the charges: a view ends a first-contact hold
	s.sendOwner(s.aggTakeQueued()) // owneragg.go
}

// receiveOwnerCounters counts a contributor's counters into this node's
// aggregates and returns what to charge here.
func (s *Syncer) receiveOwnerCounters(b []byte) ([]charge, error) {
	if s.leaving.Load() {
		s.stats.IgnoredPackets.Add(1) // left to the key's next owner (leavesettle.go)
		return nil, nil
	}
	in, check := s.newCounterIntake() // ownerintake.go
	var charges []charge
	s.mu.Lock()
	_, err := decodeOwnerCounters(b, check, func(origin string, c Counter) {
		if !in.fromSender(origin) {
			return
		}
		a, at, ok := in.admit(origin, c)
		if !ok || s.chainRefusesLocked(aggKey{c.Rule, c.Key, c.Window}) { // ownerchain.go
			return
		}
		if tokens := s.replicaChargeLocked(origin, aggKey{c.Rule, c.Key, c.Window}, s.aggregateLocked(in.bounded != nil, a, origin, c, at, in.now), at, in.now); tokens > 0 { // ownerchargeonce.go
			charges = append(charges, charge{c.Rule, c.Key, c.Window, tokens})
		}
	})
	s.mu.Unlock()
	in.done()
	return charges, err
}

// receiveAnswerViews applies an owner's answer: what it adds to what this node
// heard from that aggregate is charged, and the acknowledged part of this
// node's own counters stops being sent. It returns the charges and the
// owner's views the answer carries (ownershare.go).
func (s *Syncer) receiveAnswerViews(b []byte) (charges []charge, users []keyView, err error) {
	sender, sentAt, answers, err := decodeAnswer(b)
	if err != nil {
		return nil, nil, err
	}
	bounded, _ := s.ledger.(BoundedLedger)
	now := s.sinceBorn()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkStampLocked(sender, sentAt, true); err != nil {
		return nil, nil, fmt.Errorf("owner answer from %.64q: %w", sender, err)
	}
	if !s.ownerModeLocked() {
		s.stats.IgnoredPackets.Add(1) // in another mode, counters come from their origins
		return nil, nil, nil
	}
	others := max(1, s.othersLocked())
	for _, a := range answers {
		owner, replica := s.owner.ring.owners(a.rule, a.key)
		fromOwner := sender == owner || sender == replica || s.chainFromLocked(a.rule, a.key, sender) // ownerchain.go
		if !s.solicitedLocked(a.rule, a.key, a.window, a.ackEpoch) {                                  // ownerunsolicited.go
			s.ownerRefused.Add(1)
			continue
		}
		if !fromOwner && !s.aggAcceptLocked(a.rule, a.key, a.window, sender) { // owneragg.go
			s.ownerRefused.Add(1)
			continue
		}
		first := a.prev // in the sender's numbering (ownerrepeat.go)
		a = s.aggFirstLocked(sender, a, fromOwner)
		var al Allowance
		if bounded != nil {
			var ok bool
			if al, ok = bounded.Allowance(a.rule, a.key); !ok {
				s.stats.UnknownCounters.Add(1)
				continue
			}
		}
		if fromOwner {
			s.ackFromLocked(a, sender, owner)                                    // ownerfailover.go
			s.chainHeardLocked([2]string{a.rule, a.key}, sender, owner, replica) // ownerchain.go: the replica lives
		} else {
			s.ackLocked(a) // an aggregator's answer acknowledges what it counted (owneragg.go)
		}
		tokens, below := s.heardLocked(sender, a, first, now, bounded != nil, al, others)
		if fromOwner {
			s.noteAnswerSentLocked(aggKey{a.rule, a.key, a.window}, sender, a.gen, sentAt)
			tokens = s.aggOwnChargeLocked(sender, a, tokens)                                                       // an aggregator hears the key through its group's answers (owneragg.go)
			tokens = s.chargeOnceLocked(aggKey{a.rule, a.key, a.window}, sender, owner, replica, tokens, now, now) // ownerchargeonce.go
		} else {
			tokens = s.echoChargeLocked(aggKey{a.rule, a.key, a.window}, sender, tokens, now) // owneraggreplica.go
		}
		group := fromOwner && s.aggHeardLocked(sender, a, tokens, min(below, tokens), now, s.acksLocked(a.rule, a.key, sender, owner)) // owneragg.go
		if tokens > 0 {
			charges = append(charges, charge{a.rule, a.key, a.window, tokens})
		}
		if !fromOwner {
			s.aggViewHeardLocked(a) // owneragg.go
		}
		if a.users > 0 && !group { // a group's view reaches this node's ledger as its users' do (owneragg.go)
			balance := s.boundViewLocked(sender, a, bounded, al) // ownerviewbound.go: an owner's or an aggregator's
			users = append(users, keyView{a.rule, a.key, a.window, OwnerView{Users: a.users, Balance: balance, AckEpoch: a.ackEpoch, AckUsed: a.ackUsed}})
		}
	}
	return charges, users, nil
}

// heardLocked records an answer (first: its prev as the sender sent it)
// and returns the tokens it adds, and how many of them lie below what its
// subscription had told here (the first answers' prev, ownerfirst.go): news
// to this node, not to its sender's numbering. Caller holds s.mu.
func (s *Syncer) heardLocked(sender string, a ownerAnswer, first uint64, now time.Duration, bounded bool, al Allowance, others int) (tokens, below uint64) {
	k := aggKey{a.rule, a.key, a.window}
	h := s.owner.heard[k]
	if h == nil {
		if s.owner.heard == nil {
			s.owner.heard = map[aggKey]*heardKey{}
		}
		if len(s.owner.heard) >= s.cfg.MaxSeen {
			for victim := range s.owner.heard {
				delete(s.owner.heard, victim)
				break
			}
		}
		h = &heardKey{}
		s.owner.heard[k] = h
	}
	var slot *heardSlot
	for i := range h.slots {
		if h.slots[i].owner == sender && h.slots[i].gen == a.gen {
			slot = &h.slots[i]
		}
	}
	elapsed := firstSlack
	urgent := false
	if slot == nil {
		own := s.aggOwnAnswerLocked(a)
		i, ok := aggHeardSlot(h, own) // owneragg.go
		if !ok {
			return 0, 0
		}
		h.slots[i] = heardSlot{owner: sender, gen: a.gen, last: a.prev, start: a.prev, first: first, at: now, own: own, base: a.prev}
		slot = &h.slots[i]
		urgent = true
	} else {
		elapsed += max(0, now-slot.at)
	}
	slot.at = now
	if a.prev < slot.first { // it missed the first answers: what they carried (ownerrepeat.go)
		if slot.start == slot.first {
			tokens, slot.start = slot.start-a.prev, a.prev
			below = tokens
		}
		slot.first, urgent = a.prev, true
	}
	if a.others > slot.last {
		tokens += a.others - slot.last
		slot.last = a.others
	}
	s.noteHeardLocked(k, sender, slot, urgent)
	if tokens == 0 {
		return 0, 0
	}
	if bounded {
		// Every other member together could have admitted no more than
		// their allowances since this aggregate was last heard.
		limit := float64(others)*(al.Burst+al.PerSecond*elapsed.Seconds()) + 1
		if float64(tokens) > limit {
			s.suspectLocked(sender, Counter{Rule: a.rule, Key: a.key, Epoch: a.gen, Window: a.window}, "an owner's answer beyond what every other member could have admitted", tokens, uint64(limit))
			tokens = uint64(limit)
		}
	}
	return tokens, min(below, tokens)
}

// ackLocked stops sending the part of this node's own pending counter that
// an answer acknowledges. Caller holds s.mu.
func (s *Syncer) ackLocked(a ownerAnswer) {
	delete(s.owner.waiting, [2]string{a.rule, a.key})
	k := pendingKey{counterKey{s.self, a.rule, a.key}, a.window, a.ackEpoch}
	p, ok := s.pending[k]
	if !ok {
		return
	}
	if p.c.Used <= a.ackUsed {
		s.dropPendingLocked(k)
		return
	}
	p.c.Prev = max(p.c.Prev, a.ackUsed)
}
