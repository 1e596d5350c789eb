package httplimit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

func startProxy(t *testing.T, upstream http.Handler, lim Limiter) (*httptest.Server, *Proxy) {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	m, err := New(Config{Limiter: lim, Identity: Identity{ClientIP: true}, Default: []Limit{{Rule: "api"}}})
	if err != nil {
		t.Fatal(err)
	}
	p := NewProxy(u, m)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv, p
}

// countdown admits the first n decisions, then throttles.
func countdown(n int64) *scripted {
	var left atomic.Int64
	left.Store(n)
	return &scripted{decide: func([]clientlib.Check) clientlib.Decision {
		if left.Add(-1) >= 0 {
			return clientlib.Decision{Allowed: true, Limit: n, Remaining: left.Load(), Period: time.Second, Denied: -1, Deciding: 0}
		}
		return clientlib.Decision{Allowed: false, Limit: n, RetryAfter: time.Second, Period: time.Second, Denied: 0, Deciding: 0}
	}}
}

func TestProxyForwardsAdmittedAndStopsThrottled(t *testing.T) {
	var reached atomic.Int64
	srv, _ := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		fmt.Fprintf(w, "xff=%s host=%s", r.Header.Get("X-Forwarded-For"), r.Host)
	}), countdown(2))
	var codes []int
	for range 3 {
		resp, err := http.Get(srv.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == 200 && (!strings.Contains(string(body), "xff=127.0.0.1") || resp.Header.Get("X-Ratelimit-Limit") != "2") {
			t.Fatalf("forwarded response %q headers %v", body, resp.Header)
		}
	}
	if fmt.Sprint(codes) != "[200 200 429]" || reached.Load() != 2 {
		t.Fatalf("codes %v, upstream reached %d times", codes, reached.Load())
	}
}

func TestProxyStreamsResponses(t *testing.T) {
	release := make(chan struct{})
	srv, _ := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first\n"))
		w.(http.Flusher).Flush()
		<-release // the client must see "first" before the upstream finishes
		w.Write([]byte("second\n"))
	}), countdown(10))
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first chunk %q %v", line, err)
	}
	close(release)
	if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
		t.Fatalf("rest %q", rest)
	}
}

func TestProxyPassesUpgrades(t *testing.T) {
	srv, _ := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", 400)
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw) // echo
	}), countdown(10))
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	conn.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q %v", buf, err)
	}
}

func TestProxySwapsLimitsWhileServing(t *testing.T) {
	srv, p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), countdown(0))
	get := func() int {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get() != 429 {
		t.Fatal("countdown(0) admitted")
	}
	m, _ := New(Config{Limiter: countdown(5), Identity: Identity{ClientIP: true}, Default: []Limit{{Rule: "api"}}})
	p.SetMiddleware(m)
	if get() != 200 {
		t.Fatal("new limits not in force")
	}
}
