package bucket

import (
	"errors"
	"fmt"
	"hash/maphash"
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

	evictions atomic.Uint64
}

type shard struct {
	mu      sync.Mutex
	buckets map[storeKey]*Bucket
	_       [48]byte // keep shards on separate cache lines
}

type storeKey struct {
	ns  Namespace
	key string
}

// NewStore returns an empty Store bounded by cfg.
func NewStore(cfg StoreConfig) *Store {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.MaxKeyLen <= 0 {
		cfg.MaxKeyLen = DefaultMaxKeyLen
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
	}
	for i := range s.shards {
		s.shards[i].buckets = make(map[storeKey]*Bucket)
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
	if err := s.validate(key, lim, cost); err != nil {
		return Result{}, err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	b := sh.buckets[storeKey{ns, string(key)}]
	if b == nil {
		b = sh.insert(s, ns, key, now)
	}
	r := b.Take(lim, cost, now)
	sh.mu.Unlock()
	return r, nil
}

// Check reports what Take would decide without charging or creating a bucket.
func (s *Store) Check(ns Namespace, key []byte, lim Limit, cost int64, now time.Time) (Result, error) {
	if err := s.validate(key, lim, cost); err != nil {
		return Result{}, err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	var r Result
	if b := sh.buckets[storeKey{ns, string(key)}]; b != nil {
		r = b.Check(lim, cost, now)
	} else {
		var fresh Bucket
		r = fresh.Check(lim, cost, now)
	}
	sh.mu.Unlock()
	return r, nil
}

// Charge subtracts cost from the key's bucket unconditionally (see
// Bucket.Charge), creating the bucket if needed. Unlike Take it accepts costs
// above the burst, up to MaxCost: consumption reported after the fact is real.
func (s *Store) Charge(ns Namespace, key []byte, lim Limit, cost int64, now time.Time) error {
	if err := s.validateKey(key); err != nil {
		return err
	}
	if cost < 1 || cost > MaxCost {
		return fmt.Errorf("%w: %d not in [1, %d]", ErrBadCost, cost, int64(MaxCost))
	}
	sh := s.shard(key)
	sh.mu.Lock()
	b := sh.buckets[storeKey{ns, string(key)}]
	if b == nil {
		b = sh.insert(s, ns, key, now)
	}
	b.Charge(lim, cost, now)
	sh.mu.Unlock()
	return nil
}

// Balance returns the key's balance in tokens, and whether the store holds a
// bucket for it (a key without one is full).
func (s *Store) Balance(ns Namespace, key []byte, lim Limit, now time.Time) (float64, bool) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if b := sh.buckets[storeKey{ns, string(key)}]; b != nil {
		return b.Balance(lim, now), true
	}
	return float64(lim.burst), false
}

// Rescale carries every bucket of namespace ns across a limit change. limits
// returns a key's old and new limit; buckets whose limit did not change are
// left alone. See Bucket.Rescale.
func (s *Store) Rescale(ns Namespace, limits func(key string) (old, new Limit), now time.Time) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, b := range sh.buckets {
			if k.ns == ns {
				old, new := limits(k.key)
				b.Rescale(old, new, now)
			}
		}
		sh.mu.Unlock()
	}
}

// Sweep evicts every bucket that has refilled to full by now and returns how
// many it evicted. Such buckets carry no information: a new bucket is full too.
func (s *Store) Sweep(now time.Time) int {
	evicted := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, b := range sh.buckets {
			if b.IsFull(now) {
				delete(sh.buckets, k)
				evicted++
			}
		}
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
		n += len(sh.buckets)
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

func (s *Store) shard(key []byte) *shard {
	return &s.shards[maphash.Bytes(s.seed, key)&s.mask]
}

// insert adds a full bucket for key, making room first if the shard is at its
// cap. The caller holds sh.mu.
func (sh *shard) insert(s *Store, ns Namespace, key []byte, now time.Time) *Bucket {
	if len(sh.buckets) >= s.shardCap {
		s.evictions.Add(uint64(sh.makeRoom(now)))
	}
	b := new(Bucket)
	sh.buckets[storeKey{ns, string(key)}] = b
	return b
}

// makeRoom evicts from a sample of the shard's buckets every one that is full,
// or if none is, the one nearest to full. It returns how many it evicted.
func (sh *shard) makeRoom(now time.Time) int {
	n := now.UnixNano()
	var victim storeKey
	victimFull := int64(0)
	found, evicted, seen := false, 0, 0
	for k, b := range sh.buckets { // map iteration starts at a random entry
		if b.full <= n {
			delete(sh.buckets, k)
			evicted++
		} else if !found || b.full < victimFull {
			victim, victimFull, found = k, b.full, true
		}
		if seen++; seen == evictSample {
			break
		}
	}
	if evicted == 0 && found {
		delete(sh.buckets, victim)
		evicted = 1
	}
	return evicted
}
