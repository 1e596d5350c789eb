package gossip

import (
	"cmp"
	"time"
)

// A failover charges once.
//
// While a node is failed over (ownerfailover.go) its counters go to the
// key's owner and to its replica, and both count them; the replica's
// answers charge this node what the failed-over nodes consumed, and the
// owner's, once they come again, charge it all it counted meanwhile: the
// same consumption a second time. A loaded machine makes owners late
// often (a stalled owner is late by more than ownerFailover rounds), and
// each failover left every node that heard both answers charged what the
// cluster consumed while it lasted once more: it admitted less, and its
// balance fell so far below the owner's that the owner's honest views were
// cut as suspicious (ownerviewbound.go), as an in-process cluster of 50
// under load once showed (every node clamped the owner's and the
// replica's reports; it admitted 86% of the limit with the load offered).
// Five bare syncers with their owner 100 rounds late were charged 903
// tokens for the others' 600 (TestLateOwnerFailoverChargesOnce).
//
// So a node that failed a key over charges, from the replica's first
// answer on (on the replica itself: from its aggregate's first charge
// after the owner's answers stopped for half the failover's rounds), the larger of what the owner's and what the
// replica's answers carry since then, not their sum: the owner counts everything a failed-over node
// sends the replica (it is sent to both, and only the owner acknowledges
// it), so its answers cover the replica's, and until they come the
// replica's charge the node as before. An owner that is really dead never
// answers again: the replica's answers are charged whole, as before, also
// once the ring makes the replica the owner (each sender's answers are
// summed under its own name). A node that did not fail the key over
// charges both whole, as before: its replica's answers are then an
// earlier owner's after a membership change, another account. The pair ends when the ring names neither
// as the key's owner or replica, or once the replica has been silent for a
// subscription's TTL; a failover of this node's is one pair, made by the
// first answer of either after it began, that its next failover starts
// anew (ownerchargelate.go). A pair this node did not fail over for (the
// replica's own aggregate) also ends when the owner answers again with its
// sum caught up, or once the replica has been silent for an active TTL and
// the owner has charged at least as much: later answers charge whole.
// What the replica charged beyond the owner's answers is never taken back
// (its fresh aggregate's first answers may carry what the owner had
// answered already): a failover still errs toward charging more, by that
// much at most, where it charged the whole failover twice.

// replicaChargeLocked is chargeOnceLocked for what this node's own
// aggregate of k charges it when it is the key's replica (or third): the
// failed-over nodes' counters, counted from origin, which the owner counts
// too and charges it in its answers, and the debts its young aggregate
// learns (ownerlearnpair.go, origin ""). at is when what charges was sent,
// on this node's clock (stamp.go's originTimeLocked). Caller holds s.mu.
func (s *Syncer) replicaChargeLocked(origin string, k aggKey, tokens uint64, at, now time.Duration) uint64 {
	if tokens == 0 {
		return 0
	}
	owner, replica := s.owner.ring.owners(k.rule, k.key)
	if owner == s.self || replica != s.self && !s.thirdHereLocked(k) { // the third counts as the replica does (ownerchain.go)
		return tokens
	}
	if s.aggEchoLocked(k, now) != "" {
		return s.countedChargeLocked(k, origin, tokens, now) // it hears the key through an aggregator (owneraggreplica.go)
	}
	third := ""
	if replica != s.self {
		third = s.self // the third counts the failed-over counters (ownerchain.go)
	}
	return s.chargeChainLocked(k, s.self, owner, replica, third, tokens, at, now)
}

// ownerLateLocked reports whether owner is late to this node for key k:
// this node failed k over from it, or, when sender is this node (the
// replica counting the failed-over nodes' counters, whose own counters
// may fail over a little later or never), owner had sent this node no
// answer of k for half the failover's rounds when the counters were sent
// (sent, on this node's clock). Otherwise counters and answers of the
// replica come from an earlier owner after a membership change. Caller
// holds s.mu.
//
// The replica judges by when the owner's answers and the counters were
// sent, not when they reached it: a starved replica handles what queued
// while it did not run all at once, the owner's answers sent before its
// stall with the counters the failed-over nodes sent during it, and
// judged by arrival the owner had just answered: the replica's aggregate
// was charged whole, on top of the owner's answers carrying the same
// consumption (ten bare syncers with random stalls: the replica charged
// up to 313 tokens over the others' 5,400, TestStarvedReplicaChargesOnce).
func (s *Syncer) ownerLateLocked(k aggKey, sender, owner string, sent time.Duration) bool {
	if f, ok := s.owner.failover[[2]string{k.rule, k.key}]; ok && f.owner == owner {
		return true // failed over now, or lately
	}
	h := s.owner.heard[k]
	if sender != s.self || h == nil {
		return false
	}
	last := time.Duration(-1)
	for _, sl := range h.slots {
		if sl.owner == owner {
			last = max(last, cmp.Or(sl.sent, sl.at))
		}
	}
	return last >= 0 && sent-last >= ownerFailover/2*s.cfg.GossipInterval
}

// noteAnswerSentLocked keeps in the heard slot of sender's answer (gen)
// when the latest of its answers was sent: its stamp sentAt placed on this
// node's clock as a member's counters are (stamp.go, originTimeLocked:
// never ahead of this node's clock), ownerLateLocked's measure. Caller
// holds s.mu.
func (s *Syncer) noteAnswerSentLocked(k aggKey, sender string, gen, sentAt uint64) {
	h := s.owner.heard[k]
	if h == nil {
		return
	}
	for i := range h.slots {
		if sl := &h.slots[i]; sl.owner == sender && sl.gen == gen {
			sl.sent = max(sl.sent, s.originTimeLocked(sender, sentAt, uint64(max(0, s.clock().UnixNano()))))
		}
	}
}

// failingOverLocked reports whether this node's counters of k go to the
// replica now, owner not having answered since (ownerfailover.go). Caller
// holds s.mu.
func (s *Syncer) failingOverLocked(k aggKey, owner string) bool {
	f, ok := s.owner.failover[[2]string{k.rule, k.key}]
	return ok && f.owner == owner && f.ended == 0
}

// chargePairs holds the keys this node failed over lately, each with its
// pair of senders; at most MaxSeen, swept once per subscription's TTL.
type chargePairs struct {
	m     map[aggKey]*chargePair
	swept time.Duration // since born
	echo  echoPairs     // the replica's counting and its aggregator's answers (owneraggreplica.go)
}

// chargePair is what two senders' answers of one key charged since the
// replica first answered: a is the key's owner then, b its replica.
type chargePair struct {
	a, b       string
	sumA, sumB uint64
	lastB      time.Duration // the replica's (or the third's) last answer, since born
	failover   uint64        // the failover of this node it accounts (failoverOfLocked), 0: none (ownerchargelate.go)
	// c is the key's third member once this node failed the key over to
	// it, and sumC what its answers charged since (ownerchain.go): the
	// owner's and the replica's aggregates count all it counts.
	// baseB is sumB when the third first answered: the third counts this
	// node's counters from where the replica counted them (chainCounter),
	// so its sum continues the replica's from there.
	c           string
	sumC, baseB uint64
}

// most is the largest of the pair's accounts: the owner's, the replica's,
// and the replica's up to the third's first answer with the third's since.
func (p *chargePair) most() uint64 { return max(p.sumA, p.sumB, p.baseB+p.sumC) }

// chargeOnceLocked returns what of tokens, charged by sender's answer of k,
// this node charges: during a failover, only what lifts the larger of the
// owner's and the replica's sums since the failover began (on the replica:
// since the replica's aggregate first charged it). owner
// and replica are the key's on the ring now; sent is when what charges
// was sent (now for an answer, ownerLateLocked). Caller holds s.mu.
func (s *Syncer) chargeOnceLocked(k aggKey, sender, owner, replica string, tokens uint64, sent, now time.Duration) uint64 {
	return s.chargeChainLocked(k, sender, owner, replica, s.chainThirdLocked(k), tokens, sent, now)
}

// chargeChainLocked is chargeOnceLocked with the key's third member whose
// answers (or, when it is this node, counting) pair with the owner's and
// the replica's ("": none; ownerchain.go). Caller holds s.mu.
func (s *Syncer) chargeChainLocked(k aggKey, sender, owner, replica, third string, tokens uint64, sent, now time.Duration) uint64 {
	p := s.owner.pairs.m[k]
	moved := owner != "" && (p != nil && (p.a != owner && p.a != replica || p.b != owner && p.b != replica)) // "": no ring now
	if moved {
		delete(s.owner.pairs.m, k) // the ring moved the key: a new account
		p = nil
	}
	if third == owner || third == replica {
		third = ""
	}
	fo := s.failoverOfLocked(k, owner, replica) // ownerchargelate.go
	if p != nil && fo != 0 && p.failover != fo {
		// Another failover of this node: a new account, keeping what the
		// replica's (and the third's) accounts told above the owner's.
		most := p.most()
		*p = chargePair{a: p.a, b: p.b, sumB: most - min(p.sumA, most), lastB: p.lastB, failover: fo}
	}
	if p == nil && fo != 0 && (sender == owner || sender == replica || third != "" && sender == third) && replica != s.self {
		p = s.newFailoverPairLocked(k, owner, replica, fo, now) // ownerchargelate.go
	}
	if p == nil {
		if sender != replica && (third == "" || sender != third) || sender == owner {
			return tokens
		}
		if !s.ownerLateLocked(k, sender, owner, sent) {
			return tokens // the replica is an earlier owner, its aggregate another account (a membership change)
		}
		if p = s.newPairLocked(k, chargePair{a: owner, b: replica}, now); p == nil {
			return tokens
		}
	}
	if third != "" && sender == third && p.c != third {
		base := p.sumB // the third answers from now
		if p.c != "" {
			base = p.baseB + p.sumC // the chain walked on: its sum continues the last member's (ownerchainwalk.go)
		}
		p.c, p.baseB, p.sumC = third, base, 0
	}
	before := p.most()
	switch {
	case sender == p.a:
		p.sumA += tokens
	case sender == p.b:
		p.sumB += tokens
		p.lastB = now
	case sender == p.c && p.c != "":
		p.sumC += tokens
		p.lastB = now
	default:
		return tokens
	}
	charge := p.most() - before
	// A pair not of this node's failover (the replica's own aggregate):
	// the owner answering again, this node no longer failed over from it,
	// with the owner's sum caught up ends it, and a later failover starts a
	// pair of its own (a pair kept from the last one would swallow the next
	// replica's answers up to the owner's sum: nodes charged nothing of a
	// second failover while it lasts). A failover's pair lasts while its
	// replica (or third) may answer; the next failover starts it anew (above).
	caughtUp := sender == p.a && p.sumA >= p.most() && !s.failingOverLocked(k, p.a)
	if quiet := now - p.lastB; quiet > s.subTTL() || p.failover == 0 && (caughtUp || quiet > s.activeTTL() && p.sumA >= p.most()) {
		delete(s.owner.pairs.m, k)
	}
	return charge
}

// newPairLocked keeps pair as k's and returns it, nil when MaxSeen pairs
// are kept: at most once a subscription's TTL it first forgets the pairs of
// keys no longer answered. Caller holds s.mu.
func (s *Syncer) newPairLocked(k aggKey, pair chargePair, now time.Duration) *chargePair {
	if now-s.owner.pairs.swept > s.subTTL() {
		s.owner.pairs.swept = now
		sweepIdle(s.owner.pairs.m, now, s.subTTL(), func(p *chargePair) time.Duration { return p.lastB })
	}
	if len(s.owner.pairs.m) >= s.cfg.MaxSeen {
		return nil
	}
	if s.owner.pairs.m == nil {
		s.owner.pairs.m = map[aggKey]*chargePair{}
	}
	p := &pair
	s.owner.pairs.m[k] = p
	return p
}
