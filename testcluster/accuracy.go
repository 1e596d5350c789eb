package testcluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/sluicelabs/sluice/bucket"
)

// AccuracySpec is a load offered to one key of one rule across a cluster,
// to compare what the cluster admits with what one limiter holding every
// request would.
type AccuracySpec struct {
	Rule, Key string
	// Limit is the rule's limit (algorithm included), for the reference.
	Limit bucket.Limit
	// Offered is the cluster-wide request rate, per second.
	Offered float64
	// Skew is each node's share of Offered (nodes beyond it get none).
	Skew []float64
	// Duration bounds the run; Seed picks each node's pacing phase.
	Duration time.Duration
	Seed     uint64
}

// AccuracyResult is what a run offered and admitted.
type AccuracyResult struct {
	Offered  int // requests sent
	Admitted int // admitted by the cluster (fail-opens excluded)
	Ideal    int // admitted by a single limiter given the same requests at the same instants
	// FailedOpen counts requests the client admitted without a daemon's answer.
	FailedOpen int
	// Stall is the longest this process went unscheduled during the run
	// (stallwatch.go): for that long no node gossiped, and the callers
	// then sent what they had missed at once.
	Stall time.Duration
}

// Accuracy is Admitted / Ideal: 1 means the cluster admitted exactly what one
// limiter holding every request would have.
func (r AccuracyResult) Accuracy() float64 { return float64(r.Admitted) / float64(r.Ideal) }

// MeasureAccuracy offers spec's load, paced per node, and replays every
// request, at the instant it was sent, through a single in-process store
// under the same limit: the reference a distributed limiter can at best
// match. The load is bounded by spec.Duration and by count, and stops by
// itself or when ctx ends.
func MeasureAccuracy(ctx context.Context, c *Cluster, spec AccuracySpec) (AccuracyResult, error) {
	if len(spec.Skew) > len(c.nodes) || spec.Offered <= 0 || spec.Duration <= 0 {
		return AccuracyResult{}, fmt.Errorf("testcluster: accuracy spec for %d nodes: %+v", len(c.nodes), spec)
	}
	type offer struct {
		at      time.Time
		allowed bool
		failed  bool
	}
	offers := make([][]offer, len(spec.Skew))
	rnd := rand.New(rand.NewPCG(spec.Seed, 1))
	start := time.Now()
	deadline := start.Add(spec.Duration)
	stalls := watchStalls()
	var wg sync.WaitGroup
	for i, share := range spec.Skew {
		rate := spec.Offered * share
		if rate <= 0 {
			continue
		}
		every := time.Duration(float64(time.Second) / rate)
		phase := time.Duration(rnd.Int64N(int64(every)))
		limit := int(rate*spec.Duration.Seconds()) + 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]offer, 0, limit)
			next := start.Add(phase)
			for len(out) < limit && ctx.Err() == nil {
				if wait := time.Until(next); wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
					}
				}
				now := time.Now()
				if !now.Before(deadline) {
					break
				}
				d := c.Allow(i, spec.Rule, spec.Key, 1)
				out = append(out, offer{at: now, allowed: d.Allowed && !d.FailedOpen, failed: d.FailedOpen})
				next = next.Add(every)
			}
			offers[i] = out
		}()
	}
	wg.Wait()
	stall := stalls()
	var all []offer
	for _, o := range offers {
		all = append(all, o...)
	}
	slices.SortFunc(all, func(a, b offer) int { return a.at.Compare(b.at) })
	ref := bucket.NewStore(bucket.StoreConfig{MaxKeys: 16})
	r := AccuracyResult{Stall: stall}
	for _, o := range all {
		r.Offered++
		if o.allowed {
			r.Admitted++
		}
		if o.failed {
			r.FailedOpen++
		}
		if d, err := ref.Take(1, []byte(spec.Key), spec.Limit, 1, o.at); err != nil {
			return r, fmt.Errorf("testcluster: reference: %w", err)
		} else if d.Allowed {
			r.Ideal++
		}
	}
	if r.Ideal == 0 {
		return r, fmt.Errorf("testcluster: the reference admitted nothing of %d requests", r.Offered)
	}
	return r, ctx.Err()
}
