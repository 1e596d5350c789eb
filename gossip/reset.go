package gossip

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// ResetLedger is a Ledger that can clear a key. The syncer calls Reset from
// its own goroutines and from the caller of Syncer.Reset, concurrently with
// decisions and with the Ledger's other methods; it must not block on the
// network.
type ResetLedger interface {
	Ledger
	// Reset makes key full again under the limit named limit, forgetting
	// what was consumed before, and makes every bucket the ledger creates
	// from now on take an epoch above at, so that its counters are told
	// apart from those the reset covers. With olderOnly, it clears the key's
	// bucket only if the bucket's epoch is at most at: the reset is an old
	// one, told again to a member that (re)joined, which must keep what it
	// counted since in a bucket created after the reset (after a restart).
	Reset(limit, key string, at uint64, olderOnly bool)
}

// ErrNoResetLedger is returned by Syncer.Reset when the syncer's ledger cannot
// clear keys.
var ErrNoResetLedger = errors.New("gossip: the ledger cannot reset keys")

// resetRetention is how long a reset is remembered: counters and balances
// it covers are refused meanwhile, and a member that joins or rejoins is
// told of it. It matches how long a member that went away is tried again.
const resetRetention = reconnectGiveUp

// resendBudget bounds one reset message sent to a member that rejoined.
const resendBudget = 256 << 10

// maxResets caps the resets remembered; beyond it the oldest is forgotten.
const maxResets = 4096

type resetKey struct{ limit, key string }

type resetRecord struct {
	at      uint64
	expires time.Time
}

// resetState is the syncer's memory of recent resets. Its map is read on
// every counter received, under Syncer.mu, only when it is not empty.
type resetState struct {
	table  map[resetKey]resetRecord
	latest uint64               // the highest instant of any reset seen
	resend chan memberlist.Node // members to tell of the remembered resets
	// owed are members a reset could not be delivered to; they are told
	// again every ReconnectInterval while alive, until one delivery works.
	owed map[string]memberlist.Node
}

func newResetState() resetState {
	return resetState{table: map[resetKey]resetRecord{}, resend: make(chan memberlist.Node, 64), owed: map[string]memberlist.Node{}}
}

// ResetResult says how far a reset reached.
type ResetResult struct {
	// At is the reset's instant, in Unix nanoseconds.
	At uint64
	// Told is how many other members it was delivered to over TCP (each
	// applies it on receipt); Members is how many other members were alive
	// to tell.
	Told, Members int
	// Failed names the members that could not be told (they learn it when
	// they rejoin; a member that stays up but unreachable keeps its debt).
	Failed []string
}

// Reset clears key under the given limit names on this node and on every
// member: each refills the key and refuses the counters and balances of
// the key's earlier bucket epochs, so consumption from before the reset is
// never charged again, while consumption after it is charged as usual.
//
// The reset's instant is this node's clock, raised above any reset it has
// seen; it is sent to every alive member over TCP, and a member that joins
// or rejoins within resetRetention is told again. A member's consumption
// between the reset and its arrival there is forgiven too (it errs toward
// admitting).
func (s *Syncer) Reset(limits []string, key string) (ResetResult, error) {
	if _, ok := s.ledger.(ResetLedger); !ok {
		return ResetResult{}, ErrNoResetLedger
	}
	s.mu.Lock()
	at := max(uint64(time.Now().UnixNano()), s.resets.latest+1)
	entries := make([]resetEntry, len(limits))
	for i, l := range limits {
		entries[i] = resetEntry{limit: l, key: key, at: at}
	}
	s.mu.Unlock()
	s.applyResets(entries, false)

	s.mu.Lock()
	peers := make([]memberlist.Node, 0, len(s.peers))
	for name, n := range s.peers {
		if name != s.self {
			peers = append(peers, n)
		}
	}
	s.mu.Unlock()
	msg := encodeResets(s.self, entries, false)
	res := ResetResult{At: at, Members: len(peers)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range peers {
		wg.Add(1)
		sem <- struct{}{}
		go func(n *memberlist.Node) {
			defer func() { <-sem; wg.Done() }()
			err := s.list().SendReliable(n, msg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				s.log.Warn("could not tell a member of a reset; it will be told again while it is alive, or when it rejoins", "member", n.Name, "error", err)
				res.Failed = append(res.Failed, n.Name)
				s.oweResets(*n)
				return
			}
			res.Told++
		}(&peers[i])
	}
	wg.Wait()
	return res, nil
}

// applyResets records resets and applies those newer than what is already
// known for their (limit, key): pending counters of the key are dropped, the
// ranges heard of it forgotten, and the ledger refills it (with olderOnly,
// only a bucket the reset covers; see ResetLedger). It returns how many it
// applied.
func (s *Syncer) applyResets(entries []resetEntry, olderOnly bool) int {
	rl, ok := s.ledger.(ResetLedger)
	if !ok {
		return 0
	}
	now := time.Now()
	fresh := make([]resetEntry, 0, len(entries))
	s.mu.Lock()
	for _, e := range entries {
		k := resetKey{e.limit, e.key}
		if r, ok := s.resets.table[k]; ok && r.at >= e.at {
			continue
		}
		if _, ok := s.resets.table[k]; !ok && len(s.resets.table) >= maxResets {
			s.forgetOldestResetLocked()
		}
		s.resets.table[k] = resetRecord{at: e.at, expires: now.Add(resetRetention)}
		s.resets.latest = max(s.resets.latest, e.at)
		for pk := range s.pending {
			if pk.rule == e.limit && pk.key == e.key {
				s.dropPendingLocked(pk)
			}
		}
		for ck := range s.seen {
			if ck.rule == e.limit && ck.key == e.key {
				delete(s.seen, ck)
			}
		}
		fresh = append(fresh, e)
	}
	s.mu.Unlock()
	for _, e := range fresh {
		rl.Reset(e.limit, e.key, e.at, olderOnly)
	}
	s.stats.ResetsApplied.Add(uint64(len(fresh)))
	return len(fresh)
}

// forgetOldestResetLocked drops the reset that expires first. Caller holds s.mu.
func (s *Syncer) forgetOldestResetLocked() {
	var oldest resetKey
	var first time.Time
	for k, r := range s.resets.table {
		if first.IsZero() || r.expires.Before(first) {
			oldest, first = k, r.expires
		}
	}
	delete(s.resets.table, oldest)
}

// staleLocked reports whether a counter (or a balance of that counter's
// bucket) is covered by a reset remembered here: of a reset key, from an
// epoch at or below the reset's instant. Caller holds s.mu.
func (s *Syncer) staleLocked(c Counter) bool {
	if len(s.resets.table) == 0 {
		return false
	}
	r, ok := s.resets.table[resetKey{c.Rule, c.Key}]
	return ok && c.Epoch <= r.at
}

// receiveResets applies a reset message from a peer.
func (s *Syncer) receiveResets(b []byte) {
	sender, entries, resend, err := decodeResets(b)
	if err != nil {
		s.stats.BadPackets.Add(1)
		s.badLog.warn(s.log, s.clock(), "dropped a malformed reset message", "bytes", len(b), "error", err)
		return
	}
	if sender == s.self {
		return
	}
	if n := s.applyResets(entries, resend); n > 0 {
		s.log.Info("keys reset by a peer", "from", sender, "entries", n, "told_again", resend)
	}
}

// pruneResetsLocked forgets expired resets. Caller holds s.mu.
func (s *Syncer) pruneResetsLocked(now time.Time) {
	for k, r := range s.resets.table {
		if now.After(r.expires) {
			delete(s.resets.table, k)
		}
	}
}

// queueResend asks for the remembered resets to be sent to n, if any are
// remembered. It never blocks: memberlist calls it with its lock held.
func (s *Syncer) queueResend(n memberlist.Node) {
	s.mu.Lock()
	empty := len(s.resets.table) == 0
	s.mu.Unlock()
	if empty || n.Name == s.self {
		return
	}
	select {
	case s.resets.resend <- n:
	default: // a burst of joins beyond the queue: those members miss the resend
	}
}

// oweResets remembers that n missed a reset (up to maxOrigins members).
func (s *Syncer) oweResets(n memberlist.Node) {
	s.mu.Lock()
	if len(s.resets.owed) < maxOrigins {
		s.resets.owed[n.Name] = n
	}
	s.mu.Unlock()
}

// retryOwed queues the members owed resets that are alive now for another
// try; those gone are told when they rejoin.
func (s *Syncer) retryOwed() {
	s.mu.Lock()
	var again []memberlist.Node
	for name := range s.resets.owed {
		if n, alive := s.peers[name]; alive {
			again = append(again, n)
		}
	}
	if len(s.resets.table) == 0 {
		clear(s.resets.owed)
	}
	s.mu.Unlock()
	for _, n := range again {
		s.queueResend(n)
	}
}

// resendLoop tells members that joined or rejoined of the resets remembered.
func (s *Syncer) resendLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case n := <-s.resets.resend:
			now := time.Now()
			var entries []resetEntry
			s.mu.Lock()
			for k, r := range s.resets.table {
				if now.Before(r.expires) && len(entries) < maxResetEntries {
					entries = append(entries, resetEntry{limit: k.limit, key: k.key, at: r.at})
				}
			}
			s.mu.Unlock()
			for len(entries) > 0 {
				size, i := 0, 0
				for ; i < len(entries) && size < resendBudget; i++ {
					size += 32 + len(entries[i].limit) + len(entries[i].key)
				}
				if err := s.list().SendReliable(&n, encodeResets(s.self, entries[:i], true)); err != nil {
					s.log.Debug("could not tell a member of the resets", "member", n.Name, "error", err)
					s.oweResets(n)
					break
				}
				entries = entries[i:]
			}
			if len(entries) == 0 {
				s.mu.Lock()
				delete(s.resets.owed, n.Name)
				s.mu.Unlock()
			}
		}
	}
}
