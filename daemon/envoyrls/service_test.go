package envoyrls_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
	"github.com/sluicelabs/sluice/daemon/envoyrls"
)

const cfg = `domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: vip
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: per_user}]}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: long
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// newService builds a daemon (not run: decisions are in-process) on a fake
// clock, with cfg as its Envoy configuration.
func newService(t *testing.T, maxKeyLen int) (*envoyrls.Service, *time.Time) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "rl.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := config.DefaultSettings()
	s.SocketPath, s.EnvoyConfig = filepath.Join(dir, "d.sock"), path
	if maxKeyLen > 0 {
		s.MaxKeyLen = maxKeyLen
	}
	now := time.Unix(1_800_000_000, 0) // a minute's start
	d, err := daemon.New(daemon.Config{Settings: s, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return envoyrls.NewService(envoyrls.Config{Decider: d, MaxKeyLen: s.MaxKeyLen, ResponseHeaders: true}), &now
}

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func codesOf(r *rlsv3.RateLimitResponse) string {
	parts := []string{r.GetOverallCode().String() + ":"}
	for _, s := range r.GetStatuses() {
		parts = append(parts, s.GetCode().String())
	}
	return strings.Join(parts, " ")
}

func TestServiceSemantics(t *testing.T) {
	svc, now := newService(t, 0)
	ask := func(ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		r, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tests := []struct {
		name string
		ds   []*ratelimitv3.RateLimitDescriptor
		want string
	}{
		{"first", []*ratelimitv3.RateLimitDescriptor{desc("user", "u")}, "OK: OK"},
		{"second", []*ratelimitv3.RateLimitDescriptor{desc("user", "u")}, "OK: OK"},
		{"third is over", []*ratelimitv3.RateLimitDescriptor{desc("user", "u")}, "OVER_LIMIT: OVER_LIMIT"},
		{"vip replaces per_user", []*ratelimitv3.RateLimitDescriptor{desc("user", "u"), desc("vip", "u")}, "OK: OK OK"},
		{"zero per unit refuses", []*ratelimitv3.RateLimitDescriptor{desc("blocked", "x")}, "OVER_LIMIT: OVER_LIMIT"},
		{"shadow zero answers OK", []*ratelimitv3.RateLimitDescriptor{desc("shadow", "x")}, "OK: OK"},
	}
	for _, tt := range tests {
		if got := codesOf(ask(tt.ds...)); got != tt.want {
			t.Fatalf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
	r := ask(desc("user", "u"), desc("vip", "u"))
	if r.Statuses[0].GetCurrentLimit() != nil {
		t.Fatalf("a replaced limit is reported: %v", r.Statuses[0])
	}
	// The fixed window ends on the minute: the user is admitted again.
	*now = now.Add(time.Minute)
	if got := codesOf(ask(desc("user", "u"))); got != "OK: OK" {
		t.Fatalf("next window: %s", got)
	}
	r = ask(desc("user", "w"))
	if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d != time.Minute {
		t.Fatalf("duration_until_reset %v at a window's start, want 1m", d)
	}
	if h := r.GetResponseHeadersToAdd(); len(h) != 2 || h[0].GetValue() != `"per_user";q=2;w=60` || h[1].GetValue() != `"per_user";r=1;t=60` {
		t.Fatalf("headers %v", h)
	}
}

func TestServiceHitsAddendPerDescriptorAndLongKeys(t *testing.T) {
	svc, _ := newService(t, 64)
	long := strings.Repeat("x", 500)
	ask := func(hits uint32, d *ratelimitv3.RateLimitDescriptor) string {
		r, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		return codesOf(r)
	}
	d := desc("user", "h")
	d.HitsAddend = wrapperspb.UInt64(2) // the descriptor's, over the request's 1
	if got := ask(1, d); got != "OK: OK" {
		t.Fatal(got)
	}
	if got := ask(0, desc("user", "h")); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("after a cost of 2 of 2: %s", got)
	}
	// A key longer than the daemon's cap is bounded, not refused, and
	// still counted per value.
	if got := ask(0, desc("long", long)); got != "OK: OK" {
		t.Fatal(got)
	}
	if got := ask(0, desc("long", long)); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("long key, second call: %s", got)
	}
	if got := ask(0, desc("long", long+"y")); got != "OK: OK" {
		t.Fatalf("another long key shares the first's bucket: %s", got)
	}
}

func TestServiceRefusesInvalidAndLateCalls(t *testing.T) {
	svc, _ := newService(t, 0)
	many := make([]*ratelimitv3.RateLimitDescriptor, 65)
	for i := range many {
		many[i] = desc("user", "m")
	}
	for _, bad := range []*rlsv3.RateLimitRequest{
		{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u")}},
		{Domain: "d"},
		{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}},
		{Domain: "d", Descriptors: many},
	} {
		if _, err := svc.ShouldRateLimit(context.Background(), bad); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%d descriptors, domain %q: %v, want InvalidArgument", len(bad.Descriptors), bad.Domain, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := svc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u")}}); status.Code(err) != codes.Canceled {
		t.Fatalf("a cancelled call: %v", err)
	}
}

// BenchmarkShouldRateLimit is one call's cost in-process, without gRPC: the
// response messages are what allocates.
func BenchmarkShouldRateLimit(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "rl.yaml")
	if err := os.WriteFile(path, []byte("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	s := config.DefaultSettings()
	s.SocketPath, s.EnvoyConfig = filepath.Join(dir, "d.sock"), path
	d, err := daemon.New(daemon.Config{Settings: s})
	if err != nil {
		b.Fatal(err)
	}
	svc := envoyrls.NewService(envoyrls.Config{Decider: d, MaxKeyLen: s.MaxKeyLen})
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u")}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
