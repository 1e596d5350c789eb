package daemon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/gossip/gossiptest"
	"github.com/sluicelabs/sluice/ipc"
)

// TestMain fails the package's tests if any goroutine outlives them but
// those memberlist is known to leave for a moment after Shutdown (see
// gossiptest); none of Sluice's is ignored.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, gossiptest.MemberlistLeftovers()...) }

// fakeClock is a clock tests move by hand.
type fakeClock struct{ offset atomic.Int64 }

var epoch = time.Unix(1_800_000_000, 0)

func (c *fakeClock) Now() time.Time          { return epoch.Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

const testRules = `
unknown_rule: deny
rules:
  four:
    rate: 4/1s
  user:
    rate: 10/1s
    overrides:
      vip: {rate: 100/1s}
  route:
    rate: 2/1s
`

func writeRules(t testing.TB, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newDaemon(t testing.TB, rules string) (*Daemon, *fakeClock, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "dm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rulesPath := filepath.Join(dir, "rules.yaml")
	writeRules(t, rulesPath, rules)
	s := config.DefaultSettings()
	s.SocketPath = filepath.Join(dir, "d.sock")
	s.RulesPath = rulesPath
	clk := &fakeClock{}
	d, err := New(Config{Settings: s, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return d, clk, rulesPath
}

func checks(cs ...string) []ipc.Check {
	out := make([]ipc.Check, 0, len(cs)/2)
	for i := 0; i+1 < len(cs); i += 2 {
		out = append(out, ipc.Check{Rule: []byte(cs[i]), Key: []byte(cs[i+1]), Cost: 1})
	}
	return out
}

func decide(t *testing.T, d *Daemon, cs []ipc.Check) (bool, []ipc.Result) {
	t.Helper()
	results := make([]ipc.Result, len(cs))
	ok, err := d.Decide(cs, results)
	if err != nil {
		t.Fatal(err)
	}
	return ok, results
}

func TestDecideSingleCheckAndRefill(t *testing.T) {
	d, clk, _ := newDaemon(t, testRules)
	for i := range 4 {
		if ok, r := decide(t, d, checks("four", "k")); !ok || r[0].Remaining != uint64(3-i) {
			t.Fatalf("request %d: %v %+v", i, ok, r)
		}
	}
	ok, r := decide(t, d, checks("four", "k"))
	if ok || r[0].Status != ipc.StatusOverLimit || r[0].RetryAfter != 250*time.Millisecond {
		t.Fatalf("fifth request: %v %+v", ok, r)
	}
	clk.Advance(250 * time.Millisecond)
	if ok, _ := decide(t, d, checks("four", "k")); !ok {
		t.Fatal("not admitted after one token's refill")
	}
}

func TestDecideOverridesAndUnknownRules(t *testing.T) {
	d, _, _ := newDaemon(t, testRules)
	if _, r := decide(t, d, checks("user", "vip")); r[0].Limit != 100 {
		t.Fatalf("vip limit %d, want the override's 100", r[0].Limit)
	}
	if _, r := decide(t, d, checks("user", "someone")); r[0].Limit != 10 {
		t.Fatalf("default limit %d, want 10", r[0].Limit)
	}
	if ok, r := decide(t, d, checks("nope", "k")); ok || r[0].Status != ipc.StatusUnknownRule {
		t.Fatalf("unknown rule under deny: %v %+v", ok, r)
	}
	allowDaemon, _, _ := newDaemon(t, "unknown_rule: allow\nrules: {}\n")
	if ok, r := decide(t, allowDaemon, checks("nope", "k")); !ok || r[0].Status != ipc.StatusUnknownRuleAllowed {
		t.Fatalf("unknown rule under allow: %v %+v", ok, r)
	}
}

func TestDecideMultiCheckChargesAllOrNothing(t *testing.T) {
	d, _, _ := newDaemon(t, testRules)
	// route allows 2: the third request is denied by route, and must not be
	// charged to user.
	for i := range 3 {
		ok, r := decide(t, d, checks("user", "alice", "route", "/upload"))
		if want := i < 2; ok != want {
			t.Fatalf("request %d admitted=%v, want %v (%+v)", i, ok, want, r)
		}
	}
	if bal, _ := d.Balance("user", "alice"); bal != 8 {
		t.Fatalf("user balance %v, want 8: the denied request charged it", bal)
	}
	if ok, r := decide(t, d, checks("user", "bob", "nope", "x")); ok || r[1].Status != ipc.StatusUnknownRule {
		t.Fatalf("multi-check with an unknown rule under deny: %v %+v", ok, r)
	}
}

func TestDecideRefusesBadCostAndKeys(t *testing.T) {
	d, _, _ := newDaemon(t, testRules)
	tests := []struct {
		name string
		c    ipc.Check
		code ipc.ErrorCode
	}{
		{"cost above burst", ipc.Check{Rule: []byte("four"), Key: []byte("k"), Cost: 5}, ipc.CodeBadCost},
		{"huge cost", ipc.Check{Rule: []byte("four"), Key: []byte("k"), Cost: math.MaxUint64}, ipc.CodeBadCost},
		{"key too long", ipc.Check{Rule: []byte("four"), Key: make([]byte, 300), Cost: 1}, ipc.CodeKeyTooLong},
	}
	for _, tt := range tests {
		for _, batch := range [][]ipc.Check{{tt.c}, {tt.c, checks("route", "x")[0]}} {
			_, err := d.Decide(batch, make([]ipc.Result, len(batch)))
			var e *ipc.Error
			if !errors.As(err, &e) || e.Code != tt.code {
				t.Errorf("%s (batch of %d): err %v, want code %d", tt.name, len(batch), err, tt.code)
			}
		}
	}
	if bal, _ := d.Balance("route", "x"); bal != 2 {
		t.Fatalf("a refused batch charged its valid check: balance %v", bal)
	}
}

func TestDecideAllocatesNothing(t *testing.T) {
	d, clk, _ := newDaemon(t, testRules)
	one := checks("user", "alice")
	two := checks("user", "alice", "route", "/x")
	results := make([]ipc.Result, 2)
	d.Decide(two, results)
	allocs := testing.AllocsPerRun(500, func() {
		clk.Advance(time.Second)
		d.Decide(one, results[:1])
		d.Decide(two, results)
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per decision round, want 0", allocs)
	}
}

func TestReloadRescalesKeepsBalancesAndRejectsBadFiles(t *testing.T) {
	d, _, path := newDaemon(t, testRules)
	for range 4 {
		decide(t, d, checks("four", "k"))
	}
	_, _ = d.store.Charge(d.rules.Load().byName["four"].ns[0], []byte("k"), d.rules.Load().byName["four"].Limits[0], 8, epoch)
	if bal, _ := d.Balance("four", "k"); bal != -8 {
		t.Fatalf("setup: balance %v, want -8", bal)
	}
	goodHash := d.Rules().Hash

	// A bad file changes nothing.
	writeRules(t, path, "rules:\n  four:\n    rate: 8/1s\n    burst: lots\n")
	err := d.Reload()
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Line != 4 || fe.Field != "rules.four.burst" {
		t.Fatalf("bad reload err = %v, want a FieldError at line 4 on rules.four.burst", err)
	}
	if d.Rules().Hash != goodHash {
		t.Fatal("a bad file replaced the rules")
	}
	if bal, _ := d.Balance("four", "k"); bal != -8 {
		t.Fatalf("balance after failed reload %v, want -8", bal)
	}

	// Doubling the limit doubles the debt: rescaled, not reset.
	writeRules(t, path, "unknown_rule: deny\nrules:\n  four:\n    rate: 8/1s\n  route:\n    rate: 2/1s\n")
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	if bal, _ := d.Balance("four", "k"); bal != -16 {
		t.Fatalf("balance after limit change %v, want -16", bal)
	}
	if ok, r := decide(t, d, checks("user", "a")); ok || r[0].Status != ipc.StatusUnknownRule {
		t.Fatal("removed rule still enforced")
	}
	// A rule that comes back finds its buckets where it left them.
	writeRules(t, path, testRules)
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	if bal, _ := d.Balance("four", "k"); bal != -8 {
		t.Fatalf("balance after restoring the limit %v, want -8", bal)
	}
	if ok, failed := d.ReloadCounts(); ok != 2 || failed != 1 {
		t.Fatalf("reload counts ok=%d failed=%d", ok, failed)
	}
}

func TestNewRejectsBadRulesFile(t *testing.T) {
	s := config.DefaultSettings()
	s.RulesPath = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := New(Config{Settings: s}); err == nil {
		t.Fatal("New accepted a missing rules file")
	}
}

func TestRunServesClientsAndShutsDownCleanly(t *testing.T) {
	d, _, _ := newDaemon(t, testRules)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	<-d.Ready()

	c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: d.SocketPath(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 5 {
		got := c.Allow(context.Background(), "four", "via-socket")
		if got.FailedOpen || got.Allowed != (i < 4) {
			t.Fatalf("request %d over the socket: %+v", i, got)
		}
	}
	in, err := c.Inspect(context.Background(), "four", "via-socket")
	if err != nil || !in.Known || in.Balance != 0 || in.Limit != 4 || in.Burst != 4 {
		t.Fatalf("inspect over the socket: %+v %v", in, err)
	}
	if in, err := c.Inspect(context.Background(), "nope", "k"); err != nil || in.Known {
		t.Fatalf("inspect of an unknown rule: %+v %v", in, err)
	}
	if got := c.AllowAll(context.Background(), clientlib.Check{Rule: "user", Key: "u", Cost: 1}, clientlib.Check{Rule: "route", Key: "r", Cost: 2}); !got.Allowed || got.Remaining != 0 {
		t.Fatalf("multi-check over the socket: %+v", got)
	}

	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	if _, err := os.Stat(d.SocketPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
}

func TestRunRefusesSocketOfLiveDaemon(t *testing.T) {
	d, _, _ := newDaemon(t, testRules)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	<-d.Ready()
	defer func() { cancel(); <-ran }()

	s := config.DefaultSettings()
	s.SocketPath = d.SocketPath()
	second, err := New(Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Run(context.Background()); !errors.Is(err, ipc.ErrSocketInUse) {
		t.Fatalf("second daemon on the same socket: %v", err)
	}
}

func TestGossipKeysAndKeyrings(t *testing.T) {
	for _, tt := range []struct {
		in string
		ok bool
	}{
		{"MDEyMzQ1Njc4OWFiY2RlZg==", true},                     // 16 bytes
		{"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", true}, // 32 bytes
		{"c2hvcnQ=", false},                                    // 5 bytes
		{"not base64!", false},
	} {
		if _, err := DecodeKey(tt.in); (err == nil) != tt.ok {
			t.Errorf("DecodeKey(%q) err = %v, want ok=%v", tt.in, err, tt.ok)
		}
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "keyring.json")
	os.WriteFile(good, []byte(`["MDEyMzQ1Njc4OWFiY2RlZg==", "ZmVkY2JhOTg3NjU0MzIxMA=="]`), 0o600)
	kr, err := loadKeyring(good)
	if err != nil || len(kr.GetKeys()) != 2 || string(kr.GetPrimaryKey()) != "0123456789abcdef" {
		t.Fatalf("keyring: %v %v", kr, err)
	}
	for _, bad := range []string{`[]`, `{"k": 1}`, `["c2hvcnQ="]`} {
		path := filepath.Join(dir, "bad.json")
		os.WriteFile(path, []byte(bad), 0o600)
		if _, err := loadKeyring(path); err == nil || !strings.Contains(err.Error(), "bad.json") {
			t.Errorf("keyring %s: err %v", bad, err)
		}
	}
}

func TestShadowAndSoftRules(t *testing.T) {
	d, _, _ := newDaemon(t, "rules:\n  shadowed:\n    rate: 1/1h\n    shadow: true\n  softy:\n    rate: 10/1h\n    soft_percent: 20\n")
	var statuses []ipc.Status
	for range 3 {
		ok, r := decide(t, d, checks("shadowed", "k"))
		if !ok {
			t.Fatalf("a shadow rule denied: %+v", r)
		}
		statuses = append(statuses, r[0].Status)
	}
	if statuses[0] != ipc.StatusOK || statuses[1] != ipc.StatusShadowDenied || statuses[2] != ipc.StatusShadowDenied {
		t.Fatalf("shadow statuses %v", statuses)
	}
	if bal, _ := d.Balance("shadowed", "k"); bal != 0 {
		t.Fatalf("shadow-admitted requests were charged: balance %v", bal)
	}
	var admitted, soft int
	for range 13 {
		ok, r := decide(t, d, checks("softy", "k"))
		if ok {
			admitted++
		}
		if r[0].Status == ipc.StatusSoft {
			soft++
		}
	}
	if admitted != 12 || soft != 2 {
		t.Fatalf("soft rule admitted %d (%d soft), want 12 with 2 soft (20%% of a burst of 10)", admitted, soft)
	}

	// In a multi-check the soft margin applies per check, and a soft check
	// is charged only if the whole request is admitted.
	admitted, soft = 0, 0
	for range 13 {
		ok, r := decide(t, d, checks("softy", "m", "softy", "other-"+fmt.Sprint(admitted)))
		if ok {
			admitted++
		}
		if r[0].Status == ipc.StatusSoft {
			soft++
		}
	}
	if admitted != 12 || soft != 2 {
		t.Fatalf("multi-check: soft rule admitted %d (%d soft), want 12 with 2 soft", admitted, soft)
	}
	if bal, _ := d.Balance("softy", "m"); bal != -2 {
		t.Fatalf("multi-check soft balance %v, want -2 (the refused 13th charged nothing)", bal)
	}
	ok, _ := decide(t, d, checks("softy", "fresh", "shadowed", "k2", "softy", "m"))
	if ok {
		t.Fatal("a request with one check beyond the soft margin was admitted")
	}
	if bal, _ := d.Balance("softy", "fresh"); bal != 10 {
		t.Fatalf("a refused multi-check charged its other checks: balance %v", bal)
	}
}
