package gossip

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Aggregation before the owner (owneragg.go), the owner's side: when a key
// has enough users it tells them to go through aggregators (notices), and
// it counts and answers the aggregators' group counters.

// aggOthersLocked is answersLocked's say on contributor name of aggregate
// k (o) at this round: what to tell it instead of others, or skip. An
// aggregator's entry is answered here, with its group counter's
// acknowledgement (and as its group counters arrive); at an aggregator
// whose owner answers, users are answered as those answers arrive (at
// rounds only to acknowledge their counters, or when idle); on a key that
// has as many users as Config.AggregateAbove a user is told to use
// aggregators (once, and again while it sends here: the notice, not an
// answer, acknowledges its counter) and is no longer told more here.
// Caller holds s.mu.
func (s *Syncer) aggOthersLocked(k aggKey, o *ownedKey, name string, sub *ownerSub, others uint64, now time.Duration) (uint64, bool) {
	st := &s.owner.agg
	if a := sub.agg; a != nil && a.heard != 0 && now-a.heard <= s.activeTTL() {
		if st.answers == nil {
			st.answers = map[string]*answerWriter{}
		}
		s.answerSubLocked(k, o, name, sub, now, uint64(max(0, s.clock().UnixNano())), st.answers, o.users, o.balance)
		return others, true
	}
	if sub.agg != nil && strings.HasPrefix(name, aggGroupPrefix) {
		return others, true // an idle group: told when it sends again
	}
	if g := st.groups[k]; g != nil && g.o == o {
		// Users are told nothing before the owner's first answer sets the
		// group's numbering (its users' totals are the owner's).
		return others, !g.upSet || (!sub.needAck && !g.fanDue && now-sub.heard <= s.activeTTL() && now-g.upAt <= aggUpFresh*s.cfg.GossipInterval)
	}
	if len(st.groupSubs[k]) > 0 {
		if g := o.subs[aggGroupPrefix+name]; g != nil && g.agg != nil && now-g.agg.heard <= s.activeTTL() {
			// An aggregator hears the key through its group's answers: its
			// own counters (sent before it heard it aggregates) are only
			// acknowledged.
			return sub.sent, false
		}
	}
	if name == s.self || !s.aggHotLocked(k, o, now) {
		return others, false
	}
	if sub.agg == nil {
		sub.agg = &aggSub{}
	}
	first := !sub.agg.switched
	if first || sub.needAck {
		sub.agg.switched = true
		s.aggNoticeLocked(name, k)
	}
	if first {
		return others, false // and a last answer, if the budget allows, till its aggregator's
	}
	// The notice acknowledges its counter (aggNoticesLocked) and it hears
	// the key from its aggregator now: no answer. A user whose notice was
	// lost sends here again and is told again.
	sub.needAck = false
	return sub.sent, true
}

// aggHotLocked reports whether this node, as the owner of aggregate k (o),
// has its users aggregate: as many users as Config.AggregateAbove heard
// within the users window (o.users, countUsersLocked: many nodes using the
// key at once, not many that call it now and then, which aggregation would
// serve worse), or a group counter within subTTL. Caller holds s.mu.
func (s *Syncer) aggHotLocked(k aggKey, o *ownedKey, now time.Duration) bool {
	if !s.aggCapableLocked() {
		return false
	}
	if o.users >= uint64(s.cfg.AggregateAbove) {
		return true
	}
	at, ok := s.owner.agg.hotAt[[2]string{k.rule, k.key}]
	return ok && now-at <= s.subTTL()
}

// aggNoticeLocked queues a notice to user that k's key goes through
// aggregators. Caller holds s.mu.
func (s *Syncer) aggNoticeLocked(user string, k aggKey) {
	st := &s.owner.agg
	if st.notices == nil {
		st.notices = map[string][]aggKey{}
	}
	if len(st.notices[user]) < maxNoticeEntries {
		st.notices[user] = append(st.notices[user], k)
	}
}

// aggNoticesLocked writes the queued notices, each with the owner's total
// as its user was told it: what it was last answered, plus its own
// consumption counted here (an answer the budget held back is not in it:
// the user's first answer from its aggregator charges that too). Caller
// holds s.mu.
func (s *Syncer) aggNoticesLocked(at uint64, add func(string, [][]byte, []int)) {
	st := &s.owner.agg
	for user, keys := range inOrder(s.simRand(), st.notices, compareNames) { // simorder.go
		w := &noticeWriter{limit: s.cfg.PacketSize, sender: s.self, at: at}
		for _, k := range keys {
			if o := s.owner.mine[k]; o != nil {
				if sub := o.subs[user]; sub != nil {
					w.add(aggNotice{rule: k.rule, key: k.key, total: sub.sent + sub.contrib, gen: sub.serial, contrib: sub.contrib,
						window: k.window, ackEpoch: sub.epoch, ackUsed: sub.hi})
				}
			}
		}
		add(user, w.packets(), nil)
	}
	clear(st.notices)
}

// receiveAggGroup counts aggregators' group counters into this node's
// aggregates and queues their answers; it returns what to charge here.
func (s *Syncer) receiveAggGroup(b []byte) ([]charge, error) {
	in, check := s.newCounterIntake() // ownerintake.go
	var charges []charge
	writers := map[string]*answerWriter{}
	s.mu.Lock()
	s.refreshRingLocked()
	_, err := decodeAggCounters(b, msgAggGroup, check, func(origin string, c Counter, users uint64) {
		if !in.fromSender(origin) {
			return
		}
		a, at, ok := in.admit(origin, c)
		if !ok {
			return
		}
		tokens, k, ok := s.groupCountLocked(in.bounded != nil, a, origin, c, users, at, in.now)
		if !ok {
			return
		}
		if tokens = s.countedChargeLocked(k, origin, tokens, in.now); tokens > 0 { // owneraggreplica.go
			charges = append(charges, charge{c.Rule, c.Key, c.Window, tokens})
		}
		s.answerGroupsLocked(k, aggGroupPrefix+origin, in.now, in.nowNanos, writers)
	})
	for name, w := range inOrder(s.simRand(), writers, compareNames) {
		if n, ok := s.peers[name]; ok {
			packets := w.packets()
			s.owner.agg.queued = append(s.owner.agg.queued, ownerOut{to: n, packets: packets, counts: make([]int, len(packets))})
		}
	}
	s.mu.Unlock()
	in.done()
	if err != nil {
		return nil, fmt.Errorf("aggregation group: %w", err)
	}
	return charges, nil
}

// answerGroupsLocked answers, on a group counter of aggregate k from
// group entry from, that group, and every other active group whose view
// is behind and that was not answered in the last half interval (so that
// news reaches every group without waiting for this node's round: at most
// about two answers per group per interval). Caller holds s.mu.
func (s *Syncer) answerGroupsLocked(k aggKey, from string, now time.Duration, at uint64, writers map[string]*answerWriter) {
	o := s.owner.mine[k]
	if o == nil {
		return
	}
	s.countUsersLocked(k, o, now) // the view they are told (ownershare.go)
	if sub := o.subs[from]; sub != nil {
		s.answerSubLocked(k, o, from, sub, now, at, writers, o.users, o.balance)
	}
	for name := range inOrder(s.simRand(), s.owner.agg.groupSubs[k], compareNames) {
		sub := o.subs[name]
		switch {
		case sub == nil || sub.agg == nil:
			delete(s.owner.agg.groupSubs[k], name)
		case name != from && now-sub.agg.heard <= s.activeTTL() && now-sub.answered >= s.cfg.GossipInterval:
			s.answerSubLocked(k, o, name, sub, now, at, writers, o.users, o.balance)
		}
	}
}

// groupCountLocked counts an aggregator's group counter into the key's
// aggregate: what lies above both the highest counted of the group and the
// counter's prev, within the allowance of the members this node's ring
// assigns to the aggregator, 2(n+m+1) origins (m the most any aggregator
// of the key is assigned: room for a failed neighbour's users). It returns the tokens counted
// and the aggregate, or false when the counter is refused (this node
// neither owns nor replicates the key, or its ring gives the sender no
// users of it). Caller holds s.mu.
func (s *Syncer) groupCountLocked(bounded bool, a Allowance, origin string, c Counter, groupUsers uint64, at, now time.Duration) (uint64, aggKey, bool) {
	k := aggKey{c.Rule, c.Key, c.Window}
	owner, replica := s.owner.ring.owners(c.Rule, c.Key)
	if owner != s.self && replica != s.self && (!s.thirdHereLocked(k) || s.groupHereLocked(k)) { // the third counts a failed-over group (ownerchain.go)
		return 0, k, false
	}
	users := s.aggUsersLocked(c.Rule, c.Key, origin)
	if users == 0 {
		// Not an aggregator of the key on this node's ring. One whose group
		// this aggregate counts already (its ring and this node's disagree
		// for a moment: a member died or joined) is counted on, as the
		// largest group at most, until its users move and the group goes
		// idle: refused, what its users had it forward would be lost.
		if o := s.owner.mine[k]; o != nil {
			if g := o.subs[aggGroupPrefix+origin]; g != nil && g.agg != nil {
				users = max(1, s.owner.agg.counts[[2]string{c.Rule, c.Key}].most)
			}
		}
	}
	if users == 0 {
		s.suspectLocked(origin, c, "a group counter from a member that is no aggregator of the key", c.Used, 0)
		return 0, k, false
	}
	o := s.aggregateFor(k)
	_, existed := o.subs[aggGroupPrefix+origin]
	sub := s.subFor(o, aggGroupPrefix+origin, Counter{Rule: c.Rule, Key: c.Key, Window: c.Window})
	if sub == nil {
		return 0, k, false
	}
	if direct := o.subs[origin]; !existed && direct != nil {
		// The aggregator used the key itself: it has heard this aggregate's
		// total up to what it was told plus its own consumption. Its group
		// continues from there, and it is told no more as a user.
		sub.sent = min(o.total, direct.sent+direct.contrib)
		if direct.agg == nil {
			direct.agg = &aggSub{}
		}
		if !direct.agg.switched {
			direct.agg.switched = true
			s.aggNoticeLocked(origin, k)
		}
	}
	if sub.agg == nil {
		sub.agg = &aggSub{}
		st := &s.owner.agg
		if st.groupSubs == nil {
			st.groupSubs = map[aggKey]map[string]struct{}{}
		}
		if st.groupSubs[k] == nil && len(st.groupSubs) < s.cfg.MaxSeen {
			st.groupSubs[k] = map[string]struct{}{}
		}
		if m := st.groupSubs[k]; m != nil {
			m[aggGroupPrefix+origin] = struct{}{}
		}
	}
	g := sub.agg
	// The users it says use the key through it count among the key's
	// (countUsersLocked): at most the members the ring assigns it and the
	// most it assigns any aggregator (a failed neighbour's) and itself, so
	// a lying aggregator shrinks the others' shares by no more than that.
	g.group = true
	g.users = min(groupUsers, uint64(users+s.owner.agg.counts[[2]string{c.Rule, c.Key}].most+1))
	if s.owner.agg.hotAt == nil {
		s.owner.agg.hotAt = map[[2]string]time.Duration{}
	}
	if hk := [2]string{c.Rule, c.Key}; len(s.owner.agg.hotAt) < s.cfg.MaxSeen {
		if _, was := s.owner.agg.hotAt[hk]; !was {
			s.log.Info("a key's users go through aggregators", "rule", c.Rule, "first_aggregator", origin)
		}
		s.owner.agg.hotAt[hk] = now
	}
	sub.heard, o.heard, g.heard, sub.needAck = now, now, now, true
	switch {
	case c.Epoch < g.epoch:
		return 0, k, true // a late counter of a group left behind
	case c.Epoch > g.epoch:
		g.epoch, g.hi = c.Epoch, c.Prev
		g.allow.newEpoch = true
	}
	base := max(g.hi, c.Prev)
	g.hi = max(g.hi, c.Used)
	if c.Used <= base {
		return 0, k, true
	}
	tokens := c.Used - base
	if bounded {
		n := float64(2*users + 2*s.owner.agg.counts[[2]string{c.Rule, c.Key}].most + 2)
		scaled := Allowance{Burst: a.Burst * n, PerSecond: a.PerSecond * n, Soft: a.Soft * n}
		give := g.allow.take(scaled, tokens, at, s.awayLocked(origin, at))
		if give < tokens {
			s.suspectLocked(origin, c, "a group counter beyond what its users could have admitted", tokens, give)
		}
		tokens = give
	}
	sub.contrib += tokens
	o.total += tokens
	o.dirty = o.dirty || tokens > 0
	return tokens, k, true
}

// aggregatorsOf returns the key's owner on r, its hash, and its
// aggregators by slot (aggFanIn of the ring's size); thirdOut: its third
// is none of them (ownerchainagg.go).
func (r *ownerRing) aggregatorsOf(rule, key string, thirdOut bool) (owner string, kh uint64, aggs []string) {
	owner, replica := r.owners(rule, key)
	kh = keyHash(rule, key)
	third := ""
	if thirdOut {
		third = r.third(rule, key)
	}
	aggs = make([]string, aggFanIn(r.size()))
	for i := range aggs {
		aggs[i] = r.aggregatorAt(kh, i, owner, replica, third)
	}
	return owner, kh, aggs
}

// aggUsersLocked is how many members this node's ring assigns to
// aggregator name for (rule, key) (0: it is none of the key's
// aggregators). Caller holds s.mu.
func (s *Syncer) aggUsersLocked(rule, key, name string) int {
	st := &s.owner.agg
	hk := [2]string{rule, key}
	thirdOut := s.aggThirdOutLocked()
	c := st.counts[hk]
	if c == nil || c.ring != s.owner.ring || c.thirdOut != thirdOut {
		r := s.owner.ring
		owner, kh, aggs := r.aggregatorsOf(rule, key, thirdOut)
		k := len(aggs)
		// Every member's slot (one pass of a multiply-xorshift per member,
		// its name's hash computed once per ring), then each slot's
		// members to its aggregator.
		slots := make([]int, k)
		for _, nh := range r.nameHashes {
			slots[aggSlotOf(kh, nh, k)]++
		}
		if o, ok := slices.BinarySearch(r.names, owner); ok { // the owner is none of its aggregators' users; the replica uses the key as any member does
			slots[aggSlotOf(kh, r.nameHashes[o], k)]--
		}
		c = &aggCounts{ring: r, thirdOut: thirdOut, n: make(map[string]int, k)}
		for i, a := range aggs {
			if slots[i] > 0 {
				c.n[a] += slots[i]
			}
		}
		for _, n := range c.n {
			c.most = max(c.most, n)
		}
		if st.counts == nil {
			st.counts = map[[2]string]*aggCounts{}
		}
		if len(st.counts) >= s.cfg.MaxSeen {
			clear(st.counts)
		}
		st.counts[hk] = c
	}
	return c.n[name]
}
