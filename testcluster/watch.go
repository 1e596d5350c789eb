package testcluster

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// Target is a running cluster that load can be driven against: nodes in this
// process (Cluster) or real sluiced processes (Procs).
type Target interface {
	Size() int
	Allow(i int, rule, key string, cost int64) clientlib.Decision
	// Balance reads node i's balance for key, and whether the node answered.
	Balance(i int, rule, key string) (float64, bool)
	Close() error
}

// Size is the number of nodes.
func (c *Cluster) Size() int { return len(c.nodes) }

// Balance reads node i's balance for key.
func (c *Cluster) Balance(i int, rule, key string) (float64, bool) {
	d := c.nodes[i].Daemon()
	if d == nil {
		return 0, false
	}
	return d.Balance(rule, key)
}

// WatchSpec is the load Watch drives and what it measures.
type WatchSpec struct {
	Rule, Key string        // the hot key under load
	Rate      float64       // the rule's limit, tokens per second
	Burst     float64       // the rule's burst
	Offered   float64       // requests per second offered, all nodes together
	Skew      []float64     // share of Offered per node; missing entries get 0
	Duration  time.Duration // how long to drive load
	// ProbeRule names a slow rule (burst well above 1) used to time
	// convergence: a token taken on one node, watched for on the others.
	ProbeRule string
	// ProbeHolders, if above 1, has each probe's key held by that many
	// nodes first and times convergence on them (HolderProbeLag): owner
	// mode, where a node hears of a key only while it uses it. ProbeRate
	// is then the probe rule's refill (tokens per second) and ProbeSettle
	// the wait between the holders' first tokens and the measured one.
	ProbeHolders int
	ProbeRate    float64
	ProbeSettle  time.Duration
	// Aligned starts every node's paced load at the same instant instead of
	// at a random phase, so nodes offered the same rate send together: the
	// worst case, each such burst landing on many nodes at once.
	Aligned bool
}

// Second is one second of a watch.
type Second struct {
	T          int       // seconds since the start, ending this row
	Admitted   []int     // per node, this second
	Cluster    int       // all nodes, this second
	Cumulative int       // all nodes, since the start
	Allowed    float64   // what the limit allows since the start: burst + rate × t
	Balances   []float64 // per node, at the end of the second
	Spread     float64   // max − min of Balances
	LagMs      []float64 // convergence lags measured this second (ms)
	// ProbesLost counts holder probes (WatchSpec.ProbeHolders) whose
	// measured token was taken and not reflected on every holder within
	// the probe's timeout, ended this second.
	ProbesLost int
}

// Watch drives spec's load against t, calling each once per second with
// what happened, and returns every second. Load is paced, and stops at
// spec.Duration or when ctx ends.
func Watch(ctx context.Context, t Target, spec WatchSpec, each func(Second)) ([]Second, error) {
	n := t.Size()
	if len(spec.Skew) == 0 {
		spec.Skew = make([]float64, n)
		for i := range spec.Skew {
			spec.Skew[i] = 1 / float64(n)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, spec.Duration)
	defer cancel()
	admitted := make([]atomic.Int64, n)
	var wg sync.WaitGroup
	for i := 0; i < n && i < len(spec.Skew); i++ {
		rate := spec.Offered * spec.Skew[i]
		if rate <= 0 {
			continue
		}
		period := time.Duration(float64(time.Second) / rate)
		limit := int(rate*spec.Duration.Seconds()) + 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Start at a random phase of the period: nodes offered the same
			// rate would otherwise all send at the same instants, a burst
			// landing on every node at once that no real load keeps making.
			if !spec.Aligned {
				select {
				case <-ctx.Done():
					return
				case <-time.After(rand.N(period)):
				}
			}
			tick := time.NewTicker(period)
			defer tick.Stop()
			for range limit {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if d := t.Allow(i, spec.Rule, spec.Key, 1); d.Allowed && !d.FailedOpen {
					admitted[i].Add(1)
				}
			}
		}()
	}

	lags := make(chan float64, 64)
	var lost atomic.Int64
	if spec.ProbeRule != "" {
		wg.Add(1)
		go func() { defer wg.Done(); probeLoop(ctx, t, spec, lags, &lost) }()
	}

	var seconds []Second
	cumulative := 0
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for sec := 1; ; sec++ {
		done := false
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
		}
		s := Second{T: sec, Admitted: make([]int, n), Balances: make([]float64, n)}
		for i := range admitted {
			s.Admitted[i] = int(admitted[i].Swap(0))
			s.Cluster += s.Admitted[i]
		}
		cumulative += s.Cluster
		s.Cumulative = cumulative
		s.Allowed = spec.Burst + spec.Rate*time.Since(start).Seconds()
		lo, hi := math.Inf(1), math.Inf(-1)
		for i := range n {
			b, _ := t.Balance(i, spec.Rule, spec.Key)
			s.Balances[i] = b
			lo, hi = min(lo, b), max(hi, b)
		}
		s.Spread = hi - lo
		s.ProbesLost = int(lost.Swap(0))
	drain:
		for {
			select {
			case l := <-lags:
				s.LagMs = append(s.LagMs, l)
			default:
				break drain
			}
		}
		if s.Cluster > 0 || !done {
			seconds = append(seconds, s)
			if each != nil {
				each(s)
			}
		}
		if done {
			break
		}
	}
	wg.Wait()
	if len(seconds) == 0 {
		return nil, fmt.Errorf("testcluster: watch ended before its first second")
	}
	return seconds, nil
}

// probeLoop times convergence: about four times a second, at random
// moments (so as not to lock onto the gossip rounds' phase), it takes one
// token of a fresh key on one node (in turn) and measures how long until
// every other node's balance shows it. With spec.ProbeHolders it starts a
// holder probe (HolderProbeLag) at those moments instead, each in its own
// goroutine as the simulator's overlap (one lasts the settle wait and
// more), and none in the watch's last second and settle wait, which it
// could not finish (the simulator's probeTail).
func probeLoop(ctx context.Context, t Target, spec WatchSpec, lags chan<- float64, lost *atomic.Int64) {
	n := t.Size()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var holders sync.WaitGroup
	defer holders.Wait()
	send := func(lag time.Duration) {
		select {
		case lags <- float64(lag) / float64(time.Millisecond):
		default:
		}
	}
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		timer.Reset(time.Duration(rand.Int64N(int64(500 * time.Millisecond))))
		key := fmt.Sprintf("probe-%d-%d", time.Now().UnixNano(), k)
		if spec.ProbeHolders > 1 {
			if end, ok := ctx.Deadline(); ok && time.Until(end) < time.Second+spec.ProbeSettle {
				continue
			}
			holders.Add(1)
			go func() {
				defer holders.Done()
				lag, started, ok := HolderProbeLag(ctx, t, k%n, spec.ProbeHolders, spec.ProbeRule, key, spec.ProbeRate, spec.ProbeSettle, 5*time.Second)
				switch {
				case ok:
					send(lag)
				case started && ctx.Err() == nil:
					lost.Add(1)
				}
			}()
			continue
		}
		if lag, ok := ProbeLag(ctx, t, k%n, spec.ProbeRule, key, 5*time.Second); ok {
			send(lag)
		}
	}
}

// ProbeLag takes one token of key on node from and returns how long until
// every other node's balance for key has dropped below the burst. The key
// must be fresh (full everywhere) and the rule slow enough not to refill
// within the wait.
func ProbeLag(ctx context.Context, t Target, from int, rule, key string, timeout time.Duration) (time.Duration, bool) {
	before, ok := t.Balance(from, rule, key)
	if !ok {
		return 0, false
	}
	start := time.Now()
	if d := t.Allow(from, rule, key, 1); !d.Allowed || d.FailedOpen {
		return 0, false
	}
	pending := make([]int, 0, t.Size())
	for i := range t.Size() {
		if i != from {
			pending = append(pending, i)
		}
	}
	poll := time.NewTicker(200 * time.Microsecond) // fine enough; leaves the CPU to gossip
	defer poll.Stop()
	for len(pending) > 0 {
		if time.Since(start) > timeout || ctx.Err() != nil {
			return 0, false
		}
		<-poll.C
		pending = slices.DeleteFunc(pending, func(i int) bool {
			b, ok := t.Balance(i, rule, key)
			return ok && b <= before-0.5
		})
	}
	return time.Since(start), true
}
