package testcluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/bucket"
)

// algorithmRule is a rules file with one rule, hot, of 100/1s under algo.
func algorithmRule(algo bucket.Algorithm) string {
	return fmt.Sprintf("rules:\n  hot:\n    rate: 100/1s\n    algorithm: %s\n", algo)
}

// Every algorithm holds a key to its limit across three nodes: load at three
// times the limit, skewed 70/20/10 over the nodes, is admitted within 10%
// of what a single limiter given the same requests at the same instants
// admits. A miss while the process stalled longer than five gossip rounds
// is run again (accuracyattempts_test.go: a stall lets the nodes decide on
// stale views, and near the end leaves no time to repay it).
func TestEveryAlgorithmHeldToClusterLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("drives three seconds of load per algorithm")
	}
	const gossip = 20 * time.Millisecond
	for _, algo := range bucket.Algorithms() {
		t.Run(algo.String(), func(t *testing.T) {
			holdAccuracy(t, 0.10, 5*gossip, func() AccuracyResult {
				c, err := Start(Options{N: 3, Rules: algorithmRule(algo), GossipInterval: gossip})
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					assertNoneClamped(c, t.Errorf)
					c.Close()
				}()
				r, err := MeasureAccuracy(context.Background(), c, AccuracySpec{
					Rule: "hot", Key: "k", Limit: bucket.MustLimitOf(algo, 100, time.Second, 100),
					Offered: 300, Skew: []float64{0.7, 0.2, 0.1}, Duration: 3 * time.Second, Seed: 1,
				})
				if err != nil {
					t.Fatal(err)
				}
				return r
			})
		})
	}
}

// BenchmarkAlgorithmAccuracy measures each algorithm's accuracy in a 3-node
// cluster: five times the limit (100/1s) offered for ten seconds (three
// with -short), 70/20/10 over the nodes, against a single limiter given
// the same requests at the same instants (accuracy-% = admitted / ideal).
//
//	go test -run '^$' -bench AlgorithmAccuracy -benchtime 1x ./testcluster
func BenchmarkAlgorithmAccuracy(b *testing.B) {
	dur := 10 * time.Second
	if testing.Short() {
		dur = 3 * time.Second
	}
	for _, algo := range bucket.Algorithms() {
		b.Run("algo="+algo.String(), func(b *testing.B) {
			var total AccuracyResult
			seed := uint64(0)
			for b.Loop() {
				c, err := Start(Options{N: 3, Rules: algorithmRule(algo), GossipInterval: 20 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				seed++
				r, err := MeasureAccuracy(context.Background(), c, AccuracySpec{
					Rule: "hot", Key: "k", Limit: bucket.MustLimitOf(algo, 100, time.Second, 100),
					Offered: 500, Skew: []float64{0.7, 0.2, 0.1}, Duration: dur, Seed: seed,
				})
				c.Close()
				if err != nil {
					b.Fatal(err)
				}
				total.Offered += r.Offered
				total.Admitted += r.Admitted
				total.Ideal += r.Ideal
				total.FailedOpen += r.FailedOpen
			}
			b.ReportMetric(100*total.Accuracy(), "accuracy-%")
			b.ReportMetric(float64(total.Admitted), "admitted")
			b.ReportMetric(float64(total.Ideal), "ideal")
			b.ReportMetric(float64(total.Offered), "offered")
			b.ReportMetric(float64(total.FailedOpen), "failed-open")
		})
	}
}
