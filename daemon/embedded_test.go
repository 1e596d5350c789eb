package daemon

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/ipc"
)

func embed(t *testing.T, rules string, clk *fakeClock, cluster config.ClusterSettings) *Embedded {
	t.Helper()
	d, _, _ := newDaemon(t, rules) // for its rules file and settings
	s := d.settings
	s.Cluster = cluster
	cfg := Config{Settings: s}
	if clk != nil {
		cfg.Now = clk.Now
	}
	e, err := Embed(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestEmbeddedDecidesLikeTheDaemon(t *testing.T) {
	clk := &fakeClock{}
	e := embed(t, testRules, clk, config.ClusterSettings{})
	ctx := context.Background()
	for i := range 5 {
		d := e.Allow(ctx, "four", "k")
		if d.Allowed != (i < 4) || d.FailedOpen {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	if d := e.Allow(ctx, "four", "k"); d.RetryAfter != 250*time.Millisecond || d.Period != time.Second || d.Limit != 4 {
		t.Fatalf("throttled decision %+v", d)
	}
	d := e.AllowAll(ctx, clientlib.Check{Rule: "user", Key: "a", Cost: 1}, clientlib.Check{Rule: "route", Key: "/x", Cost: 2})
	if !d.Allowed || d.Remaining != 0 || d.Deciding != 1 {
		t.Fatalf("multi-check %+v", d)
	}
	if d := e.AllowAll(ctx, clientlib.Check{Rule: "four", Key: "k2", Cost: 5}); d.Allowed || d.FailedOpen || !d.Invalid || !errors.Is(d.Err, clientlib.ErrInvalid) {
		t.Fatalf("cost above burst: %+v", d)
	}
	if d := e.Allow(ctx, "nope", "k"); d.Allowed {
		t.Fatalf("unknown rule under deny admitted: %+v", d)
	}
}

func TestEmbeddedAllocatesNothing(t *testing.T) {
	clk := &fakeClock{}
	e := embed(t, testRules, clk, config.ClusterSettings{})
	ctx := context.Background()
	checks := []clientlib.Check{{Rule: "user", Key: "alice", Cost: 1}, {Rule: "route", Key: "/x", Cost: 1}}
	e.AllowAll(ctx, checks...)
	allocs := testing.AllocsPerRun(500, func() {
		clk.Advance(time.Second)
		e.AllowAll(ctx, checks...)
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per embedded decision, want 0", allocs)
	}
}

func TestEmbeddedLimitersShareALimitOverGossip(t *testing.T) {
	rules := "rules:\n  slow:\n    rate: 5/1h\n"
	a := embed(t, rules, nil, config.ClusterSettings{Bind: "127.0.0.1:0", GossipInterval: 10 * time.Millisecond})
	addr := a.Daemon().Syncer().Addr()
	b := embed(t, rules, nil, config.ClusterSettings{Bind: "127.0.0.1:0", Join: []string{addr}, GossipInterval: 10 * time.Millisecond, Insecure: true})
	deadline := time.Now().Add(15 * time.Second)
	for a.Daemon().Syncer().NumAlive() != 2 || b.Daemon().Syncer().NumAlive() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two embedded limiters did not form a cluster")
		}
		<-time.After(5 * time.Millisecond)
	}
	ctx := context.Background()
	for range 5 {
		a.Allow(ctx, "slow", "shared")
	}
	for time.Now().Before(deadline) {
		if bal, _ := b.Daemon().Balance("slow", "shared"); bal <= 0.01 {
			return
		}
		<-time.After(5 * time.Millisecond)
	}
	t.Fatal("b never learned a's consumption")
}

// BenchmarkEmbeddedAllow is one decision through the embedded limiter: rule
// lookup, clock read and store decision, no socket.
func BenchmarkEmbeddedAllow(b *testing.B) {
	d, _, _ := newDaemon(b, testRules)
	e, err := Embed(Config{Settings: d.settings})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		e.Allow(ctx, "user", "alice")
	}
}

// An in-process decision that cannot be made fails open, and is counted and
// logged at most once per cause per interval, as clientlib's are.
func TestEmbeddedFailOpenIsCountedAndLoggedOnce(t *testing.T) {
	d, _, _ := newDaemon(t, testRules)
	var out bytes.Buffer
	s := d.settings
	e, err := Embed(Config{Settings: s, Logger: hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Warn})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	internal := &ipc.Error{Code: ipc.CodeInternal, Message: "store fault"}
	for range 100 {
		if d := e.d.Local().failOpen(internal); !d.Allowed || !d.FailedOpen || d.Err != internal {
			t.Fatalf("undecided call %+v", d)
		}
	}
	if n := e.FailOpens().Total(clientlib.CauseInternal); n != 100 {
		t.Fatalf("counted %d fail-opens, want 100", n)
	}
	if lines := strings.Count(out.String(), "failing open"); lines != 1 {
		t.Fatalf("%d log lines for 100 fail-opens within one interval, want 1:\n%s", lines, out.String())
	}
}
