package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	"github.com/sluicelabs/sluice/internal/buildinfo"
	"github.com/sluicelabs/sluice/ipc"
)

// Config is what a Daemon is built from.
type Config struct {
	Settings config.Settings
	// Logger receives the daemon's logs. Default: discard.
	Logger hclog.Logger
	// Now is the clock, read once per request. Default: a monotonic clock.
	// Tests inject their own.
	Now func() time.Time
	// Gossip, if set, adjusts the gossip configuration last (testcluster
	// injects fault-injecting transports and short timeouts through it).
	Gossip func(*gossip.Config)
}

// Daemon decides rate-limit requests for the clients of one host.
type Daemon struct {
	settings config.Settings
	log      hclog.Logger
	now      func() time.Time
	store    *bucket.Store
	server   *ipc.Server

	rules  atomic.Pointer[ruleSet]
	syncer *gossip.Syncer // nil when not in a cluster

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

	reloadMu   sync.Mutex // serialises rule changes and guards namespaces
	namespaces map[string]bucket.Namespace
	nsNames    atomic.Pointer[[]string] // namespace → rule name, for gossip

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
// It starts no goroutine.
func New(cfg Config) (*Daemon, error) {
	if err := cfg.Settings.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = monotonicClock()
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
		settings:  s,
		log:       cfg.Logger,
		now:       cfg.Now,
		undecided: clientlib.NewFailOpenLog(cfg.Logger.Named("embedded").Warn, 0, false, nil),
		store: bucket.NewStore(bucket.StoreConfig{
			MaxKeys: s.MaxKeys, MaxKeyLen: s.MaxKeyLen, MaxLogBytes: s.MaxLogBytes,
			TrackConsumption: s.Cluster.Enabled(),
			EpochBase:        uint64(time.Now().UnixNano()), // grows across restarts
		}),
		namespaces:   map[string]bucket.Namespace{},
		ready:        make(chan struct{}),
		loadedDigest: digest,
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
	} else {
		d.apply(rules)
	}
	if s.Cluster.Enabled() {
		var err error
		if d.syncer, err = d.newSyncer(cfg.Gossip); err != nil {
			return nil, err
		}
		d.metrics.registerGossip(d.syncer)
		d.metrics.registerGossipSecurity(d)
	}
	return d, nil
}

// monotonicClock returns a clock whose readings advance with the monotonic
// clock, so wall-clock steps never refill or drain buckets.
func monotonicClock() func() time.Time {
	base := time.Now()
	return func() time.Time { return base.Add(time.Since(base)) }
}

// Run listens on the socket and serves until ctx ends, then shuts down
// gracefully: it stops accepting, answers requests already received, and
// removes the socket.
func (d *Daemon) Run(ctx context.Context) error {
	eps, err := d.listenHTTP()
	if err != nil {
		if d.syncer != nil {
			d.syncer.Shutdown()
		}
		return err
	}
	l, err := ipc.ListenWith(d.settings.SocketPath, d.settings.SocketMode, ipc.ListenOptions{SharedVolume: d.settings.SocketSharedVolume})
	if err != nil {
		for _, ep := range eps {
			ep.l.Close()
		}
		return err
	}
	rs := d.rules.Load()
	d.log.Info("sluiced serving", "socket", d.settings.SocketPath, "node", d.settings.NodeName,
		"rules", rs.rules.Source, "rule_count", len(rs.byName), "rules_hash", rs.rules.Hash,
		"version", version, "revision", buildinfo.Get().RevisionString(), "go", buildinfo.Get().GoVersion)
	if d.syncer != nil {
		if err := d.syncer.Start(); err != nil {
			for _, ep := range eps {
				ep.l.Close()
			}
			l.Close()
			os.Remove(d.settings.SocketPath)
			return err
		}
		d.log.Info("cluster gossip on", "addr", d.syncer.Addr(), "join", d.settings.Cluster.Join,
			"encrypted", d.settings.Cluster.Encrypted())
		defer d.startInsecureWarnings(ctx)()
	}
	httpCtx, stopHTTP := context.WithCancel(ctx)
	waitHTTP := d.serveHTTP(httpCtx, eps)
	defer func() { stopHTTP(); waitHTTP() }()
	if d.fetcher != nil {
		pollDone := make(chan struct{})
		pollCtx, stopPoll := context.WithCancel(ctx)
		go func() { defer close(pollDone); d.pollRules(pollCtx) }()
		defer func() { stopPoll(); <-pollDone }()
	}
	if d.settings.RulesPath != "" && !d.settings.NoWatch {
		if loop, ok := d.startWatch(); ok {
			watchDone := make(chan struct{})
			watchCtx, stopWatch := context.WithCancel(ctx)
			go func() { defer close(watchDone); loop(watchCtx) }()
			defer func() { stopWatch(); <-watchDone }()
		}
	}
	close(d.ready)

	served := make(chan error, 1)
	go func() { served <- d.server.Serve(l, d.settings.SocketPath) }()
	sweepDone := make(chan struct{})
	sweepCtx, stopSweep := context.WithCancel(ctx)
	go func() { defer close(sweepDone); d.sweepLoop(sweepCtx) }()
	defer func() { stopSweep(); <-sweepDone }()

	select {
	case err := <-served:
		return fmt.Errorf("serve %s: %w", d.settings.SocketPath, err)
	case <-ctx.Done():
	}
	d.log.Info("shutting down", "timeout", d.settings.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), d.settings.ShutdownTimeout)
	defer cancel()
	err = d.server.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, ipc.ErrServerClosed) {
		d.log.Warn("serve ended with an error", "error", serr)
	}
	if d.syncer != nil {
		d.syncer.Flush() // peers learn what was admitted last
		if lerr := d.syncer.LeaveAndShutdown(leaveTimeout); lerr != nil {
			d.log.Warn("leaving the cluster", "error", lerr)
		}
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	d.log.Info("stopped")
	return nil
}

// Ready is closed once the daemon is listening.
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
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := d.store.Sweep(d.now()); n > 0 {
				d.log.Debug("evicted idle buckets", "count", n, "held", d.store.Len())
			}
		}
	}
}

// Balance returns the balance of key under rule, and whether the rule exists.
func (d *Daemon) Balance(rule, key string) (float64, bool) {
	ar, ok := d.rules.Load().byName[rule]
	if !ok {
		return 0, false
	}
	lim := ar.LimitFor([]byte(key))
	b, _ := d.store.Balance(ar.ns[0], []byte(key), lim, d.now())
	return b, true
}
