package bucket

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Namespace separates keys of different rules in one Store: the daemon gives
// every rule name a Namespace, so "alice" under two rules is two buckets.
type Namespace uint32

// Errors returned by Store for requests it refuses to decide. They change nothing.
var (
	ErrEmptyKey   = errors.New("empty key")
	ErrKeyTooLong = errors.New("key too long")
	ErrBadCost    = errors.New("cost out of range")
)

// StoreConfig bounds a Store. Zero fields take the defaults documented on each.
type StoreConfig struct {
	// MaxKeys caps the buckets held across all shards. Default 1,048,576.
	MaxKeys int
	// MaxKeyLen caps a key's length in bytes. Default 256.
	MaxKeyLen int
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Default: 8 × GOMAXPROCS, at least 16.
	Shards int
	// TrackConsumption makes Take record, per bucket, the tokens it admitted,
	// and keep a list of buckets whose count changed, for DrainDirty to hand
	// to gossip. Leave it off when nothing drains the list.
	TrackConsumption bool
	// MaxLogBytes caps the bytes sliding logs hold beyond each log's first
	// entry, across the store (see logbudget.go). Default DefaultMaxLogBytes.
	MaxLogBytes int64
	// EpochBase seeds bucket epochs: each bucket created gets the next number
	// above it, so a bucket evicted and created again is told apart from its
	// predecessor. A daemon passes its start time in nanoseconds, so epochs
	// also grow across restarts.
	EpochBase uint64
	// Seed seeds the store's rounding of shares below one token (share.go).
	// Stores of one cluster should have different seeds; 0 takes EpochBase.
	Seed uint64
	// FirstContact is how a new bucket's share of the burst is counted
	// during its first-contact hold (firstshare.go). Default
	// FirstContactAuto: the share of the rule's crowd (crowd.go).
	FirstContact FirstContact
}

// Defaults for StoreConfig's zero fields.
const (
	DefaultMaxKeys   = 1 << 20
	DefaultMaxKeyLen = 256
)

// evictSample is how many entries a full shard examines to pick a victim.
const evictSample = 8

// Store maps (namespace, key) to buckets. It is safe for concurrent use: keys
// are spread over shards by hash, each with its own lock, so parallel callers
// on different keys rarely contend.
//
// Memory is bounded. A key longer than MaxKeyLen is refused. Each shard holds
// at most MaxKeys/Shards buckets; when a new key arrives at a full shard, the
// shard first drops buckets that have refilled to full (they hold no state a
// fresh bucket would not), and failing that evicts, from a random sample of
// its buckets, the one nearest to full. The new key is then decided on a fresh,
// full bucket like any other new key. A flood of unique keys therefore churns
// through the least indebted buckets while clients in debt keep theirs.
//
// Store never retains the key slices it is given; it copies a key when it
// creates its bucket.
type Store struct {
	shards    []shard
	mask      uint64
	seed      maphash.Seed
	maxKeyLen int
	shardCap  int
	track     bool
	// firstContact: StoreConfig.FirstContact (firstshare.go).
	firstContact FirstContact
	// crowds: what the owners said of each rule's keys at first contact
	// (crowd.go, FirstContactAuto).
	crowds crowdTable

	epochs    atomic.Uint64
	evictions atomic.Uint64
	// firstMembers and firstHold hold new buckets to a share of their
	// burst (see firstshare.go).
	firstMembers, firstHold atomic.Int64
	coinSeed                uint64 // see share.go
	maxViews                int    // per shard (views.go)
	logs                    logBudget
}

// shard is one lock's share of the keys, in an open-addressing table whose
// slots hold each key's state inline (see table.go).
type shard struct {
	mu    sync.Mutex
	slots []slot
	n     int        // slots held
	dirty []dirtyKey // keys whose local consumption changed since the last drain
	// leftovers are windows' last consumption not yet drained when their
	// keys moved on to a new window (windowed algorithms only).
	leftovers []Consumption
	// views are the owner's views of the shard's keys that have one (views.go).
	views viewTable
}

// record adds local consumption in window (0 for the buckets), putting the
// entry on the dirty list if it was clean. When the entry moves on to a new
// window, what the old one admitted since the last drain is kept as a
// leftover for the next drain, up to maxLeftovers per shard (beyond, it is
// lost to gossip, which errs toward admitting). The store tracks
// consumption, and the caller holds sh.mu.
func (sh *shard) record(sl *slot, cost int64, window uint64) {
	t := sl.tracked()
	if t.window != window {
		if t.used != t.sent { // on the dirty list, and stays there for the new window
			if len(sh.leftovers) < maxLeftovers {
				sh.leftovers = append(sh.leftovers, Consumption{NS: sl.ns, Key: sl.key(), Epoch: t.epoch, Window: t.window, Used: t.used, Prev: sentOf(t)})
			}
			t.window, t.used, t.sent = window, uint64(cost), 0
			return
		}
		t.window, t.used, t.sent = window, 0, 0
	}
	if t.used == t.sent {
		sh.dirty = append(sh.dirty, dirtyKey{p: sl.p, ns: sl.ns, size: uint32(sl.keyLen())})
	}
	t.used += uint64(cost)
}

// maxLeftovers bounds a shard's leftovers should nothing drain them.
const maxLeftovers = 4096

// maxIdleDirty is the longest dirty list a shard keeps the room of once
// drained (8 KiB of dirtyKey): a burst of new keys grows the list, and its
// room goes back.
const maxIdleDirty = 512

// NewStore returns an empty Store bounded by cfg.
func NewStore(cfg StoreConfig) *Store {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.MaxKeyLen <= 0 {
		cfg.MaxKeyLen = DefaultMaxKeyLen
	}
	if cfg.MaxLogBytes <= 0 {
		cfg.MaxLogBytes = DefaultMaxLogBytes
	}
	if cfg.Shards <= 0 {
		cfg.Shards = max(16, 8*runtime.GOMAXPROCS(0))
	}
	n := 1 << bits.Len(uint(cfg.Shards-1))
	n = min(n, cfg.MaxKeys) // at least one key per shard
	n = 1 << (bits.Len(uint(n)) - 1)
	s := &Store{
		shards:    make([]shard, n),
		mask:      uint64(n - 1),
		seed:      maphash.MakeSeed(),
		maxKeyLen: cfg.MaxKeyLen,
		shardCap:  (cfg.MaxKeys + n - 1) / n,
		track:     cfg.TrackConsumption,
	}
	s.firstContact = cfg.FirstContact
	s.epochs.Store(cfg.EpochBase)
	s.logs.max = cfg.MaxLogBytes
	s.coinSeed = mix64(cmp.Or(cfg.Seed, cfg.EpochBase) ^ 0x243f6a8885a308d3)
	s.maxViews = maxViewsFor(s.shardCap)
	for i := range s.shards {
		s.shards[i].slots = make([]slot, minTable)
	}
	return s
}

// MaxKeyLen is the longest key the store accepts.
func (s *Store) MaxKeyLen() int { return s.maxKeyLen }

// Capacity is the most buckets the store holds.
func (s *Store) Capacity() int { return s.shardCap * len(s.shards) }

// Take admits and charges a request of the given cost on the key's bucket if
// its balance covers the cost (see Bucket.Take). It errors, changing nothing,
// when the key is empty or too long or cost is outside [1, lim.Burst()].
func (s *Store) Take(ns Namespace, key []byte, lim Limit, cost int64, now time.Time) (Result, error) {
	r, _, err := s.take(ns, key, lim, cost, leeway{}, now)
	return r, err
}

// TakeOverdraft is Take with a soft margin of overdraft tokens below zero
// (see Bucket.TakeOverdraft); soft reports that the margin was used.
func (s *Store) TakeOverdraft(ns Namespace, key []byte, lim Limit, cost, overdraft int64, now time.Time) (r Result, soft bool, err error) {
	return s.take(ns, key, lim, cost, leeway{overdraft: overdraft}, now)
}

// Reserve is Take for a caller willing to wait up to maxWait (see
// Bucket.Reserve): an allowed result with a positive RetryAfter means "go
// ahead after waiting that long; your tokens are taken".
func (s *Store) Reserve(ns Namespace, key []byte, lim Limit, cost int64, maxWait time.Duration, now time.Time) (Result, error) {
	r, _, err := s.take(ns, key, lim, cost, leeway{maxWait: maxWait}, now)
	return r, err
}

// leeway is how a take may admit beyond the balance: by reserving a later
// turn, or by going a margin below zero. The zero leeway is a plain Take.
type leeway struct {
	maxWait   time.Duration
	overdraft int64
}

func (s *Store) take(ns Namespace, key []byte, lim Limit, cost int64, l leeway, now time.Time) (r Result, soft bool, err error) {
	if err := s.validate(key, lim, cost); err != nil {
		return Result{}, false, err
	}
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	sl := sh.getOrInsert(s, h, ns, key, lim.algo, now)
	st := sl.stateFor(lim)
	if _, held := st.heldSince(); held && s.track && !lim.algo.Windowed() {
		if held, wait := s.heldBack(ns, st, sl.tracked(), lim, cost, now); held {
			sh.touch(sl, lim) // ask for the cluster's view of the key (share.go)
			r, _ = st.decide(lim, cost, 0, false, now)
			r.Allowed, r.RetryAfter = false, max(r.RetryAfter, wait)
			sh.mu.Unlock()
			return r, false, nil
		}
	}
	var v view
	viewed := false
	if s.track && l.maxWait == 0 && len(sh.views.m) > 0 && !lim.algo.Windowed() {
		v, viewed = sh.views.fresh(sl.tracked().epoch, now)
	}
	switch {
	case viewed: // this node's share of the owner's view decides (share.go)
		r, _ = st.decide(lim, cost, 0, false, now)
		if s.shareDecides(v, sl.tracked(), lim, cost, now) {
			st.charge(lim, cost, 0, now)
			r.Allowed, r.RetryAfter = true, 0
		} else {
			r.Allowed, r.RetryAfter = false, max(r.RetryAfter, time.Duration(float64(cost)*lim.nanosPerToken))
		}
	case lim.algo == AlgoTokenBucket && l == leeway{}:
		r = (*Bucket)(st).Take(lim, cost, now) // the common case, called directly
	case lim.algo == AlgoGCRA && l == leeway{}:
		r = (*GCRA)(st).Take(lim, cost, now)
	case l.maxWait > 0:
		r = st.reserve(lim, cost, l.maxWait, now)
	default:
		r, soft = st.decide(lim, cost, l.overdraft, true, now)
	}
	if s.track {
		f, floored := s.clusterFloor(), true
		if viewed {
			f, floored = s.viewFloor(v, sl.tracked(), lim) // share.go
		}
		if !floored {
			floorAside(st, lim, int64(v.users), now) // floor.go
		}
		if !r.Allowed && l.maxWait == 0 && floored && s.floorAdmits(st, lim, s.floorBalance(v, viewed, st, sl.tracked(), lim, now), f, now) {
			st.charge(lim, cost, 0, now) // below its fair floor: admitted, charged all the same
			r = Result{Allowed: true, Limit: r.Limit, ResetAfter: r.ResetAfter}
		}
		if r.Allowed {
			if floored {
				s.advanceFloor(st, lim, cost, f, now)
			}
			sh.record(sl, cost, st.window(lim, now))
		} else if s.firstMembers.Load() > 1 {
			sh.touch(sl, lim) // keeps this node hearing of a key it is refused (share.go)
		}
	}
	s.attachLog(sl)
	sh.mu.Unlock()
	return r, soft, nil
}

// Check reports what Take would decide without charging or creating a bucket.
func (s *Store) Check(ns Namespace, key []byte, lim Limit, cost int64, now time.Time) (Result, error) {
	if err := s.validate(key, lim, cost); err != nil {
		return Result{}, err
	}
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	var r Result
	if sl := sh.get(h, ns, key); sl != nil {
		r, _ = sl.stateFor(lim).decide(lim, cost, 0, false, now)
	} else {
		var fresh state
		r, _ = fresh.decide(lim, cost, 0, false, now)
	}
	sh.mu.Unlock()
	return r, nil
}

// CheckOverdraft reports what TakeOverdraft would decide, without charging
// or creating a bucket.
func (s *Store) CheckOverdraft(ns Namespace, key []byte, lim Limit, cost, overdraft int64, now time.Time) (r Result, soft bool, err error) {
	if err := s.validate(key, lim, cost); err != nil {
		return Result{}, false, err
	}
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	if sl := sh.get(h, ns, key); sl != nil {
		r, soft = sl.stateFor(lim).decide(lim, cost, overdraft, false, now)
	} else {
		var fresh state
		r, soft = fresh.decide(lim, cost, overdraft, false, now)
	}
	sh.mu.Unlock()
	return r, soft, nil
}

// Charge subtracts cost from the key's state unconditionally (see
// Limiter.Charge), creating it if needed. Unlike Take it accepts costs
// above the burst, up to MaxCost: consumption reported after the fact is real.
// It returns the balance after the charge.
func (s *Store) Charge(ns Namespace, key []byte, lim Limit, cost int64, now time.Time) (balance float64, err error) {
	return s.ChargeWindow(ns, key, lim, cost, 0, now)
}

// ChargeWindow is Charge for consumption a peer reports in a given window (as
// Consumption.Window numbers them; 0 means the current one, and is all the
// buckets know). A windowed algorithm counts it in that window, or drops it
// if the window no longer matters.
func (s *Store) ChargeWindow(ns Namespace, key []byte, lim Limit, cost int64, window uint64, now time.Time) (balance float64, err error) {
	if err := s.validateKey(key); err != nil {
		return 0, err
	}
	if cost < 1 || cost > MaxCost {
		return 0, fmt.Errorf("%w: %d not in [1, %d]", ErrBadCost, cost, int64(MaxCost))
	}
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	sl := sh.getOrInsert(s, h, ns, key, lim.algo, now)
	st := sl.stateFor(lim)
	st.charge(lim, cost, window, now)
	balance = st.balance(lim, now)
	s.attachLog(sl)
	sh.mu.Unlock()
	return balance, nil
}

// Record notes that cost tokens were admitted locally on the key's state at
// now, after the fact (a multi-check charged with Charge): gossip then
// reports them like tokens admitted by Take. It is a no-op unless
// TrackConsumption is set or when the key holds no state.
func (s *Store) Record(ns Namespace, key []byte, lim Limit, cost int64, now time.Time) {
	if !s.track || cost < 1 {
		return
	}
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	if sl := sh.get(h, ns, key); sl != nil {
		sh.record(sl, cost, sl.stateFor(lim).window(lim, now))
	}
	sh.mu.Unlock()
}

// Consumption is one bucket's locally admitted tokens, as gossip reports them.
type Consumption struct {
	NS     Namespace
	Key    string
	Epoch  uint64 // the bucket's incarnation
	Window uint64 // the window Used counts in, for windowed algorithms (1 and up, later is larger); 0 for the buckets
	Used   uint64 // tokens admitted locally in this epoch and window, cumulative
	Prev   uint64 // Used as of the previous drain (0 for a new epoch or window)
}

// DrainDirty calls fn for every bucket whose local consumption changed since
// the last drain, and marks them clean. fn runs under a shard lock and must
// be quick. Buckets evicted since they changed are reported too: their
// consumption happened.
func (s *Store) DrainDirty(fn func(Consumption)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for j, c := range sh.leftovers {
			fn(c)
			sh.leftovers[j] = Consumption{}
		}
		sh.leftovers = sh.leftovers[:0]
		for j := range sh.dirty {
			d := &sh.dirty[j]
			t := d.tracking()
			fn(Consumption{NS: d.ns, Key: d.key(), Epoch: t.epoch, Window: t.window, Used: t.used, Prev: sentOf(t)})
			t.sent = t.used // and a touch's mark cleared
			sh.dirty[j] = dirtyKey{}
		}
		sh.dirty = sh.dirty[:0]
		if cap(sh.dirty) > maxIdleDirty {
			sh.dirty = nil // a burst of new keys' list is not kept for good
		}
		sh.mu.Unlock()
	}
}

// Snapshot calls fn for every bucket that is not full at now and whose limit
// lim knows, with its local consumption, that limit and its balance, until fn
// returns false. fn runs under a shard lock and must be quick.
func (s *Store) Snapshot(now time.Time, lim func(ns Namespace, key string) (Limit, bool), fn func(c Consumption, lim Limit, balance float64) bool) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		more := true
		sh.each(func(_ int, sl *slot) bool {
			if sl.st.isFull(now) {
				return true
			}
			key := sl.key()
			l, ok := lim(sl.ns, key)
			if !ok {
				return true
			}
			c := Consumption{NS: sl.ns, Key: key}
			if s.track {
				t := sl.tracked()
				c.Epoch, c.Window, c.Used, c.Prev = t.epoch, t.window, t.used, t.used
			}
			more = fn(c, l, sl.stateFor(l).balance(l, now))
			return more
		})
		sh.mu.Unlock()
		if !more {
			return
		}
	}
}

// Adopt lowers the key's balance to the one a peer reports, if the peer's
// is lower (or the key holds no bucket), so a daemon that restarted, joined
// late or missed packets learns the debts it does not know of. Each view of
// a balance counts a subset of the consumption that really happened, so the
// lower one is the better estimate, and taking it never counts a token
// twice. It reports whether it changed anything.
//
// window is the window the peer's balance is for (see Consumption.Window): a
// windowed algorithm takes a balance of its current window only.
func (s *Store) Adopt(ns Namespace, key []byte, lim Limit, window uint64, balance float64, now time.Time) bool {
	if s.validateKey(key) != nil || balance >= float64(lim.burst) || math.IsNaN(balance) {
		return false
	}
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sl := sh.getOrInsert(s, h, ns, key, lim.algo, now)
	st := sl.stateFor(lim)
	if _, held := st.heldSince(); held && s.track && !lim.algo.Windowed() {
		st.setShareClock(0) // a peer's view of the key: no first-share hold (see firstshare.go)
	}
	changed := st.adopt(lim, window, balance, now)
	s.attachLog(sl)
	return changed
}

// Balance returns the key's balance in tokens, and whether the store holds a
// bucket for it (a key without one is full).
func (s *Store) Balance(ns Namespace, key []byte, lim Limit, now time.Time) (float64, bool) {
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sl := sh.get(h, ns, key); sl != nil {
		return sl.stateFor(lim).balance(lim, now), true
	}
	return float64(lim.burst), false
}

// Local returns the key's local consumption (what this store admitted in the
// bucket's current epoch), if the store holds a tracked bucket for it.
func (s *Store) Local(ns Namespace, key []byte) (Consumption, bool) {
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sl := sh.get(h, ns, key); sl != nil && s.track {
		t := sl.tracked()
		return Consumption{NS: ns, Key: sl.key(), Epoch: t.epoch, Window: t.window, Used: t.used, Prev: sentOf(t)}, true
	}
	return Consumption{}, false
}

// Rescale carries every bucket of namespace ns across a limit change. limits
// returns a key's old and new limit; buckets whose limit did not change are
// left alone. See Bucket.Rescale.
func (s *Store) Rescale(ns Namespace, limits func(key string) (old, new Limit), now time.Time) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.each(func(_ int, sl *slot) bool {
			if sl.ns == ns {
				old, new := limits(sl.key())
				if old != new && !old.IsZero() && !new.IsZero() && sl.algo() == old.algo {
					if old.algo != new.algo {
						sl.st.log.release()
					}
					sl.st.rescale(old, new, now)
					sl.setAlgo(new.algo)
					s.attachLog(sl)
				}
			}
			return true
		})
		sh.mu.Unlock()
	}
}

// Sweep evicts every bucket that has refilled to full by now and returns how
// many it evicted. Such buckets carry no information: a new bucket is full too.
// It also shrinks sliding logs that hold far more room than entries, giving
// the room back to the log budget.
func (s *Store) Sweep(now time.Time) int {
	evicted := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.each(func(i int, sl *slot) bool {
			if sl.st.isFull(now) && (!s.track || sl.tracked().used == sl.tracked().sent) {
				sh.removeAt(i)
				evicted++
			} else if sl.st.log != nil {
				sl.st.log.shrink()
			}
			return true
		})
		sh.shrink()
		sh.views.expire(now)
		sh.mu.Unlock()
	}
	s.evictions.Add(uint64(evicted))
	return evicted
}

// Len returns the number of buckets held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns the number of buckets evicted since the store was made,
// by Sweep or to make room under the cap.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

func (s *Store) validateKey(key []byte) error {
	switch {
	case len(key) == 0:
		return ErrEmptyKey
	case len(key) > s.maxKeyLen:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLong, len(key), s.maxKeyLen)
	}
	return nil
}

func (s *Store) validate(key []byte, lim Limit, cost int64) error {
	if err := s.validateKey(key); err != nil {
		return err
	}
	if cost < 1 || cost > lim.burst {
		return fmt.Errorf("%w: %d not in [1, burst %d]", ErrBadCost, cost, lim.burst)
	}
	return nil
}

// locate hashes (ns, key) once: the hash's high half picks the shard, its
// low half the home slot in the shard's table, and it is kept in the slot
// (never 0, which marks an empty slot).
func (s *Store) locate(ns Namespace, key []byte) (uint64, *shard) {
	h := maphash.Bytes(s.seed, key) ^ (uint64(ns)+1)*0x9E3779B97F4A7C15 | 1
	return h, &s.shards[(h>>32)&s.mask]
}
