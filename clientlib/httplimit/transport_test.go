package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// reply is one scripted response.
type reply struct {
	code    int
	headers map[string]string
}

// scriptServer answers requests with its replies in order (200 once they run out)
// and records the bodies it received.
func scriptServer(t *testing.T, replies ...reply) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		i := len(bodies)
		bodies = append(bodies, string(b))
		mu.Unlock()
		rep := reply{code: 200}
		if i < len(replies) {
			rep = replies[i]
		}
		for k, v := range rep.headers {
			w.Header().Set(k, v)
		}
		w.WriteHeader(rep.code)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), bodies...) }
}

// fakeTime is an injected clock whose Sleep advances it and records the waits.
type fakeTime struct {
	now   time.Time
	waits []time.Duration
}

func (f *fakeTime) transport() *Transport {
	f.now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	return &Transport{
		Now: func() time.Time { return f.now },
		Sleep: func(ctx context.Context, d time.Duration) error {
			f.waits = append(f.waits, d)
			f.now = f.now.Add(d)
			return ctx.Err()
		},
		Rand: func() float64 { return 0.5 },
	}
}

func TestTransportSchedule(t *testing.T) {
	date := time.Date(2026, 11, 21, 12, 0, 7, 0, time.UTC).Format(http.TimeFormat)
	tests := []struct {
		name      string
		replies   []reply
		method    string
		wantCode  int
		wantWaits []time.Duration
	}{
		{"Retry-After seconds", []reply{{429, map[string]string{"Retry-After": "2"}}}, "GET", 200, []time.Duration{2 * time.Second}},
		{"Retry-After date", []reply{{503, map[string]string{"Retry-After": date}}}, "GET", 200, []time.Duration{7 * time.Second}},
		{"RateLimit reset", []reply{{429, map[string]string{"RateLimit": `"api";r=0;t=3`}}}, "GET", 200, []time.Duration{3 * time.Second}},
		{"no header: full-jitter backoff doubling", []reply{{429, nil}, {429, nil}, {502, nil}}, "GET", 200,
			[]time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}},
		{"attempts capped: the last 429 is returned", []reply{{429, nil}, {429, nil}, {429, nil}, {429, nil}, {429, nil}}, "GET", 429,
			[]time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}},
		{"a wait longer than MaxWait is handed back", []reply{{429, map[string]string{"Retry-After": "3600"}}}, "GET", 429, nil},
		{"POST is not retried", []reply{{429, map[string]string{"Retry-After": "1"}}}, "POST", 429, nil},
		{"500 is not retried", []reply{{500, nil}}, "GET", 500, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := scriptServer(t, tt.replies...)
			ft := &fakeTime{}
			client := &http.Client{Transport: ft.transport()}
			req, _ := http.NewRequest(tt.method, srv.URL, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantCode)
			}
			if len(ft.waits) != len(tt.wantWaits) {
				t.Fatalf("waits %v, want %v", ft.waits, tt.wantWaits)
			}
			for i := range ft.waits {
				if ft.waits[i] != tt.wantWaits[i] {
					t.Fatalf("waits %v, want %v", ft.waits, tt.wantWaits)
				}
			}
		})
	}
}

func TestTransportReplaysBodiesWithIdempotencyKey(t *testing.T) {
	srv, bodies := scriptServer(t, reply{429, map[string]string{"Retry-After": "1"}})
	ft := &fakeTime{}
	client := &http.Client{Transport: ft.transport()}
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("payload"))
	req.Header.Set("Idempotency-Key", "abc")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := bodies(); resp.StatusCode != 200 || len(got) != 2 || got[0] != "payload" || got[1] != "payload" {
		t.Fatalf("status %d bodies %q", resp.StatusCode, got)
	}
}

func TestTransportTotalBudgetAndContext(t *testing.T) {
	srv, _ := scriptServer(t, reply{429, map[string]string{"Retry-After": "20"}}, reply{429, map[string]string{"Retry-After": "20"}}, reply{429, map[string]string{"Retry-After": "20"}})
	ft := &fakeTime{}
	tr := ft.transport()
	tr.MaxTotal = 30 * time.Second
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || len(ft.waits) != 1 {
		t.Fatalf("status %d after waits %v: want one 20s wait, then stop inside the 30s budget", resp.StatusCode, ft.waits)
	}

	// Real clock: a context cancelled while waiting out a 20s Retry-After
	// ends the wait at once.
	srv2, _ := scriptServer(t, reply{429, map[string]string{"Retry-After": "20"}})
	ctx, cancel := context.WithCancel(context.Background())
	real := &Transport{Base: cancelAfterFirst{http.DefaultTransport, cancel}}
	req, _ := http.NewRequestWithContext(ctx, "GET", srv2.URL, nil)
	start := time.Now()
	if _, err := real.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("cancellation took %s to end the wait", el)
	}
}

// cancelAfterFirst cancels the request's context once a response has come.
type cancelAfterFirst struct {
	base   http.RoundTripper
	cancel context.CancelFunc
}

func (c cancelAfterFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	c.cancel()
	return resp, err
}
