package gossip

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Aggregation before the owner: owner mode (owner.go) for a key that many
// nodes use at once.
//
// In owner mode every user of a key sends the key's owner its counter each
// interval and is answered: the owner of a key that every node hammers
// receives and sends one packet per user per interval. Once an owner holds
// Config.AggregateAbove users of a key (and every member speaks protoAgg),
// it tells each user that sends it a counter to go through aggregators
// (a notice, kind 8). A key has k aggregators, k the power of two at or
// above √N on a ring of N members: slot i's aggregator is the member at
// the i-th aggregation point of the key on the ring, neither the key's
// owner nor its replica; a user's slot is a hash of the key and its name.
// A user so told sends its counters (kind 6) to its aggregator instead of
// the owner, and takes the aggregator's answers. An aggregator keeps the
// group as an owner keeps an aggregate (its users' counters counted once,
// each within its origin's allowance, and its own consumption folded in)
// and forwards, each interval while the group is active, one group counter
// to the owner (kind 7): the cumulative sum of the group, under an epoch
// that names the group. The owner counts it in the aggregator's own entry
// (so that what it tells the aggregator leaves out both the aggregator's
// own consumption and its group's), within the allowance of the members
// its ring assigns to that aggregator, and answers it at once (kind 5,
// acknowledging the group counter); the aggregator charges what the answer
// adds, adds it to the group's total, and answers its users at once: each
// is told the owner's view plus the rest of the group. The owner then
// receives and sends about k packets per interval for the key, and each
// aggregator about N/k: O(√N). A consumption reaches every user within
// two intervals (the user's round, the aggregator's round) and two round
// trips.
//
// Numbering: a user's first answer from an aggregator is a new
// subscription; the aggregator tells it the key's debt as it sees it (as
// an owner tells a newcomer); a user that already held the key (it came
// from the owner, or from another aggregator) charges only what that debt
// exceeds its own, so a switch neither hands out nor charges a burst.
//
// Failures: a user whose counters to its aggregator go unanswered for
// aggFailover rounds moves to the next slot's aggregator (before
// memberlist declares the aggregator dead), resending what was not
// acknowledged; the group counter, cumulative, is repeated until the owner
// acknowledges it, and an aggregator whose owner does not answer fails
// over to the replica as any user does (owner.go; its group counter goes
// to the owner too meanwhile, ownerfailover.go; the replica, itself a user
// through an aggregator, is charged once, owneraggreplica.go).
// Unacknowledged consumption of a dead aggregator's group is resent by its
// users; what it had forwarded and not acknowledged to them is counted
// twice (the cluster admits less, by one interval of those users, never
// more).
//
// Trust: the owner counts a group counter only from a member (sender
// guard, stamps), for a key it owns or replicates, from a member its own
// ring names as an aggregator of the key, and no more than 2(n+m+1) origins'
// allowances (n the members the ring assigns to that aggregator, m the
// most it assigns to any aggregator of the key: room for the users of a
// neighbouring slot that failed over to it, and for the aggregator's own
// consumption). A hostile member can thus inflate a key by what about 4√N
// members could admit, no more; a user takes an answer only
// from its own aggregator on its own ring, bounded as an owner's answer is.

// DefaultAggregateAbove is Config.AggregateAbove's default.
const DefaultAggregateAbove = 64

// aggGroupPrefix starts the name of an aggregator's group among an owner's
// contributors (ownedKey.subs), apart from its own consumption: what the
// owner tells the group leaves out only the group's consumption, and the
// users' totals continue the owner's numbering (aggFirstLocked).
const aggGroupPrefix = "\x00group "

// aggMinMembers is the smallest ring on which keys are aggregated.
const aggMinMembers = 8

// aggFailover is how many rounds a user's counters to its aggregator may go
// unanswered before it moves to the next slot's aggregator.
const aggFailover = 8

// aggSubscribeEvery is, in gossip intervals, how often a node resends the
// counter that subscribes it to its aggregator until it is answered.
const aggSubscribeEvery = 4

// aggUpFresh is, in gossip intervals, how recently an aggregator must have
// heard its owner for its users to be answered only as the owner's answers
// arrive (otherwise they are answered at its rounds too, as an owner
// answers).
const aggUpFresh = 2

// aggState is a syncer's aggregation state (part of ownerState); under
// Syncer.mu.
type aggState struct {
	ring    *ownerRing // the ring capable was decided on
	capable bool       // every member speaks protoAgg, and the ring is large enough
	// thirdOut: every member speaks protoChainAgg too, so a key's third
	// member is none of its aggregators (ownerchainagg.go).
	thirdOut bool
	// walk: every member speaks protoChainWalk too, so a key's chain
	// failover walks past a silent third (ownerchainwalk.go).
	walk bool
	// As a user: the keys an owner told this node to aggregate.
	hot map[[2]string]*aggUse
	// As an aggregator: the groups it holds, by aggregate.
	groups    map[aggKey]*aggGroup
	lastEpoch uint64
	// As an owner: when each key last had a group counter, and the members
	// its ring assigns to each aggregator of a key.
	hotAt  map[[2]string]time.Duration
	counts map[[2]string]*aggCounts
	// groupSubs names, per aggregate, the group entries among its
	// contributors (they are answered as others' group counters arrive).
	groupSubs map[aggKey]map[string]struct{}
	// Outgoing: notices to send at the end of the round, counters to
	// aggregators being written this round, keys whose groups changed and
	// packets to send as soon as the lock is released.
	notices map[string][]aggKey
	answers map[string]*answerWriter
	writers map[string]*packetWriter
	fan     []aggKey
	queued  []ownerOut
}

// aggUse is a key this node sends through an aggregator.
type aggUse struct {
	used    time.Duration // the last counter sent, since the syncer's birth
	slot    int           // added to its slot: aggregators it failed over from
	waiting uint64        // the round of the first unanswered send; 0: none
	// base is the owner's total in its notice, until the first answer on
	// the aggregated path starts a subscription (baseSet until then).
	base    uint64
	baseSet bool
	// handed is the epoch of the group of the key this node handed on
	// when its ring stopped naming it an aggregator (aggRoundLocked): the
	// owner's answers to that group, which go on while the owner still
	// holds it active, charge nothing here (aggOwnAnswerLocked).
	handed uint64
	// handedUpTo is what this node had heard of the key in window
	// handedWindow when it handed that group on, at handedAt, in the
	// numbering of handedFrom (the owner that answered the group; "": no
	// numbering, the owner never answered it): a subscription that owner
	// starts here after that, and the first answer this node takes from
	// an aggregator (while handedSwitch), charge only what lies above
	// (aggHandOnLocked, owneraggswitch.go).
	handedUpTo, handedWindow uint64
	handedFrom               string
	handedAt                 time.Duration
	handedSwitch             bool
	// handedGen is the subscription of handedFrom the handed group's
	// answers came on, and handedLast where it stood when this node last
	// charged on it: a group it makes again goes on from there
	// (owneraggflap.go).
	handedGen, handedLast uint64
	// handedAlt is the other owner that last answered the group when this
	// node handed it on (the replica during a failover, numbering from
	// it), handedAltUpTo the last others it told the group: its answers
	// charge only what lies above (aggHandedFloorLocked).
	handedAlt     string
	handedAltUpTo uint64
	// heardFrom is the aggregator that last answered; subAt when this node
	// last sent it a counter with nothing new to subscribe (see
	// aggSubscribeLocked).
	heardFrom string
	subAt     time.Duration
	// cameFrom is the aggregator it heard from before heardFrom, set when
	// an answer of another aggregator is first taken (a switch) until that
	// answer is adjusted (aggFirstLocked).
	cameFrom string
	// viewUsers is the largest users count of the views its aggregators
	// told (0: none yet).
	viewUsers uint64
	// elsewhereAt is when this node last sent the key's counter to an
	// aggregator other than itself (0: never): that one counts it among
	// its group's users for a users window after (groupUsersLocked).
	elsewhereAt time.Duration
	// ownFrom and ownGen name the subscription of this node's own counter
	// that the owner's notice came from, and ownUpTo is how far, in its
	// numbering, the aggregated path's first answer starts from (the
	// notice's total less this node's own consumption, or what it had
	// heard): answers on it still charge up to there (aggOwnAnswerLocked).
	// ownContrib is this node's own consumption the notice counted.
	ownFrom    string
	ownGen     uint64
	ownUpTo    uint64
	ownContrib uint64
}

// aggViewHeardLocked notes the view (users) of an answer from this node's
// aggregator (see AggStats). Caller holds s.mu.
func (s *Syncer) aggViewHeardLocked(a ownerAnswer) {
	if u := s.owner.agg.hot[[2]string{a.rule, a.key}]; u != nil && a.users > 0 {
		u.viewUsers = max(u.viewUsers, a.users)
	}
}

// aggGroup is a group this node aggregates: o is its aggregate in
// ownerState.mine, whose total holds the owner's view (up) beside the
// group's own consumption.
type aggGroup struct {
	o     *ownedKey
	epoch uint64 // names the group in its counters
	up    uint64 // the owner's others in the owner's numbering: its first answer, then what each adds
	upSet bool   // the owner answered once
	acked uint64 // the group's sum the owner acknowledged
	// racked is the group's sum a replica or third counted without
	// acknowledging it: a third is sent the group from there (ownerchain.go).
	racked uint64
	heard  time.Duration // the last counter of a user (or of this node)
	upAt   time.Duration // the last answer of the owner; -1: none
	view   aggUpView     // the owner's last balance (owneraggbalance.go)
	// fanAt is when its users were last answered at once; fanDue that an
	// owner's answer came within half an interval of it, so its users are
	// answered at this node's next round instead (at most about two
	// answers per user per interval from the owner's news).
	fanAt  time.Duration
	fanDue bool
	fwdAt  time.Duration // its group counter was last sent
	// users is how many nodes use the key, as its owner last told the
	// group (0: not told yet); its users are told it with this node's
	// balance, their share's view (ownershare.go). sentUsers is the
	// group's own count in its last group counter.
	users, sentUsers uint64
	// upFrom and upGen name the subscription (sender, gen) whose first
	// answer heard set up: everything below that answer's others is in up.
	upFrom string
	upGen  uint64
	// credit is what answers of creditFrom to this node's own counter
	// added to the group (owneraggcredit.go).
	creditFrom string
	credit     uint64
	// altFrom is the other owner (not upFrom) that answered the group
	// last, altFirst and altLast the group's sum its first and last
	// answers acknowledged counting (owneraggfloor.go).
	altFrom           string
	altFirst, altLast uint64
}

// aggSub is, at an owner, what a contributor's entry holds for
// aggregation: whether the contributor was told to use aggregators, and the
// group counters it forwards as an aggregator.
type aggSub struct {
	switched  bool
	epoch, hi uint64
	heard     time.Duration // the last group counter; 0: none
	allow     allowance
	// group marks an aggregator's group entry; users is how many nodes its
	// last group counter said use the key through it, at most what the
	// ring assigns the aggregator (groupCountLocked).
	group bool
	users uint64
}

// aggCountsAs is how many users of a key contributor sub stands for in
// its owner's count (countUsersLocked): an aggregator's group, the users
// it reported; a user told to go through aggregators while the key has
// groups, none (its group counts it); any other, one.
func aggCountsAs(sub *ownerSub, grouped bool) uint64 {
	switch a := sub.agg; {
	case a == nil:
		return 1
	case a.group:
		return a.users
	case a.switched && grouped:
		return 0
	}
	return 1
}

// aggCounts is, for a key, the members a ring assigns to each aggregator.
type aggCounts struct {
	ring     *ownerRing
	thirdOut bool // counted with the key's third out (ownerchainagg.go)
	n        map[string]int
	most     int // the largest of n
}

// aggFanIn is how many aggregators a key has on a ring of n members: the
// power of two at or above √n, at least 2.
func aggFanIn(n int) int {
	k := 2
	for k*k < n {
		k *= 2
	}
	return k
}

// aggSlot is member name's slot among the k aggregators of the key of hash
// kh (k a power of two).
func aggSlot(kh uint64, name string, k int) int {
	return aggSlotOf(kh, fnvAdd(fnvOffset, name), k)
}

// aggSlotOf is aggSlot of the member whose name hashes to nh
// (fnvAdd(fnvOffset, name): ownerRing.nameHashes).
func aggSlotOf(kh, nh uint64, k int) int { return int(mix64(kh^nh) & uint64(k-1)) }

// aggregatorAt returns slot i's aggregator of the key of hash kh: the first
// member at or after the slot's point that is neither owner nor replica,
// nor third unless that is "" (ownerchainagg.go); "" if every member is
// one of them.
func (r *ownerRing) aggregatorAt(kh uint64, i int, owner, replica, third string) string {
	if r.size() == 0 {
		return ""
	}
	h := mix64(kh ^ (uint64(i)+1)*0x9e3779b97f4a7c15)
	at := r.search(h) // ownerringindex.go
	for j := range len(r.points) {
		if name := r.names[r.points[(at+j)%len(r.points)].node]; name != owner && name != replica && name != third {
			return name
		}
	}
	return ""
}

// aggregatorFor returns user's aggregator of (rule, key) on r, skip slots
// on from its own, as a member that speaks protoAgg but not
// protoChainAgg names it (the key's third may be one: aggregatorOf).
func (r *ownerRing) aggregatorFor(rule, key, user string, skip int) string {
	return r.aggregatorOf(rule, key, user, skip, false)
}

// aggCapableLocked reports whether keys may be aggregated now: owner mode,
// every member advertising protoAgg, at least aggMinMembers members, and
// aggregation not turned off. Caller holds s.mu.
func (s *Syncer) aggCapableLocked() bool {
	if s.cfg.AggregateAbove < 0 || !s.ownerModeLocked() {
		return false
	}
	s.refreshRingLocked()
	s.aggDecideLocked()
	return s.owner.agg.capable
}

// aggDecideLocked decides, once per ring, aggState's capable, thirdOut
// and walk from the members' protocols. Caller holds s.mu.
func (s *Syncer) aggDecideLocked() {
	st := &s.owner.agg
	if st.ring != s.owner.ring {
		st.ring = s.owner.ring
		st.capable = st.ring.size() >= aggMinMembers
		st.thirdOut, st.walk = true, true
		for name, n := range s.peers {
			if name != s.self && n.DMax < protoChainWalk {
				st.walk = false
			}
			if name != s.self && n.DMax < protoChainAgg {
				st.thirdOut = false
			}
			if name != s.self && n.DMax < protoAgg {
				st.capable = false
				break
			}
		}
	}
}

// aggSendLocked sends this node's pending counter p of key k through an
// aggregator if an owner told it to (into its own group if it aggregates
// the key itself), repeated as a counter to the owner is (ownerRoundLocked;
// maxAge its rounds' limit). It reports whether it took the counter; if
// not, the caller sends it to the key's owner. Caller holds s.mu.
func (s *Syncer) aggSendLocked(k pendingKey, p *pendingCounter, now time.Duration, maxAge int) bool {
	st := &s.owner.agg
	u := st.hot[[2]string{k.rule, k.key}]
	if u == nil || !s.aggCapableLocked() || s.aggOwnedHereLocked(k.rule, k.key) {
		return false
	}
	u.used = now
	ak := aggKey{k.rule, k.key, k.window}
	agg := s.self
	// Into its own group while it aggregates the key; not once its ring
	// names it no aggregator of the key (the round then hands the group on:
	// aggRoundLocked).
	if g := st.groups[ak]; g == nil || g.o != s.owner.mine[ak] || s.aggUsersLocked(k.rule, k.key, s.self) == 0 {
		if u.waiting != 0 && s.owner.round-u.waiting >= aggFailover {
			u.slot, u.waiting = u.slot+1, 0 // its aggregator does not answer: the next slot's
		}
		agg = s.aggregatorForLocked(k.rule, k.key, u.slot)
	}
	switch {
	case agg == "":
		return false
	case agg == s.self:
		s.aggGroupLocked(ak, now).heard = now
		s.aggregateOwnLocked(p.c, now)
		s.dropPendingLocked(k)
		return true
	}
	if _, ok := s.peers[agg]; !ok {
		return false
	}
	p.transmits--
	if p.transmits < maxAge {
		s.dropPendingLocked(k) // never acknowledged: its next counter carries it
		return true
	}
	if p.transmits < 0 && -p.transmits%ownerBackoff != 0 {
		return true
	}
	if u.waiting == 0 {
		u.waiting = s.owner.round
	}
	if st.writers == nil {
		st.writers = map[string]*packetWriter{}
	}
	s.writerTo(st.writers, agg).add(s.self, p.c)
	u.elsewhereAt = now
	return true
}

// aggSubscribeLocked sends, for each key this node was told to aggregate
// whose aggregator has not answered it yet (a new key, a failover, a ring
// change) and that has no counter pending here, its last counter (nothing
// new in it) to the aggregator, every aggSubscribeEvery intervals until
// answered: it then hears the key from there (as the owner's answers told
// it until then) whether or not it admits more. Caller holds s.mu.
func (s *Syncer) aggSubscribeLocked(now time.Duration) {
	st := &s.owner.agg
	bounded, ok := s.ledger.(BoundedLedger)
	if !ok || len(st.hot) == 0 || !s.aggCapableLocked() {
		return
	}
	for k, u := range inOrder(s.simRand(), st.hot, compareHotKeys) { // simorder.go
		if now-u.used > s.activeTTL() || now-u.subAt < aggSubscribeEvery*s.cfg.GossipInterval {
			continue // not in use lately (it subscribes when it uses the key), or just sent
		}
		if s.aggOwnedHereLocked(k[0], k[1]) {
			continue // it counts the key itself
		}
		if u.waiting != 0 && s.owner.round-u.waiting >= aggFailover {
			u.slot, u.waiting = u.slot+1, 0 // its aggregator does not answer: the next slot's
		}
		agg := s.aggregatorForLocked(k[0], k[1], u.slot)
		if agg == u.heardFrom && agg != "" {
			continue
		}
		u.subAt = now
		_, own := bounded.Balance(k[0], k[1])
		if own.Epoch == 0 {
			continue // nothing consumed here: nothing to hear until it is
		}
		if _, pending := s.pending[pendingKey{counterKey{s.self, k[0], k[1]}, own.Window, own.Epoch}]; pending {
			continue // sent at this round anyway
		}
		if g := st.groups[aggKey{k[0], k[1], own.Window}]; g != nil && g.o == s.owner.mine[aggKey{k[0], k[1], own.Window}] {
			continue // it hears the key through its own group
		}
		if agg == s.self {
			s.aggGroupLocked(aggKey{k[0], k[1], own.Window}, now).heard = now // it hears the key through its own group
			u.heardFrom = s.self
			continue
		}
		if agg == "" {
			continue
		}
		if _, ok := s.peers[agg]; !ok {
			continue
		}
		if st.writers == nil {
			st.writers = map[string]*packetWriter{}
		}
		s.writerTo(st.writers, agg).add(s.self, Counter{Rule: k[0], Key: k[1], Epoch: own.Epoch, Window: own.Window, Prev: own.Used, Used: own.Used})
		u.elsewhereAt = now
		if u.waiting == 0 {
			u.waiting = s.owner.round // unanswered, it moves to the next slot (aggSendLocked)
		}
	}
}

// aggGroupLocked returns the group this node aggregates of k, making it
// (and its aggregate, anew) if need be. Caller holds s.mu.
func (s *Syncer) aggGroupLocked(k aggKey, now time.Duration) *aggGroup {
	st := &s.owner.agg
	if g := st.groups[k]; g != nil && g.o != nil && g.o == s.owner.mine[k] {
		return g
	}
	// An aggregate held here before (as the key's owner or replica, before
	// the ring changed) is not the group's: its contributors resend what it
	// had not acknowledged to their new owner or aggregator.
	if o := s.owner.mine[k]; o != nil {
		s.owner.subs -= len(o.subs)
		delete(s.owner.mine, k)
	}
	o := s.aggregateFor(k)
	// Not a fresh aggregate: its total holds the owner's view, so a new
	// user is told the key's debt, not the whole total (newcomerPrevLocked).
	o.born = s.sinceBorn() - (freshAggregate+1)*s.cfg.GossipInterval
	st.lastEpoch = max(st.lastEpoch+1, uint64(max(0, s.clock().UnixNano())))
	g := &aggGroup{o: o, epoch: st.lastEpoch, heard: now, upAt: -1}
	if st.groups == nil {
		st.groups = map[aggKey]*aggGroup{}
	}
	if len(st.groups) >= s.cfg.MaxSeen {
		for victim := range inOrder(s.simRand(), st.groups, compareAggKeys) {
			delete(st.groups, victim)
			break
		}
	}
	st.groups[k] = g
	return g
}

// aggRoundLocked ends an owner-mode round: the counters written to
// aggregators, the group counters of the groups this node aggregates (to
// their owners), and the notices queued; and forgets what has been idle
// for subTTL. Caller holds s.mu.
func (s *Syncer) aggRoundLocked(now time.Duration, at uint64) []ownerOut {
	st := &s.owner.agg
	s.aggSubscribeLocked(now)
	for _, g := range st.groups {
		if g.fanDue {
			g.fanDue, g.fanAt = false, now // answered by this round's answersLocked
		}
	}
	var out []ownerOut
	add := func(name string, packets [][]byte, counts []int) {
		if n, ok := s.peers[name]; ok && len(packets) > 0 {
			if counts == nil {
				counts = make([]int, len(packets))
			}
			out = append(out, ownerOut{to: n, packets: packets, counts: counts})
		}
	}
	for name, w := range inOrder(s.simRand(), st.writers, compareNames) {
		packets, counts := aggPackets(w, at, msgAggUsers)
		add(name, packets, counts)
	}
	clear(st.writers)
	groups := map[string]*packetWriter{}
	capable := s.aggCapableLocked()
	for k, g := range inOrder(s.simRand(), st.groups, compareAggKeys) {
		owner, replica := s.owner.ring.owners(k.rule, k.key)
		switch {
		case g.o != s.owner.mine[k]:
			delete(st.groups, k)
			continue
		case owner == s.self || replica == s.self || now-g.heard > s.subTTL() || !capable:
			// This node owns the key now (a new aggregate, which its users'
			// resent counters fill, as with any new owner), or the group is
			// idle, or a member that does not aggregate joined (users go to
			// owners again; what the group had not forwarded is not counted
			// there: the cluster admits more, by at most an interval of the
			// group's users): its aggregate, which holds the owner's view,
			// goes too.
			// A replica goes on as a user of its aggregator: from what it
			// heard through the group (owneraggswitch.go).
			if owner != s.self && replica == s.self && st.hot[[2]string{k.rule, k.key}] != nil {
				s.aggHandOnLocked(k, g, now)
			}
			s.owner.subs -= len(g.o.subs)
			delete(s.owner.mine, k)
			delete(st.groups, k)
			continue
		case s.aggUsersLocked(k.rule, k.key, s.self) == 0:
			// This node is no aggregator of the key on its ring any more
			// (a member joined or went): its users' counters are refused
			// here (receiveAggUsers) and go to their new aggregators, and
			// its own would keep the group alive on their own, counted
			// nowhere: the owner refuses the group counters of a member
			// no ring names. The group forwards what it holds a last time
			// and goes; this node's counters go to its aggregator.
			s.aggHandOnLocked(k, g, now) // owneraggswitch.go
			s.writeGroupCounterLocked(k, g, now, groups)
			s.owner.subs -= len(g.o.subs)
			delete(s.owner.mine, k)
			delete(st.groups, k)
			continue
		}
		s.writeGroupCounterLocked(k, g, now, groups)
	}
	for name, w := range inOrder(s.simRand(), groups, compareNames) {
		packets, counts := aggPackets(w, at, msgAggGroup)
		add(name, packets, counts)
	}
	s.aggNoticesLocked(at, add)
	for name, w := range inOrder(s.simRand(), st.answers, compareNames) {
		add(name, w.packets(), nil)
	}
	clear(st.answers)
	for k, u := range st.hot {
		if now-u.used > s.subTTL() {
			delete(st.hot, k)
		}
	}
	for k, t := range st.hotAt {
		if now-t > s.subTTL() {
			delete(st.hotAt, k)
		}
	}
	for k, c := range st.counts {
		if c.ring != s.owner.ring {
			delete(st.counts, k)
		}
	}
	for k := range st.groupSubs {
		if s.owner.mine[k] == nil {
			delete(st.groupSubs, k)
		}
	}
	return out
}

// groupCounterLocked returns group g's counter and where it goes, if it is
// due: the group is active and the owner has not acknowledged all of it
// (or never answered); or the group is idle (its users sent nothing for
// activeTTL: refused, or done) and was not sent for ownerIdlePush, until
// subTTL: the owner's answer to it refreshes what its idle users are told
// once a second, as an owner tells its idle users. Caller holds s.mu.
func (s *Syncer) groupCounterLocked(k aggKey, g *aggGroup, now time.Duration) (string, Counter, uint64, bool) {
	idle := now-g.heard > s.activeTTL()
	if idle && (now-g.heard > s.subTTL() || now-g.fwdAt < ownerIdlePush) {
		return "", Counter{}, 0, false
	}
	sum := g.o.total - min(g.o.total, g.up)
	users := s.groupUsersLocked(k, g, now)
	// The owner counts the group's users as long as it hears the group
	// within the users window: a group whose users admit nothing new
	// (refused, sending touches) still says so twice a window.
	alive := now-g.fwdAt < s.usersWindowLocked(k.rule, k.key)/2
	if sum == g.acked && g.upSet && !idle && users == g.sentUsers && alive {
		return "", Counter{}, 0, false // the owner has it all; its answers come as others change
	}
	to := s.ownerForLocked(k.rule, k.key)
	if to == "" || to == s.self {
		return "", Counter{}, 0, false
	}
	g.fwdAt, g.sentUsers = now, users
	return to, Counter{Rule: k.rule, Key: k.key, Window: k.window, Epoch: g.epoch, Prev: min(g.acked, sum), Used: sum}, users, true
}

// groupUsersLocked is how many of group g's users (this node included)
// were heard within the users window of k (ownershare.go). Caller holds
// s.mu.
//
// This node counts itself only once a users window (and an interval, the
// group counters' own lag) has passed since it last sent the key's counter
// to another aggregator: a user that becomes an aggregator of its key
// stays among that aggregator's users for a window, and the owner, which
// sums the groups' counts, counted it twice meanwhile (100 simulated
// nodes, burst 100: 101-103 users for 0.6 s at the start of aggregation,
// every double one an aggregator that had been a user of another, and
// the fair floors stood aside for it, bucket/share.go).
func (s *Syncer) groupUsersLocked(k aggKey, g *aggGroup, now time.Duration) uint64 {
	w := s.usersWindowLocked(k.rule, k.key)
	u := s.owner.agg.hot[[2]string{k.rule, k.key}]
	elsewhere := u != nil && u.elsewhereAt != 0 && now-u.elsewhereAt <= w+s.cfg.GossipInterval // still the other's user
	n := uint64(0)
	for name, sub := range g.o.subs {
		if now-sub.lastHeard() <= w && !(elsewhere && name == s.self) {
			n++
		}
	}
	return n
}

// aggForwardLocked sends at once, rather than at this node's next round,
// the counters of the groups among keys that were not sent in the last
// half interval. Caller holds s.mu.
func (s *Syncer) aggForwardLocked(keys []aggKey, now time.Duration) {
	st := &s.owner.agg
	at := uint64(max(0, s.clock().UnixNano()))
	writers := map[string]*packetWriter{}
	for _, k := range keys {
		g := st.groups[k]
		if g == nil || g.o != s.owner.mine[k] || now-g.fwdAt < s.cfg.GossipInterval/2 {
			continue
		}
		s.writeGroupCounterLocked(k, g, now, writers)
	}
	for name, w := range inOrder(s.simRand(), writers, compareNames) {
		if n, ok := s.peers[name]; ok {
			packets, counts := aggPackets(w, at, msgAggGroup)
			st.queued = append(st.queued, ownerOut{to: n, packets: packets, counts: counts})
		}
	}
}

// writeGroupCounterLocked writes group g's counter of k into writers, by
// the member it goes to, if it is due (groupCounterLocked): while the key
// is failed over, to the replica and to the owner, as a user's counters
// (ownerfailover.go): a late owner counts the group meanwhile, and its
// first answer ends the failover. Caller holds s.mu.
func (s *Syncer) writeGroupCounterLocked(k aggKey, g *aggGroup, now time.Duration, writers map[string]*packetWriter) {
	if to, c, users, ok := s.groupCounterLocked(k, g, now); ok {
		s.writerTo(writers, to).addEntry(s.self, chainCounter(c, g.racked, to == s.chainThirdLocked(k)), users, true) // ownerchain.go
		for _, also := range s.failoverAlsoLocked(k.rule, k.key, to) {                                                // ownerchain.go: the replica too, while at the third
			if also != "" {
				s.writerTo(writers, also).addEntry(s.self, c, users, true)
			}
		}
	}
}

// writerTo returns the writer of counters to member to among writers,
// making it if need be.
func (s *Syncer) writerTo(writers map[string]*packetWriter, to string) *packetWriter {
	w := writers[to]
	if w == nil {
		w = newPacketWriter(s.self, s.cfg.PacketSize)
		writers[to] = w
	}
	return w
}

// aggAcceptLocked reports whether sender is this node's aggregator of
// (rule, key) in window, whose answers it takes (and notes that its aggregator
// answered). Caller holds s.mu.
func (s *Syncer) aggAcceptLocked(rule, key string, window uint64, sender string) bool {
	u := s.owner.agg.hot[[2]string{rule, key}]
	if u == nil || sender == s.self || !s.aggCapableLocked() || s.aggOwnedHereLocked(rule, key) {
		return false
	}
	k := aggKey{rule, key, window}
	if g := s.owner.agg.groups[k]; g != nil && g.o == s.owner.mine[k] {
		return false // this node is its own aggregator of the key now
	}
	if s.aggregatorForLocked(rule, key, u.slot) != sender {
		return false
	}
	if u.heardFrom != sender {
		u.cameFrom = u.heardFrom
	}
	u.waiting, u.heardFrom = 0, sender
	return true
}

// aggFirstLocked adjusts an answer on the aggregated path (an
// aggregator's, or the owner's to this node's group) that starts a
// subscription here. A node that an owner told to aggregate charges what
// lies above the owner's total in the notice: both count in the owner's
// numbering, so the switch is exact. Any other (a second aggregator after
// a failover, or a node new to the key): the sender told it the key's debt
// as it sees it (others − prev), and a node that already held the key
// charges only what that debt exceeds its own. A node that just switched
// from another aggregator (aggSwitchLocked) charges, on a new subscription
// or an old one it comes back to, only what lies above what that one
// told it. Caller holds s.mu.
func (s *Syncer) aggFirstLocked(sender string, a ownerAnswer, fromOwner bool) ownerAnswer {
	k := aggKey{a.rule, a.key, a.window}
	var heard uint64
	switched, regroup := false, false
	if fromOwner {
		g := s.owner.agg.groups[k]
		switch {
		case g == nil || g.o != s.owner.mine[k]:
			return s.aggHandedFloorLocked(sender, a) // an answer to this node's own counters (owneraggswitch.go)
		case a.ackEpoch != g.epoch:
			return a // an answer to this node's own counters
		case !g.upSet:
			// The owner's first answer to a new group on the subscription
			// of a group this node handed on (it aggregates the key again):
			// what it heard through another aggregator since is charged
			// already (20 simulated nodes of 1,000 whose ring flapped ended
			// 150-216 tokens over).
			heard, switched, regroup = s.aggHeardElsewhereLocked(k, sender, a.others), true, true
		}
	} else {
		heard, switched = s.aggSwitchLocked(k, sender, a.gen, a.others)
	}
	if h := s.owner.heard[k]; h != nil {
		for i := range h.slots {
			if sl := &h.slots[i]; sl.owner == sender && sl.gen == a.gen {
				if regroup {
					sl.last = s.aggRegroupFromLocked(k, sender, a.gen, sl.last, a.others) // owneraggflap.go
				}
				if switched {
					sl.last = max(sl.last, heard)
					sl.base = sl.last // charged through it from here (owneraggswitch.go)
				}
				return a
			}
		}
	}
	u := s.owner.agg.hot[[2]string{a.rule, a.key}]
	if u != nil && u.baseSet {
		// The owner's numbering, from what this node heard: exact, even if
		// the sender's first answer was lost (its prev would skip that).
		// What it heard on the notice's subscription since the notice is
		// charged already: the base rises to it (a user charged 16 tokens
		// twice, answered others 17 after a notice that found it told 1:
		// TestAnswerAfterTheNoticeIsNotChargedTwice).
		u.baseSet = false
		if h := s.owner.heard[k]; h != nil {
			for _, sl := range h.slots {
				if sl.owner == u.ownFrom && sl.gen == u.ownGen {
					u.base = max(u.base, sl.last+u.ownContrib)
				}
			}
		}
		u.ownUpTo = max(u.ownUpTo, u.base-min(u.base, u.ownContrib))
		a.prev = min(a.others, u.base)
		return a
	}
	if fromOwner {
		// The owner's first answer to this node's group starts from what
		// it counted this node as told as a user (groupCountLocked); if it
		// has heard the key through another aggregator since, from what
		// that one told it (the same numbering, the owner's): charged only
		// what lies beyond. Its own consumption through that aggregator is
		// not in what it was told and is charged here once (it admits
		// less, by that).
		a.prev = max(a.prev, s.aggHeardElsewhereLocked(k, sender, a.others))
		return a
	}
	if al, balance, ok := s.limitOf(a.rule, a.key); ok {
		own := max(0, al.Burst-al.Soft-balance)
		told := a.others - a.prev
		a.prev = a.others - (told - min(told, uint64(own)))
	}
	if switched {
		a.prev = max(a.prev, heard)
	}
	return a
}

// aggHeardElsewhereLocked is what this node's aggregator other than
// sender and itself (aggUse.heardFrom) told it of k within an active TTL,
// at most others (0: none). Caller holds s.mu.
func (s *Syncer) aggHeardElsewhereLocked(k aggKey, sender string, others uint64) uint64 {
	u := s.owner.agg.hot[[2]string{k.rule, k.key}]
	h := s.owner.heard[k]
	if u == nil || h == nil || u.heardFrom == "" || u.heardFrom == sender || u.heardFrom == s.self {
		return 0
	}
	var told uint64
	for _, sl := range h.slots {
		if sl.owner == u.heardFrom && s.sinceBorn()-sl.at <= s.activeTTL() {
			told = max(told, min(sl.last, others))
		}
	}
	return told
}

// aggHeardLocked takes an owner's answer (from sender) at an aggregator:
// what it adds (tokens, charged here already) joins the group's total, its
// ack the group's (if it acknowledges: not the replica's while the group
// is failed over, acksLocked), its users count the group's users are told,
// and the group's users are answered as soon as the lock is let go. It
// reports whether the answer was the group's (its view is then not this
// node's own: this node hears its share as its users do, answersLocked).
// Caller holds s.mu.
//
// below is the part of tokens that lies under what the answer's
// subscription had told here (an earlier answer's lower prev arriving
// late: heardLocked, ownerfirst.go). On the subscription the group's
// numbering was taken from, that part is in the numbering already (its
// first answer heard gave the whole others, whatever its prev): it is
// news to this node, not to the group. Added again, the group ran that far
// above the owner's numbering and charged every user it once more (1,000
// simulated nodes under churn: two answers to a new group sent 81 µs
// apart, prev 0 then 88, arrived the other way round; 31 users +88).
func (s *Syncer) aggHeardLocked(sender string, a ownerAnswer, tokens, below uint64, now time.Duration, ack bool) bool {
	k := aggKey{a.rule, a.key, a.window}
	g := s.owner.agg.groups[k]
	if g == nil || g.o != s.owner.mine[k] || a.ackEpoch != g.epoch {
		return false // not an answer to the group's counter (its own consumption's, perhaps)
	}
	if ack {
		g.acked = max(g.acked, a.ackUsed)
	} else {
		g.racked = max(g.racked, a.ackUsed) // ownerchain.go
	}
	g.noteAlt(sender, a.ackUsed) // owneraggfloor.go
	g.upAt = now
	g.view.note(a, now) // owneraggbalance.go
	if a.users > 0 {
		g.users = a.users
	}
	if !g.upSet {
		// The group's numbering is the owner's: its users' totals continue
		// those the owner told them.
		g.upSet, g.up, g.o.total = true, a.others, g.o.total+a.others
		g.upFrom, g.upGen = sender, a.gen
	} else {
		if sender == g.upFrom && a.gen == g.upGen {
			tokens -= min(below, tokens)
		}
		g.up += tokens
		g.o.total += tokens
	}
	g.o.dirty = true // its idle users are told at this node's rounds (answersLocked)
	if now-g.fanAt < s.cfg.GossipInterval {
		g.fanDue = true
		return true
	}
	g.fanAt = now
	s.owner.agg.fan = append(s.owner.agg.fan, k)
	return true
}

// aggOwnAnswerLocked reports whether a, an answer of the key's owner or
// replica, answers this node's own counter while it aggregates the key:
// it hears the key through its group's answers then, and the owner only
// acknowledges its own counters (aggOthersLocked), so such an answer
// charges nothing once the owner answered the group (before, its own
// counter's answers are its view). A replica answers them with the whole of its others
// once the group stops sending to it (a failover ended): charged, that
// was the failover once more, and it then swallowed as much of the
// owner's answers to the group (ownerchargeonce.go: 100 simulated nodes,
// the owner silent 4 s: an aggregator charged 415 tokens on it, its users
// ended 780-817 below what the others admitted; 390-410 after). Caller
// holds s.mu.
//
// So does an answer to the group this node handed on (aggUse.handed): its
// new aggregator tells it the key, and the owner's answers to the old
// group, which go on for an active TTL, told it the same consumption a
// second time (300 simulated nodes under churn, the owner killed: the
// node that handed its group on ended 186-795 tokens above what the
// others admitted).
func (s *Syncer) aggOwnAnswerLocked(a ownerAnswer) bool {
	k := aggKey{a.rule, a.key, a.window}
	g := s.owner.agg.groups[k]
	if g != nil && g.o == s.owner.mine[k] {
		return g.upSet && a.ackEpoch != g.epoch
	}
	u := s.owner.agg.hot[[2]string{a.rule, a.key}]
	return u != nil && u.handed != 0 && a.ackEpoch == u.handed
}

// aggOwnChargeLocked returns the part of tokens, what an answer of the
// key's owner or replica (sender) adds here, that is charged: all of it
// unless it answers this node's own counter while it aggregates the key
// (aggOwnAnswerLocked). Such an answer still charges what lies below
// where the group's numbering started for this node (ownUpTo, from the
// owner's notice: its total less this node's own consumption, or what it
// had heard of the notice's subscription): the group's first answer took
// that as heard here. The owner writes both answers in one round;
// processed group first, the tokens the notice's total held were never
// charged (an aggregator of 20 in-process nodes stayed at the burst while
// the 19 others' tokens of a key each used once were counted everywhere
// else: TestAggregatorsLateOwnAnswerChargesWhatTheGroupTookAsHeard).
// Caller holds s.mu, after heardLocked took the answer.
func (s *Syncer) aggOwnChargeLocked(sender string, a ownerAnswer, tokens uint64) uint64 {
	if !s.aggOwnAnswerLocked(a) {
		s.aggChargedOnLocked(sender, a) // owneraggflap.go
		return tokens
	}
	u := s.owner.agg.hot[[2]string{a.rule, a.key}]
	h := s.owner.heard[aggKey{a.rule, a.key, a.window}]
	if u == nil || h == nil || u.ownFrom != sender || u.ownGen != a.gen {
		return 0
	}
	for _, sl := range h.slots {
		if sl.owner == sender && sl.gen == a.gen {
			before := sl.last - min(sl.last, tokens)
			tokens = min(tokens, u.ownUpTo-min(u.ownUpTo, before))
			s.aggCreditGroupLocked(aggKey{a.rule, a.key, a.window}, sender, tokens) // owneraggcredit.go
			return tokens
		}
	}
	return 0
}

// aggHeardSlot returns which of h's two slots a new subscription's answer
// takes: the older one, but an aggregator's group's answers come first.
// While this node aggregates the key it may hear it on four subscriptions
// during a failover (the owner's and the replica's answers to its group
// and to its own counter, own: they charge nothing, aggOwnAnswerLocked):
// a new subscription takes an own one's slot, and a new own one takes
// none while both hold others (reported false). Evicted, the
// owner's group slot of a silent owner (the oldest) made its first answer
// after the silence start anew from what it had counted: the silence was
// never charged from it, and the charge-once pair swallowed as much of its
// later answers (100 simulated nodes, the owner silent 4 s: 16-47 users
// ended ~400 under what the others admitted).
func aggHeardSlot(h *heardKey, own bool) (int, bool) {
	i := 0
	if h.slots[1].at < h.slots[0].at {
		i = 1
	}
	a, b := &h.slots[0], &h.slots[1]
	switch {
	case a.own != b.own: // the own one goes, whatever the new answer
		if a.own {
			return 0, true
		}
		return 1, true
	case own && !a.own && a.owner != "" && b.owner != "":
		return 0, false // both hold group subscriptions
	}
	return i, true
}

// aggViewUsersLocked is the users count the answers of aggregate k (o)
// carry in their view (ownershare.go; 0: no view): when o is a group this
// node aggregates, the key's users as its owner last told the group (its
// balance is this node's, which has counted the group's consumption
// before the owner has); otherwise o's (an owner counts each aggregator's
// group as the users it reported, countUsersLocked). Caller holds s.mu.
func (s *Syncer) aggViewUsersLocked(k aggKey, o *ownedKey) uint64 {
	if g := s.owner.agg.groups[k]; g != nil && g.o == o {
		return g.users
	}
	return o.users
}

// aggTakeQueued returns what must be sent at once: the answers of groups
// whose owner answered, and the owner's answers to group counters.
func (s *Syncer) aggTakeQueued() []ownerOut {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.owner.agg
	if len(st.fan) == 0 && len(st.queued) == 0 {
		return nil
	}
	now := s.sinceBorn()
	at := uint64(max(0, s.clock().UnixNano()))
	writers := map[string]*answerWriter{}
	bounded, _ := s.ledger.(BoundedLedger)
	for _, k := range st.fan {
		g := st.groups[k]
		if g == nil || g.o != s.owner.mine[k] {
			continue
		}
		balance := math.NaN()
		if bounded != nil {
			balance, _ = bounded.Balance(k.rule, k.key)
			balance = s.aggBalanceLocked(k, g.o, balance, now) // owneraggbalance.go
		}
		for name, sub := range inOrder(s.simRand(), g.o.subs, compareNames) {
			if now-sub.heard <= s.activeTTL() {
				s.answerSubLocked(k, g.o, name, sub, now, at, writers, g.users, balance)
			}
		}
	}
	st.fan = st.fan[:0]
	out := st.queued
	st.queued = nil
	for name, w := range inOrder(s.simRand(), writers, compareNames) {
		if n, ok := s.peers[name]; ok {
			packets := w.packets()
			out = append(out, ownerOut{to: n, packets: packets, counts: make([]int, len(packets))})
		}
	}
	return out
}

// answerSubLocked writes the answer of aggregate k (o) to contributor name
// (sub) if its view is behind or its counter awaits an acknowledgement,
// with the view users and balance (ownershare.go; users 0: none). Caller
// holds s.mu.
func (s *Syncer) answerSubLocked(k aggKey, o *ownedKey, name string, sub *ownerSub, now time.Duration, at uint64, writers map[string]*answerWriter, users uint64, balance float64) {
	if name == s.self {
		return
	}
	others := o.total - min(o.total, sub.contrib)
	if others == sub.sent && !sub.needAck {
		return
	}
	ackEpoch, ackUsed := sub.epoch, sub.hi
	if a := sub.agg; a != nil && a.heard != 0 && now-a.heard <= s.activeTTL() {
		ackEpoch, ackUsed = a.epoch, a.hi
	}
	to := strings.TrimPrefix(name, aggGroupPrefix)
	w := writers[to]
	if w == nil {
		w = &answerWriter{limit: s.cfg.PacketSize, sender: s.self, at: at, users: readsUsers(s.peers[to])}
		writers[to] = w
	}
	w.add(ownerAnswer{rule: k.rule, key: k.key, window: k.window, gen: sub.serial, prev: min(sub.sent, others),
		others: others, ackEpoch: ackEpoch, ackUsed: ackUsed, users: users, balance: balance})
	sub.sent, sub.needAck, sub.answered = others, false, now
}

// receiveAgg applies an aggregation message: a user's counters to this
// node as its aggregator, an aggregator's group counters to this node as
// the owner, or an owner's notice.
func (s *Syncer) receiveAgg(kind uint64, b []byte) {
	if t := s.transport; t != nil && t.senders != nil && !t.senders.vouch.take(b) {
		s.tstats.countPacket(PacketRefusedUnchecked)
		s.badLog.warn(s.log, s.clock(), "refused an aggregation message the transport did not check (not from a packet)", "bytes", len(b))
		return
	}
	if !s.ownerMode() {
		s.stats.IgnoredPackets.Add(1)
		return
	}
	var charges []charge
	var err error
	switch kind {
	case msgAggUsers:
		charges, err = s.receiveAggUsers(b)
	case msgAggGroup:
		charges, err = s.receiveAggGroup(b)
	default:
		err = s.receiveNotice(b)
	}
	if err != nil {
		s.stats.BadPackets.Add(1)
		s.badLog.warn(s.log, s.clock(), "dropped a gossip packet", "bytes", len(b), "error", err)
		return
	}
	s.charge(charges)
	s.sendOwner(s.aggTakeQueued())
}

// receiveAggUsers counts users' counters into the groups this node
// aggregates (or, for a key it owns or replicates, into its aggregate, as
// kind 4), and returns what to charge here. A counter for a key this node
// neither owns, replicates nor aggregates on its ring is refused (neither
// counted nor answered): counted here, it would reach no owner; its sender
// hears nothing and moves on to the next slot's aggregator.
func (s *Syncer) receiveAggUsers(b []byte) ([]charge, error) {
	in, check := s.newCounterIntake() // ownerintake.go
	now := in.now
	var charges []charge
	var keys []aggKey
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshRingLocked()
	_, err := decodeAggCounters(b, msgAggUsers, check, func(origin string, c Counter, _ uint64) {
		if !in.fromSender(origin) {
			return
		}
		k := aggKey{c.Rule, c.Key, c.Window}
		owner, replica := s.owner.ring.owners(c.Rule, c.Key)
		if owner != s.self && replica != s.self {
			if !s.aggCapableLocked() || s.aggUsersLocked(c.Rule, c.Key, s.self) == 0 {
				return
			}
			s.aggGroupLocked(k, now).heard = now
			keys = append(keys, k)
		}
		a, at, ok := in.admit(origin, c)
		if !ok {
			return
		}
		if tokens := s.aggregateLocked(in.bounded != nil, a, origin, c, at, now); tokens > 0 {
			charges = append(charges, charge{c.Rule, c.Key, c.Window, tokens})
		}
	})
	in.done()
	if err != nil {
		return nil, fmt.Errorf("aggregation counters: %w", err)
	}
	if len(keys) > 0 {
		s.aggForwardLocked(keys, now)
	}
	return charges, nil
}

// receiveNotice takes an owner's notice: the keys it lists go through
// aggregators from this node's next round.
func (s *Syncer) receiveNotice(b []byte) error {
	sender, sentAt, keys, err := decodeNotice(b)
	if err != nil {
		return err
	}
	now := s.sinceBorn()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkStampLocked(sender, sentAt, true); err != nil {
		return fmt.Errorf("aggregation notice from %.64q: %w", sender, err)
	}
	if !s.aggCapableLocked() {
		return nil
	}
	st := &s.owner.agg
	for _, n := range keys {
		owner, replica := s.owner.ring.owners(n.rule, n.key)
		if (sender != owner && sender != replica) || !s.solicitedLocked(n.rule, n.key, n.window, n.ackEpoch) { // ownerunsolicited.go
			s.ownerRefused.Add(1)
			continue
		}
		// What the owner counted of this node's counter: not sent again to
		// the aggregator (the owner's answer saying so may be held back).
		s.ackLocked(ownerAnswer{rule: n.rule, key: n.key, window: n.window, ackEpoch: n.ackEpoch, ackUsed: n.ackUsed})
		if st.hot == nil {
			st.hot = map[[2]string]*aggUse{}
		}
		k := [2]string{n.rule, n.key}
		u := st.hot[k]
		if u == nil && len(st.hot) < s.cfg.MaxSeen {
			u = &aggUse{used: now, baseSet: true}
			st.hot[k] = u
		}
		if g := st.groups[aggKey{n.rule, n.key, 0}]; g != nil && g.upSet {
			// Its group's numbering is the owner's already: no base (one
			// left set, at 0, made a later first answer on the aggregated
			// path, its slot lost, start from 0 and charge the key's
			// history: TestNoticeToAnAggregatorSetsNoBase).
			if u != nil {
				u.baseSet = false
				u.ownFrom, u.ownGen, u.ownUpTo, u.ownContrib = sender, n.gen, n.total-min(n.total, n.contrib), n.contrib
			}
			continue
		}
		if u != nil && u.baseSet {
			u.base = n.total
			if h := s.owner.heard[aggKey{n.rule, n.key, 0}]; h != nil {
				for _, sl := range h.slots {
					if sl.owner == sender && sl.gen == n.gen {
						u.base = sl.last + n.contrib // what it heard, not what was sent
					}
				}
			}
			u.ownFrom, u.ownGen, u.ownUpTo, u.ownContrib = sender, n.gen, u.base-min(u.base, n.contrib), n.contrib
		}
	}
	return nil
}

// AggStats counts aggregation's state on one node; read it with
// Syncer.AggStats.
type AggStats struct {
	// Groups is how many groups this node aggregates (as an aggregator).
	Groups int
	// GroupUsers is how many users those groups hold, this node included.
	GroupUsers int
	// GroupEntries is how many aggregators' groups this node counts (as
	// an owner), and Aggregated how many of its keys are aggregated.
	GroupEntries, Aggregated int
	// Routed is how many keys this node sends through an aggregator (as a
	// user), and FailedOver how many of those moved past their first
	// slot's aggregator.
	Routed, FailedOver int
	// Views is how many of those its aggregator told the owner's view
	// (ownershare.go), and ViewUsers the largest users count told.
	Views, ViewUsers int
}

// AggStats returns what this node holds for aggregation now.
func (s *Syncer) AggStats() AggStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.owner.agg
	var a AggStats
	for k, g := range st.groups {
		if g.o == s.owner.mine[k] {
			a.Groups++
			a.GroupUsers += len(g.o.subs)
		}
	}
	for k, names := range st.groupSubs {
		if o := s.owner.mine[k]; o != nil && len(names) > 0 {
			a.Aggregated++
			for name := range names {
				if o.subs[name] != nil {
					a.GroupEntries++
				}
			}
		}
	}
	for _, u := range st.hot {
		a.Routed++
		if u.slot > 0 {
			a.FailedOver++
		}
		if u.viewUsers > 0 {
			a.Views++
			a.ViewUsers = max(a.ViewUsers, int(u.viewUsers))
		}
	}
	return a
}
