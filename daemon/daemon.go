package daemon

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/gossip"
	"github.com/sluicelabs/sluice/ipc"
)

// Config is what a Daemon is built from.
type Config struct {
	Settings config.Settings
	// Logger receives the daemon's logs. Default: discard.
	Logger hclog.Logger
	// Now is the clock, read once per request. Default: wall time that
	// advances with the monotonic clock and follows wall-clock steps
	// (clock.go). Tests inject their own.
	Now func() time.Time
	// Gossip, if set, adjusts the gossip configuration last (testcluster
	// injects fault-injecting transports and short timeouts through it).
	Gossip func(*gossip.Config)
	// Census, if set, is the go-metrics sink the program installed as
	// go-metrics' global, from which the member census reads how many
	// members memberlist suspects (see gossip.CensusSink). Nil: none is
	// counted suspect. The daemon installs nothing process-wide.
	Census *gossip.CensusSink
	// NoFirstShare turns off first contact's hold, the fair floor and
	// owner mode's shares (bucket/firstshare.go, bucket/floor.go,
	// bucket/share.go): every node then decides a new key on a full
	// bucket, as before issue 20 (tests of that behaviour use it).
	NoFirstShare bool
}

// Daemon decides rate-limit requests for the clients of one host.
type Daemon struct {
	settings config.Settings
	log      hclog.Logger
	now      func() time.Time
	clock    *stepClock // the default clock, resynced to wall-clock steps; nil when Config.Now is a test's
	store    *bucket.Store
	server   *ipc.Server

	rules  atomic.Pointer[ruleSet]
	fence  rulesFence     // rules and balances switch together (fence.go)
	syncer *gossip.Syncer // nil when not in a cluster
	// noFirstShare: see Config.NoFirstShare.
	noFirstShare bool

	loadedDigest []byte      // content hash of the rules file New loaded
	fileWriting  atomic.Bool // the watcher saw the rules file modified in place and not yet closed (watch.go)

	metrics         *metrics
	lastReloadError atomic.Pointer[string]
	// undecided counts and logs, rate-limited, the in-process decisions
	// (Embedded, Local, the built-in proxy) that could not be made and
	// failed open.
	undecided *clientlib.FailOpenLog

	fetcher        *rulesFetcher // nil unless the rules come from a URL
	fetchFailing   atomic.Bool
	lastFetchError atomic.Pointer[string]
	lastFetchOK    atomic.Int64                  // unix seconds of the last answer from the rules service
	fallback       atomic.Pointer[rulesFallback] // rules in force not from the service; nil once it answered (rulescache.go)

	// reloadGate lets one reload run at a time, from reading its source to
	// putting the rules in force; reloadSeq numbers reloads in the order
	// their sources were read, and appliedSeq (guarded by reloadGate) is the
	// newest one in force, so an older read never replaces a newer one.
	reloadGate sync.Mutex
	reloadSeq  atomic.Uint64
	appliedSeq uint64

	reloadMu   sync.Mutex                   // serialises rule changes and guards namespaces and baseRules
	envoy      atomic.Pointer[config.Envoy] // the Envoy configuration in force (envoy.go)
	baseRules  *config.Rules                // the rules in force before the Envoy ones are merged in
	namespaces map[string]bucket.Namespace
	nsNames    atomic.Pointer[[]string] // namespace → rule name, for gossip

	life     lifecycle // Start, Leave and Shutdown (lifecycle.go)
	ready    chan struct{}
	reloads  atomic.Uint64
	failures atomic.Uint64
}

// ruleSet is an immutable snapshot of the rules in force.
type ruleSet struct {
	rules  *config.Rules
	byName map[string]activeRule
}

type activeRule struct {
	*config.Rule
	ns      []bucket.Namespace // one per limit, in the rule's order
	counted ruleCounters
}

// limitName names a rule's i'th limit in gossip and in the store's
// namespaces: the rule's name for the first, "name#i" for the others ('#'
// cannot appear in a rule name).
func limitName(rule string, i int) string {
	if i == 0 {
		return rule
	}
	return rule + "#" + strconv.Itoa(i)
}

// resolve finds the rule and limit a limit name (see limitName) refers to.
func (rs *ruleSet) resolve(name string) (activeRule, int, bool) {
	rule, idx := name, 0
	if r, i, ok := strings.Cut(name, "#"); ok {
		n, err := strconv.Atoi(i)
		if err != nil || n < 1 {
			return activeRule{}, 0, false
		}
		rule, idx = r, n
	}
	ar, ok := rs.byName[rule]
	if !ok || idx >= len(ar.ns) {
		return activeRule{}, 0, false
	}
	return ar, idx, true
}

// New builds a daemon: it validates the settings and loads the rules file (or
// the embedded defaults when neither Settings.RulesPath nor RulesURL is set).
// With a rules URL it fetches the rules once (waiting at most
// rulesFetchTimeout); if the service cannot be reached or serves invalid
// rules, the daemon starts on the rules cache (Settings.RulesCache) or,
// without one, on no rules at all, admitting every check; it reports which
// in /readyz and the log, and keeps polling (see rulescache.go).
//
// New binds nothing (no socket, no HTTP listener, no gossip port) and
// starts no goroutine, neither its own nor memberlist's: that is Start's
// (see lifecycle.go). A daemon that is never started needs no Shutdown.
func New(cfg Config) (*Daemon, error) {
	if err := cfg.Settings.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	var clock *stepClock
	if cfg.Now == nil {
		clock = newStepClock()
		cfg.Now = clock.Now
	}
	rules := config.DefaultRules()
	if cfg.Settings.RulesURL != "" {
		rules = nil // the service's, the cache's or none: see startFromURL
	}
	var digest []byte
	if p := cfg.Settings.RulesPath; p != "" {
		digest = fileDigest(p)
		var err error
		if rules, err = config.LoadRules(p); err != nil {
			return nil, err
		}
	}
	s := cfg.Settings
	d := &Daemon{
		settings:     s,
		log:          cfg.Logger,
		now:          cfg.Now,
		clock:        clock,
		noFirstShare: cfg.NoFirstShare,
		undecided:    clientlib.NewFailOpenLog(cfg.Logger.Named("embedded").Warn, 0, false, nil),
		store: bucket.NewStore(bucket.StoreConfig{
			MaxKeys: s.MaxKeys, MaxKeyLen: s.MaxKeyLen, MaxLogBytes: s.MaxLogBytes,
			TrackConsumption: s.Cluster.Enabled(),
			EpochBase:        uint64(time.Now().UnixNano()), // grows across restarts
		}),
		namespaces:   map[string]bucket.Namespace{},
		ready:        make(chan struct{}),
		loadedDigest: digest,
	}
	if err := d.loadEnvoy(); err != nil {
		return nil, err
	}
	d.server = ipc.NewServer(ipc.ServerConfig{
		Name:         s.NodeName,
		MaxFrame:     s.MaxFrameBytes,
		MaxBatch:     s.MaxBatch,
		MaxKeyLen:    s.MaxKeyLen,
		MaxConns:     s.MaxConns,
		WriteTimeout: s.WriteTimeout,
		Logger:       cfg.Logger.Named("ipc"),
		AllowUIDs:    s.AllowUIDs,
		AllowGIDs:    s.AllowGIDs,
	}, d)
	d.metrics = newMetrics(d)
	d.metrics.registerIPC(d.server)
	if s.RulesURL != "" {
		d.fetcher = newRulesFetcher(s.RulesURL)
		d.startFromURL() // the service's rules, else the cache's, else none (failing open)
		d.fetcher.closeIdle()
	} else {
		d.apply(rules)
	}
	if s.Cluster.Enabled() {
		var err error
		if d.syncer, err = d.newSyncer(cfg.Gossip, cfg.Census); err != nil {
			return nil, err
		}
		d.metrics.registerGossip(d.syncer)
		d.metrics.registerGossipSecurity(d)
	}
	return d, nil
}

// Ready is closed once Start has bound everything and the daemon serves.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// SocketPath is where the daemon listens.
func (d *Daemon) SocketPath() string { return d.settings.SocketPath }

// Rules returns the rules in force.
func (d *Daemon) Rules() *config.Rules { return d.rules.Load().rules }

// Server returns the IPC server, for its counters.
func (d *Daemon) Server() *ipc.Server { return d.server }

// Syncer returns the gossip syncer, or nil when the daemon is not in a cluster.
func (d *Daemon) Syncer() *gossip.Syncer { return d.syncer }

// Store returns the bucket store.
func (d *Daemon) Store() *bucket.Store { return d.store }

func (d *Daemon) sweepLoop(ctx context.Context) {
	t := time.NewTicker(d.settings.SweepInterval)
	defer t.Stop()
	resync := time.NewTicker(clockCheckInterval)
	defer resync.Stop()
	share := time.NewTicker(firstShareInterval)
	defer share.Stop()
	d.updateFirstShare()
	for {
		select {
		case <-ctx.Done():
			return
		case <-share.C:
			d.updateFirstShare()
		case <-resync.C:
			d.resyncClock()
		case <-t.C:
			if n := d.store.Sweep(d.now()); n > 0 {
				d.log.Debug("evicted idle buckets", "count", n, "held", d.store.Len())
			}
		}
	}
}

// Balance returns the balance of key under rule, and whether the rule exists.
func (d *Daemon) Balance(rule, key string) (float64, bool) {
	defer leave(d.fence.enter())
	ar, ok := d.rules.Load().byName[rule]
	if !ok {
		return 0, false
	}
	lim := ar.LimitFor([]byte(key))
	b, _ := d.store.Balance(ar.ns[0], []byte(key), lim, d.now())
	return b, true
}
