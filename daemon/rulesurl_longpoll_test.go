package daemon

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/config"
)

// longPollService serves one document with an ETag, and holds a matching
// conditional request that says "Prefer: wait=N" until the document
// changes (or the test ends).
type longPollService struct {
	rulesService
	changed chan struct{} // closed and replaced at every set
	held    int           // requests held
	stop    chan struct{}
}

func newLongPollService() *longPollService {
	return &longPollService{changed: make(chan struct{}), stop: make(chan struct{})}
}

func (s *longPollService) set(body []byte) {
	s.rulesService.set(body)
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

func (s *longPollService) heldCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

func (s *longPollService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	match := r.Header.Get("If-None-Match") == s.etag && strings.HasPrefix(r.Header.Get("Prefer"), "wait=")
	ch := s.changed
	if match {
		s.held++
	}
	s.mu.Unlock()
	if match {
		select {
		case <-ch:
		case <-s.stop:
		case <-r.Context().Done():
		}
	}
	s.rulesService.ServeHTTP(w, r)
}

func newLongPollDaemon(t *testing.T, url string, interval, wait time.Duration) *Daemon {
	t.Helper()
	s := config.DefaultSettings()
	s.SocketPath = filepath.Join(t.TempDir(), "d.sock")
	s.RulesURL = url
	s.RulesPollInterval = interval
	s.RulesWait = wait
	d, err := New(Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestLongPollAppliesChangesWithoutWaitingForThePollInterval: with an
// hour's poll interval only the held request can bring the changes.
func TestLongPollAppliesChangesWithoutWaitingForThePollInterval(t *testing.T) {
	svc := newLongPollService()
	svc.set(rulesWithCount(4))
	srv := httptest.NewServer(svc)
	defer srv.Close()
	defer close(svc.stop)

	d := newLongPollDaemon(t, srv.URL, time.Hour, 30*time.Second)
	if d.Rules().ByName["r"].Limits[0].Count() != 4 {
		t.Fatal("first rules not applied")
	}
	pollInBackground(t, d)
	for i, n := range []int{8, 6, 9} {
		pollUntil(t, "a long-poll held", func() bool { return svc.heldCount() > i })
		svc.set(rulesWithCount(n))
		waitRate(t, d, "r", int64(n))
	}
	if _, failed := d.ReloadCounts(); failed != 0 {
		t.Errorf("%d failed reloads", failed)
	}
}

// TestLongPollAgainstAServerThatDoesNotHoldFallsBackToPolling: a plain
// server answering 304 at once is polled every poll interval, and its
// changes still arrive.
func TestLongPollAgainstAServerThatDoesNotHoldFallsBackToPolling(t *testing.T) {
	svc := &rulesService{}
	svc.set(rulesWithCount(4))
	srv := httptest.NewServer(svc)
	defer srv.Close()
	d := newLongPollDaemon(t, srv.URL, 10*time.Millisecond, 30*time.Second)
	pollInBackground(t, d)
	pollUntil(t, "a few 304s", func() bool { _, nm, _ := svc.counts(); return nm >= 3 })
	svc.set(rulesWithCount(7))
	waitRate(t, d, "r", 7)
}

func TestLongPollPause(t *testing.T) {
	const wait, interval = 30 * time.Second, 10 * time.Second
	tests := []struct {
		name    string
		elapsed time.Duration
		applied bool
		want    time.Duration
	}{
		{"held the whole wait, 304", wait, false, 0},
		{"held half the wait", wait / 2, false, 0},
		{"a change after a second", time.Second, true, 0},
		{"304 at once: not holding", time.Millisecond, false, interval},
		{"200 at once, nothing new: no validators", time.Millisecond, false, interval},
	}
	for _, tt := range tests {
		if got := longPollPause(tt.elapsed, wait, interval, tt.applied); got != tt.want {
			t.Errorf("%s: pause %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestRulesWaitValidated: the setting's bounds.
func TestRulesWaitValidated(t *testing.T) {
	for _, c := range []struct {
		wait time.Duration
		ok   bool
	}{{0, true}, {time.Second, true}, {30 * time.Second, true}, {config.MaxRulesWait, true},
		{-time.Second, false}, {500 * time.Millisecond, false}, {config.MaxRulesWait + time.Second, false}} {
		s := config.DefaultSettings()
		s.RulesURL = "http://127.0.0.1:1/rules.yaml"
		s.RulesWait = c.wait
		if err := s.Validate(); (err == nil) != c.ok {
			t.Errorf("RulesWait %v: Validate() = %v", c.wait, err)
		}
	}
}
