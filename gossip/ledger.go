package gossip

// Ledger is the daemon's side of gossip: its buckets, addressed by rule name
// and key. All methods are called from the syncer's goroutines, concurrently
// with decisions and with each other, and must be safe for that; none may
// block on the network.
//
// For windowed algorithms (fixed window, sliding window counter, sliding
// log) a counter names the window it counts, and Charge and Adopt pass it
// on: the ledger charges the named window, or drops consumption of a window
// that no longer matters (one its algorithm has already left behind). For
// bucket algorithms the window is always 0.
type Ledger interface {
	// Drain reports this daemon's own consumption that changed since the
	// last call: per key, the bucket's epoch (and window, for windowed
	// rules), the cumulative tokens admitted locally in that epoch and
	// window, and the value at the previous drain.
	Drain(fn func(c Counter))
	// Charge applies tokens a peer admitted for key under rule in window (0
	// for bucket algorithms), letting the balance go negative. Keys of rules
	// this daemon does not know are ignored.
	Charge(rule, key string, window, tokens uint64)
	// Snapshot lists this daemon's own counters and the balances of keys that
	// are not full, for push-pull, until fn returns false.
	Snapshot(fn func(c Counter, balance float64) bool)
	// Adopt lowers a key's balance to a peer's lower one (or gives a key
	// without a bucket the peer's balance), so a restarted or late daemon, or
	// one that missed packets, learns existing debts. window is the peer's
	// counter's window (0 for bucket algorithms). It reports whether it took
	// the peer's balance.
	Adopt(rule, key string, window uint64, balance float64) bool
}

// Counter is one origin's cumulative consumption of one key in one epoch
// and, for windowed algorithms, one window.
type Counter struct {
	Rule  string
	Key   string
	Epoch uint64
	// Window is the window index for windowed algorithms, 0 for bucket
	// algorithms; a later window is larger.
	Window uint64
	Used   uint64 // cumulative tokens admitted by the origin in this epoch and window
	Prev   uint64 // Used as of the origin's previous report (0: first report of the epoch or window)
}
