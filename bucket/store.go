package bucket

import (
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

	epochs    atomic.Uint64
	evictions atomic.Uint64
	logs      logBudget
}

// shard is one lock's share of the buckets. Its map is keyed by the 64-bit
// seeded hash of (namespace, key), which the store computes once per request
// to pick the shard anyway: a map keyed by a (namespace, string) struct hashed
// the key a second time with the runtime's generic struct hash and compared
// it field by field, and cost two to three times as much per lookup
// (profiled: hashing and comparing the struct key were a third of a lookup).
// Entries whose hashes collide, which a seeded 64-bit hash makes vanishingly
// rare and unpredictable from outside, are chained through entry.next.
type shard struct {
	mu      sync.Mutex
	buckets map[uint64]*entry
	n       int      // entries held, chained ones included
	dirty   []*entry // entries whose local consumption changed since the last drain
	// leftovers are windows' last consumption not yet drained when their
	// entries moved on to a new window (windowed algorithms only).
	leftovers []Consumption
}

// entry is a key's state, its key, and when the store tracks consumption,
// what gossip needs to know about it. The tracking part lives apart so that
// a store that does not track keeps its entries small. An entry is 64 bytes.
type entry struct {
	st   state
	t    *tracking
	key  string
	ns   Namespace
	algo Algorithm // the algorithm st belongs to
	next *entry    // the next entry with the same hash
}

// stateFor returns the entry's state for lim's algorithm, starting it afresh
// if it belonged to another (a rule whose algorithm changed).
func (e *entry) stateFor(lim Limit) *state {
	if e.algo != lim.algo {
		e.st.log.release()
		e.st, e.algo = state{}, lim.algo
	}
	return &e.st
}

type tracking struct {
	epoch  uint64 // this bucket's incarnation
	window uint64 // the window used counts in (windowed algorithms; 0 for the buckets)
	used   uint64 // tokens admitted here (not charged by peers) in this epoch and window
	sent   uint64 // used, as of the last drain; used != sent means the entry is on the dirty list
}

// get returns the entry of (ns, key), whose hash is h, or nil.
func (sh *shard) get(h uint64, ns Namespace, key []byte) *entry {
	e := sh.buckets[h]
	for e != nil && (e.ns != ns || e.key != string(key)) {
		e = e.next
	}
	return e
}

// remove unlinks e, whose hash is h.
func (sh *shard) remove(h uint64, e *entry) {
	head := sh.buckets[h]
	if head == e {
		if e.next == nil {
			delete(sh.buckets, h)
		} else {
			sh.buckets[h] = e.next
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == e {
				p.next = e.next
				break
			}
		}
	}
	e.next = nil
	e.st.log.release()
	sh.n--
}

// each calls fn for every entry until it returns false. fn may remove the
// entry it is given (and no other).
func (sh *shard) each(fn func(h uint64, e *entry) bool) {
	for h, e := range sh.buckets {
		for e != nil {
			next := e.next
			if !fn(h, e) {
				return
			}
			e = next
		}
	}
}

// record adds local consumption in window (0 for the buckets), putting the
// entry on the dirty list if it was clean. When the entry moves on to a new
// window, what the old one admitted since the last drain is kept as a
// leftover for the next drain, up to maxLeftovers per shard (beyond, it is
// lost to gossip, which errs toward admitting). The caller holds sh.mu.
func (sh *shard) record(e *entry, cost int64, window uint64) {
	t := e.t
	if t.window != window {
		if t.used != t.sent { // on the dirty list, and stays there for the new window
			if len(sh.leftovers) < maxLeftovers {
				sh.leftovers = append(sh.leftovers, Consumption{NS: e.ns, Key: e.key, Epoch: t.epoch, Window: t.window, Used: t.used, Prev: t.sent})
			}
			t.window, t.used, t.sent = window, uint64(cost), 0
			return
		}
		t.window, t.used, t.sent = window, 0, 0
	}
	if t.used == t.sent {
		sh.dirty = append(sh.dirty, e)
	}
	t.used += uint64(cost)
}

// maxLeftovers bounds a shard's leftovers should nothing drain them.
const maxLeftovers = 4096

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
	s.epochs.Store(cfg.EpochBase)
	s.logs.max = cfg.MaxLogBytes
	for i := range s.shards {
		s.shards[i].buckets = make(map[uint64]*entry)
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
	e := sh.get(h, ns, key)
	if e == nil {
		e = sh.insert(s, h, ns, key, lim.algo, now)
	}
	st := e.stateFor(lim)
	switch {
	case lim.algo == AlgoTokenBucket && l == leeway{}:
		r = (*Bucket)(st).Take(lim, cost, now) // the common case, called directly
	case lim.algo == AlgoGCRA && l == leeway{}:
		r = (*GCRA)(st).Take(lim, cost, now)
	case l.maxWait > 0:
		r = st.reserve(lim, cost, l.maxWait, now)
	default:
		r, soft = st.decide(lim, cost, l.overdraft, true, now)
	}
	if r.Allowed && e.t != nil {
		sh.record(e, cost, st.window(lim, now))
	}
	s.attachLog(e)
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
	if e := sh.get(h, ns, key); e != nil {
		r, _ = e.stateFor(lim).decide(lim, cost, 0, false, now)
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
	if e := sh.get(h, ns, key); e != nil {
		r, soft = e.stateFor(lim).decide(lim, cost, overdraft, false, now)
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
	e := sh.get(h, ns, key)
	if e == nil {
		e = sh.insert(s, h, ns, key, lim.algo, now)
	}
	st := e.stateFor(lim)
	st.charge(lim, cost, window, now)
	balance = st.balance(lim, now)
	s.attachLog(e)
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
	if e := sh.get(h, ns, key); e != nil && e.t != nil {
		sh.record(e, cost, e.stateFor(lim).window(lim, now))
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
		for j, e := range sh.dirty {
			t := e.t
			fn(Consumption{NS: e.ns, Key: e.key, Epoch: t.epoch, Window: t.window, Used: t.used, Prev: t.sent})
			t.sent = t.used
			sh.dirty[j] = nil
		}
		sh.dirty = sh.dirty[:0]
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
		sh.each(func(_ uint64, e *entry) bool {
			if e.st.isFull(now) {
				return true
			}
			l, ok := lim(e.ns, e.key)
			if !ok {
				return true
			}
			c := Consumption{NS: e.ns, Key: e.key}
			if e.t != nil {
				c.Epoch, c.Window, c.Used, c.Prev = e.t.epoch, e.t.window, e.t.used, e.t.used
			}
			more = fn(c, l, e.stateFor(l).balance(l, now))
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
	e := sh.get(h, ns, key)
	if e == nil {
		e = sh.insert(s, h, ns, key, lim.algo, now)
	}
	changed := e.stateFor(lim).adopt(lim, window, balance, now)
	s.attachLog(e)
	return changed
}

// Balance returns the key's balance in tokens, and whether the store holds a
// bucket for it (a key without one is full).
func (s *Store) Balance(ns Namespace, key []byte, lim Limit, now time.Time) (float64, bool) {
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.get(h, ns, key); e != nil {
		return e.stateFor(lim).balance(lim, now), true
	}
	return float64(lim.burst), false
}

// Local returns the key's local consumption (what this store admitted in the
// bucket's current epoch), if the store holds a tracked bucket for it.
func (s *Store) Local(ns Namespace, key []byte) (Consumption, bool) {
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.get(h, ns, key); e != nil && e.t != nil {
		return Consumption{NS: ns, Key: e.key, Epoch: e.t.epoch, Window: e.t.window, Used: e.t.used, Prev: e.t.sent}, true
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
		sh.each(func(_ uint64, e *entry) bool {
			if e.ns == ns {
				old, new := limits(e.key)
				if old != new && !old.IsZero() && !new.IsZero() && e.algo == old.algo {
					if old.algo != new.algo {
						e.st.log.release()
					}
					e.st.rescale(old, new, now)
					e.algo = new.algo
					s.attachLog(e)
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
		sh.each(func(h uint64, e *entry) bool {
			if e.st.isFull(now) && (e.t == nil || e.t.used == e.t.sent) {
				sh.remove(h, e)
				evicted++
			} else if e.st.log != nil {
				e.st.log.shrink()
			}
			return true
		})
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

// locate hashes (ns, key) once: the hash picks the shard and is the shard
// map's key.
func (s *Store) locate(ns Namespace, key []byte) (uint64, *shard) {
	h := maphash.Bytes(s.seed, key) ^ (uint64(ns)+1)*0x9E3779B97F4A7C15
	return h, &s.shards[(h^h>>32)&s.mask]
}

// insert adds a full bucket for key, making room first if the shard is at its
// cap. The caller holds sh.mu.
func (sh *shard) insert(s *Store, h uint64, ns Namespace, key []byte, algo Algorithm, now time.Time) *entry {
	var e *entry
	if sh.n >= s.shardCap {
		evicted, spare := sh.makeRoom(now)
		s.evictions.Add(uint64(evicted))
		e = spare
	}
	if e == nil {
		e = &entry{}
	}
	t := e.t
	*e = entry{key: string(key), ns: ns, algo: algo, next: sh.buckets[h]}
	if s.track {
		if t == nil {
			t = &tracking{}
		}
		*t = tracking{epoch: s.epochs.Add(1)}
		e.t = t
	}
	sh.buckets[h] = e
	sh.n++
	return e
}

// makeRoom evicts from a sample of the shard's buckets every one that is full,
// or if none is, the one nearest to full. It returns how many it evicted, and
// an evicted entry the caller may reuse for the new key (nil if each is still
// on the dirty list, where gossip will read it): at the cap, every new key
// would otherwise allocate an entry while one becomes garbage.
func (sh *shard) makeRoom(now time.Time) (evicted int, spare *entry) {
	// The sample is gathered first and its buckets read after: the reads do
	// not depend on each other, so the CPU overlaps their cache misses
	// instead of waiting on each in turn. In a flood of unique keys at the
	// cap, makeRoom was a third of the daemon's CPU, mostly spent waiting on
	// those reads (BenchmarkStoreAtCap: this ordering took 10% off a new key).
	var hashes [evictSample]uint64
	var entries [evictSample]*entry
	seen := 0
	// Only the heads of chains are sampled, so that gathering touches no
	// entry (following a chain would read each one, one miss at a time).
	for h, e := range sh.buckets { // map iteration starts at a random entry
		hashes[seen], entries[seen] = h, e
		if seen++; seen == evictSample {
			break
		}
	}
	var full [evictSample]int64
	for i, e := range entries[:seen] {
		full[i] = e.st.full
	}
	n := now.UnixNano()
	victim := -1
	evict := func(i int) {
		e := entries[i]
		sh.remove(hashes[i], e)
		evicted++
		if spare == nil && (e.t == nil || e.t.used == e.t.sent) {
			spare = e
		}
	}
	for i := range seen {
		if full[i] <= n {
			evict(i)
		} else if victim < 0 || full[i] < full[victim] {
			victim = i
		}
	}
	if evicted == 0 && victim >= 0 {
		evict(victim)
	}
	return evicted, spare
}
