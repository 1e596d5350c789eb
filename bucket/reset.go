package bucket

// Reset forgets the bucket of (ns, key) if its epoch is at most maxEpoch
// (math.MaxUint64: whatever its epoch; a store that does not track
// consumption has no epochs and always forgets it), so the key is full
// again, as a key never seen is. It reports whether it forgot one. What the
// bucket had admitted but not yet drained is forgiven, not reported:
// DrainDirty will not hand it to gossip. The next request for the key
// creates a new bucket, with a new epoch.
func (s *Store) Reset(ns Namespace, key []byte, maxEpoch uint64) bool {
	if s.validateKey(key) != nil {
		return false
	}
	h, sh := s.locate(ns, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := find(sh, h, ns, key)
	if !ok {
		return false
	}
	if s.track {
		t := sh.slots[i].tracked()
		if t.epoch > maxEpoch {
			return false
		}
		t.sent = t.used // still on the dirty list, but with nothing to report
	}
	sh.removeAt(i)
	return true
}

// RaiseEpochs makes every bucket created from now on take an epoch above
// floor (it never lowers them). A cluster-wide reset raises every member's
// epochs above its instant, so counters of buckets created after the reset
// are told apart from those of buckets it cleared.
func (s *Store) RaiseEpochs(floor uint64) {
	for {
		cur := s.epochs.Load()
		if cur >= floor || s.epochs.CompareAndSwap(cur, floor) {
			return
		}
	}
}
