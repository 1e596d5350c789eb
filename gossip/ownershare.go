package gossip

import (
	"math"
	"time"

	"github.com/hashicorp/memberlist"
)

// Owner mode's shares (issue 20): what a node may admit of a key before
// and while it hears the cluster's view from the key's owner.
//
//   - Touches. A node's store reports a key it refused, or held to its
//     first share, as a counter with nothing new admitted (Used == Prev:
//     bucket/share.go). In owner mode such a counter goes to the key's
//     owner like any other, which makes the node a contributor of the
//     key's aggregate: its first answer tells a newcomer the key's debt
//     (newcomerPrevLocked) before its first-contact hold ends, and a node
//     refused for long keeps hearing of the key (without touches its
//     subscription lapsed after ownerSubTTL and its bucket refilled
//     unseen). A node sends a key's touch at most once per keep-alive
//     (half the users window below) since its last counter of the key;
//     other modes drop touches.
//   - Users. An owner counts, per aggregate, the contributors it heard
//     (counters or touches) within the users window, and tells each
//     receiver that reads it (delegate protocol protoOwnerShare) the count
//     and the key's balance as the owner sees it in its answers; the
//     receiver's ledger (OwnerViewLedger) then admits only its share of
//     that balance and the refill (bucket.Store.SetOwnerView). The owner's
//     balance, not the receiver's, because a receiver that hears of the key
//     a second late has its bucket refilled to the burst meanwhile and then
//     charged the others' consumption: the refill lost to the cap makes its
//     view lower than the cluster's. The
//     users window is the time the limit's rate takes to refill its
//     burst, between two gossip intervals and a second (about how stale an
//     idle node's view may be): a node that calls a key rarely is counted
//     only while it calls, so the shares of the nodes calling about now sum
//     to about the balance and the refill.
//
// Failures err toward admitting: a node that hears no view (an owner of
// an earlier version, a receiver of an earlier version) decides on its
// balance alone, as before; so does a node whose counters of a key went
// unanswered for ownerFailover rounds (told with a view of 0 users) until the
// replica answers, and one that has heard nothing of the key for five
// minutes; an owner that never hears a touch sends the first-contact
// newcomer nothing, and its hold ends on time.

// protoOwnerShare is the delegate protocol version of nodes that read the
// owner's view (users and balance) in answers (memberlist's
// DelegateProtocolMax).
const protoOwnerShare = 3

// readsUsers reports whether member n reads the owner's view in answers.
func readsUsers(n memberlist.Node) bool { return n.DMax >= protoOwnerShare }

// maxUsersWindow is the longest users window (usersWindowLocked).
const maxUsersWindow = time.Second

// OwnerView is what an owner's answer says of a key beside the others'
// consumption (ownershare.go): how many nodes use the key lately, and the
// key's balance as the owner sees it, having counted the receiver's own
// counter up to AckUsed in epoch AckEpoch. Users 0 means the owner is lost
// (decide on the balance alone); Balance is NaN when not said.
type OwnerView struct {
	Users             uint64
	Balance           float64
	AckEpoch, AckUsed uint64
	// Interval is this node's gossip interval: about how often an active
	// user of a key is answered.
	Interval time.Duration
}

// OwnerViewLedger is a Ledger that takes, in owner mode, the owner's view
// of a key (see bucket.Store.SetOwnerView). Optional: a ledger without it
// decides on its balance alone.
type OwnerViewLedger interface {
	OwnerView(rule, key string, window uint64, v OwnerView)
}

// keyView is one answer's view of a key.
type keyView struct {
	rule, key string
	window    uint64
	view      OwnerView
}

// tellViews passes owners' views of keys to the ledger.
func (s *Syncer) tellViews(users []keyView) {
	l, ok := s.ledger.(OwnerViewLedger)
	if !ok {
		return
	}
	for _, u := range users {
		u.view.Interval = s.cfg.GossipInterval
		l.OwnerView(u.rule, u.key, u.window, u.view)
	}
}

// usersWindowLocked is how recently a contributor of (rule, key) must have
// been heard to count as a user: the time the limit's rate takes to refill
// its burst, between two gossip intervals and maxUsersWindow. Caller holds
// s.mu.
func (s *Syncer) usersWindowLocked(rule, key string) time.Duration {
	w := maxUsersWindow
	if b, ok := s.ledger.(BoundedLedger); ok {
		if a, ok := b.Allowance(rule, key); ok && a.PerSecond > 0 {
			w = min(w, time.Duration((a.Burst-a.Soft)/a.PerSecond*float64(time.Second)))
		}
	}
	return max(w, 2*s.cfg.GossipInterval)
}

// ownSendLocked decides whether this node's own counter c, drained from
// the ledger, is queued: a touch (nothing new admitted) only in owner mode
// and at most once per keep-alive since the key's last counter; and it
// notes when the key's counters were last queued. Caller holds s.mu.
func (s *Syncer) ownSendLocked(c Counter, owner bool) bool {
	touch := c.Used == c.Prev
	if !owner {
		return !touch
	}
	k := [2]string{c.Rule, c.Key}
	now := s.sinceBorn()
	if touch {
		if last, ok := s.owner.lastOwn[k]; ok && now-last < s.usersWindowLocked(c.Rule, c.Key)/2 {
			return false
		}
	}
	if s.owner.lastOwn == nil || len(s.owner.lastOwn) >= s.cfg.MaxSeen {
		s.owner.lastOwn = map[[2]string]time.Duration{} // forgetting sends more touches, never fewer
	}
	s.owner.lastOwn[k] = now
	return true
}

// heardFromLocked notes a counter c from contributor sub of aggregate o:
// any counter keeps the contributor a user and asks for an answer; one
// that admitted something (or a new contributor's first) makes it active
// (answered every interval the key changes, see ownerActiveTTL); a touch
// alone does not. Caller holds s.mu.
func heardFromLocked(o *ownedKey, sub *ownerSub, c Counter, now time.Duration) {
	if c.Used != c.Prev || sub.seen == 0 {
		sub.heard, o.heard = now, now
	}
	sub.seen, sub.needAck, o.dirty = now, true, true
}

// selfViewLocked notes, for this node's own ledger, the count of users of
// a key it owns (or aggregates, owneragg.go) and uses: it admits its share
// too, of its own balance (an aggregator: of the balance it tells its
// group, owneraggbalance.go). Caller holds s.mu.
func (s *Syncer) selfViewLocked(k aggKey, users uint64) {
	if len(s.owner.selfViews) >= s.cfg.MaxSeen {
		return
	}
	v, ok := s.aggSelfViewLocked(k, s.owner.mine[k], users, s.sinceBorn())
	if !ok {
		v = OwnerView{Users: users, Balance: math.NaN()}
	}
	s.owner.selfViews = append(s.owner.selfViews, keyView{k.rule, k.key, k.window, v})
}

// ownerLostAfter is how long without any answer for a key makes its
// owner lost to this node when its counters fail over to the replica: an
// owner answering thousands of users of a key answers each in turn
// (ownerAnswerBudget), and a node it answers late is not on its own.
const ownerLostAfter = time.Second

// ownerLostLocked tells this node's ledger that the owner of (rule, key)
// left its counters unanswered (and no answer for the key came for
// ownerLostAfter): until an owner or replica answers again, the node
// decides on its balance alone (a view of 0 users). Caller holds s.mu.
func (s *Syncer) ownerLostLocked(rule, key string) {
	if h := s.owner.heard[aggKey{rule, key, 0}]; h != nil && s.sinceBorn()-max(h.slots[0].at, h.slots[1].at) < ownerLostAfter {
		return // answers come, only late (an owner answering thousands of users in turn)
	}
	if len(s.owner.selfViews) < s.cfg.MaxSeen {
		s.owner.selfViews = append(s.owner.selfViews, keyView{rule: rule, key: key, view: OwnerView{Balance: math.NaN()}})
	}
}

// lastHeard is when a contributor was last heard, by counter or touch.
func (sub *ownerSub) lastHeard() time.Duration { return max(sub.heard, sub.seen) }

// countUsersLocked sets o.users, its contributors heard within the users
// window of k (this node included when it uses the key; an aggregator's
// group counts the users it reported, and a user told to go through
// aggregators is counted there, owneragg.go; while users switch to their
// aggregators, no fewer than the contributors heard here), and o.balance,
// the key's balance here. Caller holds s.mu.
func (s *Syncer) countUsersLocked(k aggKey, o *ownedKey, now time.Duration) {
	w := s.usersWindowLocked(k.rule, k.key)
	grouped := len(s.owner.agg.groupSubs[k]) > 0
	n, direct := uint64(0), uint64(0)
	for _, sub := range o.subs {
		if now-sub.lastHeard() <= w {
			n += aggCountsAs(sub, grouped) // owneragg.go
			if sub.agg == nil || !sub.agg.group {
				direct++
			}
		}
	}
	o.users = max(n, direct, 1)
	o.balance = math.NaN()
	if b, ok := s.ledger.(BoundedLedger); ok {
		o.balance, _ = b.Balance(k.rule, k.key)
	}
	o.balance = s.aggBalanceLocked(k, o, o.balance, now) // a group's: the owner's (owneraggbalance.go)
}

// receiveAnswer is receiveAnswerViews without the views.
func (s *Syncer) receiveAnswer(b []byte) ([]charge, error) {
	charges, _, err := s.receiveAnswerViews(b)
	return charges, err
}
