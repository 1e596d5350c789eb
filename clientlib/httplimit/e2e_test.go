package httplimit

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/daemon/daemontest"
)

// Through a real daemon: the middleware's 429 comes from the shared bucket.
func TestMiddlewareWithRealDaemon(t *testing.T) {
	d := daemontest.Start(t, "rules:\n  api:\n    rate: 2/1h\n")
	c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: d.SocketPath(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := New(Config{Limiter: c, Identity: Identity{Header: "X-API-Key"}, Default: []Limit{{Rule: "api"}}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	codes := []int{}
	for range 3 {
		codes = append(codes, serve(h, "GET", "/", map[string]string{"X-API-Key": "alice"}).Code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("codes %v, want 200 200 429", codes)
	}
	w := serve(h, "GET", "/", map[string]string{"X-API-Key": "alice"})
	if w.Header().Get("Retry-After") != "1800" || w.Header().Get("RateLimit-Policy") != `"api";q=2;w=3600` {
		t.Fatalf("headers %v", w.Header())
	}
	if serve(h, "GET", "/", map[string]string{"X-API-Key": "bob"}).Code != 200 {
		t.Fatal("bob throttled by alice's bucket")
	}
}
