package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/daemon/daemontest"
)

const benchRules = `
rules:
  api:
    rate: 1000000000/1s
`

// BenchmarkCheckHandler is one /v1/check of one check through the handler,
// no network: the JSON and validation cost over the decision itself.
func BenchmarkCheckHandler(b *testing.B) {
	d := newDaemonRules(b, benchRules)
	s := newServerTB(b, d)
	body := `{"checks":[{"rule":"api","key":"user:1"}]}`
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/check", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatal(w.Code, w.Body)
		}
	}
}

// BenchmarkCheckLoopback is /v1/check over loopback HTTP/1.1 with
// keep-alive, as a service in another language would call it: one caller
// (ns/op is the round trip), and GOMAXPROCS×4 callers (ns/op is the
// inverse of the throughput).
func BenchmarkCheckLoopback(b *testing.B) {
	d := newDaemonRules(b, benchRules)
	s, err := New(Config{Decider: d, Limiter: d.Local(), MaxBody: 1024, MaxBatch: 4, MaxKeyLen: 64, MaxConns: 1024})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Listen("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Shutdown(b.Context()) })
	url := "http://" + s.Addr().String() + "/v1/check"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var keys atomic.Int64
	call := func(key string) error {
		resp, err := client.Post(url, "application/json", strings.NewReader(`{"checks":[{"rule":"api","key":"`+key+`"}]}`))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	b.Run("callers=1", func(b *testing.B) {
		for b.Loop() {
			if err := call("user:1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("callers=4xGOMAXPROCS", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprint("user:", keys.Add(1))
			for pb.Next() {
				if err := call(key); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkSocketForComparison is the same decision over the daemon's Unix
// socket with the Go client, in the same run, as the baseline the HTTP API
// is compared with.
func BenchmarkSocketForComparison(b *testing.B) {
	d := daemontest.Start(b, benchRules)
	c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: d.SocketPath(), Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	var keys atomic.Int64
	b.Run("callers=1", func(b *testing.B) {
		for b.Loop() {
			if dec := c.Allow(context.Background(), "api", "user:1"); !dec.Allowed || dec.FailedOpen {
				b.Fatal(dec)
			}
		}
	})
	b.Run("callers=4xGOMAXPROCS", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprint("user:", keys.Add(1))
			for pb.Next() {
				if dec := c.Allow(context.Background(), "api", key); !dec.Allowed || dec.FailedOpen {
					b.Error(dec)
					return
				}
			}
		})
	})
}
