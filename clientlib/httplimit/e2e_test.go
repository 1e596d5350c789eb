package httplimit

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
)

// Through a real daemon: the middleware's 429 comes from the shared bucket.
func TestMiddlewareWithRealDaemon(t *testing.T) {
	dir, err := os.MkdirTemp("", "hl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	rules := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte("rules:\n  api:\n    rate: 2/1h\n"), 0o600)
	s := config.DefaultSettings()
	s.SocketPath, s.RulesPath = filepath.Join(dir, "d.sock"), rules
	d, err := daemon.New(daemon.Config{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	<-d.Ready()
	c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: s.SocketPath, Timeout: 5 * time.Second})
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
