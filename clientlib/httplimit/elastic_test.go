package httplimit

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// stepClock is a clock the test's upstream moves forward: the upstream's
// latency is whatever it advances the clock by, with no real waiting.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestElasticAdmitsExtraOnlyWhileUpstreamIsHealthy(t *testing.T) {
	e := embedded(t, "rules:\n  two:\n    rate: 2/1h\n")
	clk := &stepClock{t: time.Unix(1_800_000_000, 0)}
	var mu sync.Mutex
	latency, status := 5*time.Millisecond, 200
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		l, s := latency, status
		mu.Unlock()
		clk.Advance(l)
		w.WriteHeader(s)
	})
	m, err := New(Config{
		Limiter: e, Identity: Identity{Header: "X-API-Key"}, Now: clk.Now,
		Routes: []Route{{Pattern: "/", Limits: []Limit{{Rule: "two"}},
			Elastic: &Elastic{Extra: 1, MaxP99: 50 * time.Millisecond, MaxErrorRate: 0.1, Window: 10 * time.Second, MinRequests: 5}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Wrap(upstream)
	get := func(key string) (int, bool) {
		w := serve(h, "GET", "/", map[string]string{"X-API-Key": key})
		return w.Code, w.Header().Get("X-Ratelimit-Elastic") == "1"
	}
	// Not yet proven healthy: the hard limit.
	get("alice")
	get("alice")
	if code, _ := get("alice"); code != 429 {
		t.Fatalf("over the limit before the upstream proved healthy: %d", code)
	}
	for i := range 5 { // healthy traffic from others
		get(string(rune('a' + i)))
	}
	// Healthy: up to 100% extra (2 more for alice), then the hard stop.
	for i := range 2 {
		if code, elastic := get("alice"); code != 200 || !elastic {
			t.Fatalf("elastic request %d: %d elastic=%v", i, code, elastic)
		}
	}
	if code, _ := get("alice"); code != 429 {
		t.Fatalf("beyond the elastic share: %d", code)
	}
	// The upstream slows down: p99 over the target, back to the hard limit.
	mu.Lock()
	latency = 200 * time.Millisecond
	mu.Unlock()
	for i := range 10 {
		get(string(rune('k' + i)))
	}
	get("bob")
	get("bob")
	if code, _ := get("bob"); code != 429 {
		t.Fatalf("slow upstream still got elastic admissions: %d", code)
	}
	// Errors count too: fast again, but failing.
	clk.Advance(11 * time.Second) // the slow window expires
	mu.Lock()
	latency, status = time.Millisecond, 503
	mu.Unlock()
	for i := range 10 {
		get(string(rune('u' + i)))
	}
	get("carol")
	get("carol")
	if code, _ := get("carol"); code != 429 {
		t.Fatalf("failing upstream still got elastic admissions: %d", code)
	}
}
