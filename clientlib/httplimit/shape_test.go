package httplimit

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
)

type frozenClock struct{ t time.Time }

func (f *frozenClock) Now() time.Time { return f.t }

// embedded starts an in-process limiter on a frozen clock.
func embedded(t *testing.T, rules string) *daemon.Embedded {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	os.WriteFile(path, []byte(rules), 0o600)
	s := config.DefaultSettings()
	s.RulesPath = path
	clk := &frozenClock{t: time.Unix(1_800_000_000, 0)}
	e, err := daemon.Embed(daemon.Config{Settings: s, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func shaped(t *testing.T, lim Limiter, shape Shape, wait func(context.Context, time.Duration) error) (http.Handler, *atomic.Int64) {
	t.Helper()
	var reached atomic.Int64
	m, err := New(Config{
		Limiter: lim, Identity: Identity{Header: "X-API-Key"},
		Routes: []Route{{Pattern: "GET /slow", Limits: []Limit{{Rule: "one"}}, Shape: &shape}},
		Wait:   wait,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) })), &reached
}

func TestShapingHoldsInArrivalOrderWithinMaxWait(t *testing.T) {
	e := embedded(t, "rules:\n  one:\n    rate: 1/1s\n")
	var mu sync.Mutex
	var waits []time.Duration
	h, reached := shaped(t, e, Shape{MaxWait: 2500 * time.Millisecond, MaxQueue: 10}, func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		return nil
	})
	var codes []int
	for range 4 {
		codes = append(codes, serve(h, "GET", "/slow", map[string]string{"X-API-Key": "k"}).Code)
	}
	want := []time.Duration{time.Second, 2 * time.Second} // the first goes at once; the fourth's turn is 3s away
	if len(waits) != 2 || waits[0] != want[0] || waits[1] != want[1] {
		t.Fatalf("held for %v, want %v", waits, want)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 200 || codes[3] != 429 || reached.Load() != 3 {
		t.Fatalf("codes %v, reached %d", codes, reached.Load())
	}
}

func TestShapingQueueCapAndDepartedClients(t *testing.T) {
	e := embedded(t, "rules:\n  one:\n    rate: 1/1s\n")
	holding := make(chan struct{})
	release := make(chan struct{})
	h, _ := shaped(t, e, Shape{MaxWait: time.Minute, MaxQueue: 1}, func(ctx context.Context, d time.Duration) error {
		holding <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	serve(h, "GET", "/slow", map[string]string{"X-API-Key": "k"}) // takes the only token
	done := make(chan int)
	go func() { done <- serve(h, "GET", "/slow", map[string]string{"X-API-Key": "k"}).Code }()
	<-holding // the second request is held: the queue of one is full
	if code := serve(h, "GET", "/slow", map[string]string{"X-API-Key": "k"}).Code; code != 429 {
		t.Fatalf("a request past the queue cap got %d, want 429 at once", code)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("the held request got %d", code)
	}
	// A client that leaves while held never reaches the handler.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "/slow", nil)
	req.Header.Set("X-API-Key", "k2")
	serve(h, "GET", "/slow", map[string]string{"X-API-Key": "k2"}) // spends k2's token
	go func() { <-holding; cancel() }()
	h2, reached2 := shaped(t, e, Shape{MaxWait: time.Minute, MaxQueue: 1}, func(ctx context.Context, d time.Duration) error {
		holding <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	h2.ServeHTTP(&recorder{}, req)
	if reached2.Load() != 0 {
		t.Fatal("a departed client's request reached the handler")
	}
}

// recorder is a minimal ResponseWriter for a request nobody reads.
type recorder struct{ h http.Header }

func (r *recorder) Header() http.Header {
	if r.h == nil {
		r.h = http.Header{}
	}
	return r.h
}
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(int)             {}

// A leaky_bucket rule shapes: requests that arrive together leave one
// emission interval apart, where a token bucket of the same limit lets the
// whole burst through at once.
func TestShapingALeakyBucketSpacesABurst(t *testing.T) {
	for _, tt := range []struct {
		algorithm string
		want      []time.Duration // holds, in arrival order (the first is never held)
	}{
		{"token_bucket", nil},
		{"leaky_bucket", []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond}},
	} {
		t.Run(tt.algorithm, func(t *testing.T) {
			e := embedded(t, "rules:\n  one:\n    rate: 4/1s\n    algorithm: "+tt.algorithm+"\n")
			var waits []time.Duration
			h, reached := shaped(t, e, Shape{MaxWait: 2 * time.Second, MaxQueue: 10}, func(ctx context.Context, d time.Duration) error {
				waits = append(waits, d)
				return nil
			})
			for range 4 {
				if code := serve(h, "GET", "/slow", map[string]string{"X-API-Key": "k"}).Code; code != 200 {
					t.Fatalf("got %d", code)
				}
			}
			if !slices.Equal(waits, tt.want) || reached.Load() != 4 {
				t.Fatalf("held for %v, want %v; %d reached the handler", waits, tt.want, reached.Load())
			}
		})
	}
}
