package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/config"
)

// rulesService is a test rules service: it serves one document with an
// ETag, answers conditional requests with 304, and can be made to fail.
type rulesService struct {
	mu          sync.Mutex
	body        []byte
	etag        string
	version     int
	failing     int // answer 500 while > 0, counting down
	requests    int
	notModified int
	conditional int
}

func (s *rulesService) set(body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body = body
	s.version++
	s.etag = fmt.Sprintf(`"v%d"`, s.version)
}

func (s *rulesService) fail(n int) {
	s.mu.Lock()
	s.failing = n
	s.mu.Unlock()
}

func (s *rulesService) counts() (requests, notModified, conditional int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, s.notModified, s.conditional
}

func (s *rulesService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if s.failing > 0 {
		s.failing--
		http.Error(w, "rules database down", http.StatusInternalServerError)
		return
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		s.conditional++
		if inm == s.etag {
			s.notModified++
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	w.Header().Set("ETag", s.etag)
	w.Header().Set("Content-Type", "application/yaml")
	w.Write(s.body)
}

func newURLDaemon(t *testing.T, url string) *Daemon {
	t.Helper()
	s := config.DefaultSettings()
	s.SocketPath = filepath.Join(t.TempDir(), "d.sock")
	s.RulesURL = url
	s.RulesPollInterval = 10 * time.Millisecond
	d, err := New(Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func pollInBackground(t *testing.T, d *Daemon) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.pollRules(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestRulesFromURL(t *testing.T) {
	svc := &rulesService{}
	svc.set(rulesWithCount(4))
	srv := httptest.NewServer(svc)
	defer srv.Close()
	url := srv.URL + "/rules.yaml"

	d := newURLDaemon(t, url)
	if got := d.Rules(); got.Source != url || got.ByName["r"].Limits[0].Count() != 4 {
		t.Fatalf("rules at start: source %q, %v", got.Source, got.ByName)
	}
	for range 4 {
		decide(t, d, checks("r", "k")) // spends the burst
	}
	pollInBackground(t, d)

	// Unchanged: conditional requests answered 304, nothing reloaded.
	pollUntil(t, "three polls answered 304", func() bool { _, nm, _ := svc.counts(); return nm >= 3 })
	if ok, failed := d.ReloadCounts(); ok != 1 || failed != 0 {
		t.Errorf("after 304s: %d reloads ok, %d failed; want 1 (the first fetch), 0", ok, failed)
	}

	// A new version is applied, and the spent bucket is rescaled, not refilled.
	svc.set(rulesWithCount(8))
	waitRate(t, d, "r", 8)
	if b, _ := d.Balance("r", "k"); b >= 4 {
		t.Errorf("balance after the limit change = %v: the spent bucket was reset", b)
	}

	// An invalid version is refused once, naming the URL and line, and the
	// last good rules stay.
	svc.set([]byte("rules:\n  r:\n    rate: 8/1s\n    burst: -3\n"))
	pollUntil(t, "the bad document is refused", func() bool { _, failed := d.ReloadCounts(); return failed == 1 })
	_, before, _ := svc.counts()
	pollUntil(t, "three more polls", func() bool { _, nm, _ := svc.counts(); return nm >= before+3 })
	if _, failed := d.ReloadCounts(); failed != 1 {
		t.Errorf("the same bad document was refused %d times; want once", failed)
	}
	if e := d.lastReloadError.Load(); e == nil || !strings.Contains(*e, url+":4:") {
		t.Errorf("reload error does not name URL and line: %v", e)
	}
	if d.Rules().ByName["r"].Limits[0].Count() != 8 {
		t.Error("a bad document changed the rules in force")
	}

	// The service fails: retried with backoff, rules kept, reported; then it
	// recovers with new rules.
	svc.fail(3)
	svc.set(rulesWithCount(6))
	waitRate(t, d, "r", 6)
	var ready map[string]any
	if got := counterValue(d.metrics.fetchErrors); got != 3 {
		t.Errorf("fetch errors = %d, want 3", got)
	}
	readyJSON(t, d, &ready)
	if ready["rules_url_reachable"] != true || ready["rules_source"] != url {
		t.Errorf("/readyz after recovery: %v", ready)
	}
	if _, _, cond := svc.counts(); cond == 0 {
		t.Error("no request was conditional")
	}
}

func TestRulesURLUnreachableAtStart(t *testing.T) {
	svc := &rulesService{}
	svc.set(rulesWithCount(5))
	svc.fail(1 << 30)
	srv := httptest.NewServer(svc)
	defer srv.Close()

	d := newURLDaemon(t, srv.URL)
	if d.Rules().Source != NoRulesSource || len(d.Rules().ByName) != 0 || d.Rules().UnknownRule != config.UnknownRuleAllow {
		t.Fatalf("started on %q (%d rules); want no rules, failing open, while the service is down and there is no cache", d.Rules().Source, len(d.Rules().ByName))
	}
	var ready map[string]any
	readyJSON(t, d, &ready)
	if ready["rules_url_reachable"] != false || !strings.Contains(fmt.Sprint(ready["rules_url_error"]), "500") || ready["rules_none_failing_open"] != true {
		t.Errorf("/readyz does not report the unreachable service and the missing rules: %v", ready)
	}
	pollInBackground(t, d)
	pollUntil(t, "a few retries", func() bool { r, _, _ := svc.counts(); return r >= 3 })
	svc.fail(0)
	waitRate(t, d, "r", 5)
}

func readyJSON(t *testing.T, d *Daemon, v any) {
	t.Helper()
	if err := json.Unmarshal(get(t, d.AdminHandler(), "/readyz").Body.Bytes(), v); err != nil {
		t.Fatal(err)
	}
}

func TestRetryDelayBacksOffWithJitter(t *testing.T) {
	top := func() float64 { return 1 - 1e-12 }
	bottom := func() float64 { return 0 }
	for _, c := range []struct {
		failures int
		interval time.Duration
		want     time.Duration // upper end; the lower end is half
	}{
		{1, 30 * time.Second, time.Second},
		{2, 30 * time.Second, 2 * time.Second},
		{6, 30 * time.Second, 32 * time.Second},
		{20, 30 * time.Second, maxRulesBackoff},
		{1, 10 * time.Millisecond, 10 * time.Millisecond},
		{4, 10 * time.Millisecond, 80 * time.Millisecond},
		{100, time.Hour, time.Hour}, // never longer than the poll interval, if that is longer than the cap
	} {
		hi, lo := retryDelay(c.failures, c.interval, top), retryDelay(c.failures, c.interval, bottom)
		if hi < c.want-time.Millisecond || hi > c.want || lo != c.want/2 {
			t.Errorf("retryDelay(%d, %v) in [%v, %v]; want [%v, %v]", c.failures, c.interval, lo, hi, c.want/2, c.want)
		}
	}
}
