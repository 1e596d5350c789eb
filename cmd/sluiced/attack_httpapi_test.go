package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// These tests attack a real sluiced's HTTP decision API (--http-listen) as
// a hostile local caller would, and put a real nginx in front of a service
// with the forward-auth recipe the README gives.

// httpAPINode is a sluiced process serving the HTTP decision API.
type httpAPINode struct {
	p    *proc
	sock string
	addr string // host:port of the decision API
}

// startHTTPAPINode starts sluiced with rules (and forward-auth routes, when
// not empty) and the decision API on a free loopback port, and waits until
// the API answers.
func startHTTPAPINode(t *testing.T, rules, routes string, args ...string) *httpAPINode {
	t.Helper()
	// The HTTP port is picked free, then bound by the daemon: another test
	// run on the machine may take it in between (seen with two suites side
	// by side, and that run's daemon answered this one's probe). So the
	// node counts as up only once it says it serves (every address bound),
	// and a bind lost to another process is retried on a new port.
	for attempt := 1; ; attempt++ {
		n, up := tryHTTPAPINode(t, rules, routes, args...)
		if up {
			return n
		}
		if attempt == 3 || !strings.Contains(n.p.stderr.String(), "address already in use") {
			t.Fatalf("sluiced exited:\n%s", n.p.stderr.String())
		}
	}
}

// tryHTTPAPINode starts a node on a free port and reports whether it came
// up (false: it exited).
func tryHTTPAPINode(t *testing.T, rules, routes string, args ...string) (*httpAPINode, bool) {
	t.Helper()
	dir := tempDir(t)
	n := &httpAPINode{sock: filepath.Join(dir, "h.sock"), addr: "127.0.0.1:" + freePort(t)}
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	all := []string{"--socket", n.sock, "--rules", rulesPath, "--no-watch", "--http-listen", n.addr}
	if routes != "" {
		routesPath := filepath.Join(dir, "routes.yaml")
		if err := os.WriteFile(routesPath, []byte(routes), 0o600); err != nil {
			t.Fatal(err)
		}
		all = append(all, "--http-routes", routesPath)
	}
	n.p = startDaemon(t, append(all, args...)...)
	exited := false
	eventually(t, "the decision API answers", func() bool {
		select {
		case err := <-n.p.exited:
			n.p.exited <- err
			exited = true
			return true
		default:
		}
		if !strings.Contains(n.p.stderr.String(), "sluiced serving") { // logged once all of its addresses are bound
			return false
		}
		code, _ := n.check(t, `{"checks":[{"rule":"probe","key":"probe"}]}`)
		return code == http.StatusOK
	})
	return n, !exited
}

// httpAPIClient has a short timeout: every answer is expected in time.
var httpAPIClient = &http.Client{Timeout: 10 * time.Second}

// check POSTs body to /v1/check and returns the status and body ("" and 0
// when the request failed).
func (n *httpAPINode) check(t *testing.T, body string) (int, string) {
	t.Helper()
	resp, err := httpAPIClient.Post("http://"+n.addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

type checkAnswer struct {
	Allowed bool `json:"allowed"`
	Results []struct {
		Status    string  `json:"status"`
		Allowed   bool    `json:"allowed"`
		Limit     uint64  `json:"limit"`
		Remaining uint64  `json:"remaining"`
		Retry     float64 `json:"retry_after"`
	} `json:"results"`
	Error string `json:"error"`
}

func (n *httpAPINode) decide(t *testing.T, body string) checkAnswer {
	t.Helper()
	code, b := n.check(t, body)
	var a checkAnswer
	if code != http.StatusOK || json.Unmarshal([]byte(b), &a) != nil {
		t.Fatalf("POST /v1/check %s: %d %s", body, code, b)
	}
	return a
}

const httpAPIRules = `
unknown_rule: deny
rules:
  api:
    rate: 5/1h
  other:
    rate: 100/1h
`

// The HTTP API decides on the daemon's own buckets: what it spends, the
// socket's clients see spent, and the other way round; several checks are
// all or nothing, as the socket's CHECK.
func TestHTTPAPIDecidesOnTheDaemonsBuckets(t *testing.T) {
	t.Parallel()
	n := startHTTPAPINode(t, httpAPIRules, "")
	// Dial waits for the first connection: a call before it would fail open.
	c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: n.sock, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		if a := n.decide(t, `{"checks":[{"rule":"api","key":"user:1"}]}`); !a.Allowed || a.Results[0].Remaining != uint64(4-i) {
			t.Fatalf("HTTP request %d: %+v", i, a)
		}
	}
	for i := range 2 {
		if d := c.Allow(context.Background(), "api", "user:1"); !d.Allowed || d.FailedOpen {
			t.Fatalf("socket request %d: %+v", i, d)
		}
	}
	if d := c.Allow(context.Background(), "api", "user:1"); d.Allowed {
		t.Fatalf("socket request after 5 spent: %+v, want denied", d)
	}
	a := n.decide(t, `{"checks":[{"rule":"other","key":"user:1","cost":7},{"rule":"api","key":"user:1"}]}`)
	if a.Allowed || a.Results[1].Status != "over_limit" || a.Results[1].Retry <= 0 {
		t.Fatalf("multi-check with api spent: %+v", a)
	}
	if a := n.decide(t, `{"checks":[{"rule":"other","key":"user:1"}]}`); a.Results[0].Remaining != 99 {
		t.Fatalf("other after a refused multi-check: %+v, want 99 left", a)
	}
}

// Hostile inputs get a clear 4xx (never a pass) or a closed connection, and
// cost the daemon nothing it does not bound: a body far over the cap, JSON
// nested deep, keys far longer than the store takes, the wrong content
// type, headers sent a byte at a time, connections beyond the cap. The
// socket keeps deciding throughout.
func TestHTTPAPIHostileInputs(t *testing.T) {
	t.Parallel()
	n := startHTTPAPINode(t, httpAPIRules, "", "--http-max-conns", "8", "--max-key-len", "64")
	// Dial waits for the first connection: a call before it would fail open.
	c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: n.sock, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// A 32 MiB body, streamed: refused at the cap (64 KiB), not read whole.
	t.Run("huge body", func(t *testing.T) {
		pr, pw := io.Pipe()
		var sent atomic.Int64
		go func() {
			chunk := []byte(`{"checks":[{"rule":"api","key":"` + strings.Repeat("x", 64<<10))
			for i := 0; i < 512; i++ {
				m, err := pw.Write(chunk)
				sent.Add(int64(m))
				if err != nil {
					return
				}
			}
			pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, "http://"+n.addr+"/v1/check", pr)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpAPIClient.Do(req)
		pr.CloseWithError(errors.New("done"))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "cap") {
				t.Fatalf("huge body: %d %s, want 413", resp.StatusCode, body)
			}
		}
		// Either way (413, or the server closed the connection mid-body), it did not read it all.
		if s := sent.Load(); s >= 32<<20 {
			t.Fatalf("the whole %d-byte body was accepted", s)
		}
	})
	tests := []struct {
		name, contentType, body string
		want                    int
	}{
		{"deep JSON", "application/json", `{"checks":` + strings.Repeat("[", 30000) + strings.Repeat("]", 30000) + `}`, 400},
		{"wrong content type", "text/plain", `{"checks":[{"rule":"api","key":"k"}]}`, 415},
		{"form post", "application/x-www-form-urlencoded", `checks=1`, 415},
		{"no checks", "application/json", `{}`, 400},
		{"1000 checks", "application/json", `{"checks":[` + strings.Repeat(`{"rule":"api","key":"k"},`, 999) + `{"rule":"api","key":"k"}]}`, 400},
		{"negative cost", "application/json", `{"checks":[{"rule":"api","key":"k","cost":-1}]}`, 400},
		{"cost above the burst", "application/json", `{"checks":[{"rule":"api","key":"k","cost":6}]}`, 400},
		{"empty key", "application/json", `{"checks":[{"rule":"api","key":""}]}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := httpAPIClient.Post("http://"+n.addr+"/v1/check", tt.contentType, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct{ Error string }
			if json.NewDecoder(resp.Body).Decode(&e) != nil || resp.StatusCode != tt.want || e.Error == "" {
				t.Fatalf("%d %+v, want %d with a JSON error", resp.StatusCode, e, tt.want)
			}
		})
	}
	// Keys of 60 KB (inside the body cap) are bounded to 64 bytes, limited
	// like any other key: 5 distinct long keys sharing a prefix are 5 buckets,
	// each admitting 5 and refusing the 6th.
	t.Run("long keys", func(t *testing.T) {
		for k := range 5 {
			key := strings.Repeat("k", 60_000) + fmt.Sprint(k)
			for i := range 6 {
				a := n.decide(t, `{"checks":[{"rule":"api","key":"`+key+`"}]}`)
				if a.Allowed != (i < 5) {
					t.Fatalf("long key %d, request %d: %+v", k, i, a)
				}
			}
		}
	})

	// Slowloris: 8 connections (the cap) trickling a header; a 9th is closed
	// at once; the held ones are cut at the header timeout (5 s); then the
	// API answers again. The socket decides throughout.
	t.Run("slowloris headers and the connection cap", func(t *testing.T) {
		var conns []net.Conn
		defer func() {
			for _, cn := range conns {
				cn.Close()
			}
		}()
		for range 8 {
			cn, err := net.DialTimeout("tcp", n.addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, cn)
			fmt.Fprintf(cn, "POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
		}
		stopTrickle := make(chan struct{})
		var trickling sync.WaitGroup
		trickling.Add(1)
		go func() { // one byte per connection every 200 ms, for at most 20 s
			defer trickling.Done()
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for i := 0; i < 100; i++ {
				select {
				case <-stopTrickle:
					return
				case <-tick.C:
				}
				for _, cn := range conns {
					cn.SetWriteDeadline(time.Now().Add(time.Second))
					cn.Write([]byte("a"))
				}
			}
		}()
		defer func() { close(stopTrickle); trickling.Wait() }()
		// The cap holds: a further connection is closed without an answer.
		eventually(t, "a connection beyond the cap is closed at once", func() bool {
			cn, err := net.DialTimeout("tcp", n.addr, 5*time.Second)
			if err != nil {
				return false
			}
			defer cn.Close()
			fmt.Fprintf(cn, "POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
			cn.SetReadDeadline(time.Now().Add(3 * time.Second))
			_, err = bufio.NewReader(cn).ReadByte()
			return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
		})
		if d := c.Allow(context.Background(), "other", "during-the-flood"); !d.Allowed || d.FailedOpen {
			t.Fatalf("socket decision during the flood: %+v", d)
		}
		// The trickling connections are cut at the header timeout, freeing the cap.
		for i, cn := range conns {
			cn.SetReadDeadline(time.Now().Add(15 * time.Second))
			buf := make([]byte, 512)
			_, err := cn.Read(buf) // a 408 or EOF, not a timeout of ours
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("slow connection %d still open after 15 s", i)
			}
		}
		eventually(t, "the API answers once the slow connections are cut", func() bool {
			code, _ := n.check(t, `{"checks":[{"rule":"other","key":"after"}]}`)
			return code == http.StatusOK
		})
	})
}

// nginxBinary finds nginx, skipping the test when it is missing unless
// SLUICE_REQUIRE_NGINX=1 (as .ci/run sets).
func nginxBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("SLUICE_REQUIRE_NGINX") == "1" {
		t.Fatal("nginx is not installed and SLUICE_REQUIRE_NGINX=1: apt-get install -y nginx")
	}
	t.Skip("nginx is not installed (apt-get install -y nginx); set SLUICE_REQUIRE_NGINX=1 to make this a failure")
	return ""
}

// startNginx runs nginx as an unprivileged process (nobody, when the test
// runs as root) on loopback, with the README's recipe
// (testdata/nginx-forward-auth.conf) filled in, and waits until it answers.
func startNginx(t *testing.T, sluiceHTTP, upstream string) (listen, prefix string) {
	t.Helper()
	bin := nginxBinary(t)
	prefix = tempDir(t)
	listen = "127.0.0.1:" + freePort(t)
	tmpl, err := os.ReadFile(filepath.Join("testdata", "nginx-forward-auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer("{{PREFIX}}", prefix, "{{LISTEN}}", listen, "{{SLUICE_HTTP}}", sluiceHTTP, "{{UPSTREAM}}", upstream).Replace(string(tmpl))
	confPath := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", prefix, "-c", confPath, "-e", filepath.Join(prefix, "error.log"), "-g", "daemon off;")
	runFront(t, "nginx", cmd, prefix, listen, syscall.SIGQUIT, func() string {
		log, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
		return string(log)
	})
	return listen, prefix
}

// nginx in front of a service, asking sluiced's forward-auth endpoint with
// the README's recipe, under 500 requests from 8 goroutines of one API
// key: exactly the limit is admitted, every refusal is a 429 carrying
// Retry-After and the RateLimit headers, the service sees only the admitted
// requests, and other keys are limited apart. With sluiced killed, nginx
// fails open.
func TestHTTPAPIForwardAuthBehindNginx(t *testing.T) {
	t.Parallel()
	nginxBinary(t)
	const limit = 50
	rules, routes, app, served := forwardAuthFixture(t, limit)
	n := startHTTPAPINode(t, rules, routes)
	front, prefix := startNginx(t, n.addr, strings.TrimPrefix(app.URL, "http://"))

	get := frontGet(front)
	admitted := loadThroughFront(t, get, served, limit, true, func() string {
		log, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
		return fmt.Sprintf("nginx's log:\n%.4000s\nsluiced's log:\n%.4000s", log, n.p.stderr.String())
	})
	t.Logf("nginx: 500 requests from 8 goroutines: %d admitted, the rest refused with 429; the service saw %d", admitted, served.Load())

	// Another key is limited apart; a path outside /api/ falls to the default rule.
	if resp, _, err := get("/api/items", "other-key"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("another key: %v %v", resp, err)
	}
	if resp, _, err := get("/static/x", "load-key"); err != nil || resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"default"`) {
		t.Fatalf("default route: %v %v", resp, err)
	}

	postThroughFront(t, front, "post-key", "admitted")

	// sluiced killed: nginx gets no decision and fails open.
	n.p.cmd.Process.Kill()
	postThroughFront(t, front, "post-key", "failed-open")
	before := served.Load()
	for i := range 5 {
		resp, _, err := get("/api/items", "load-key")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("with sluiced down, request %d: %v %v (want a pass: fail open)", i, resp, err)
		}
	}
	if got := served.Load() - before; got != 5 {
		t.Fatalf("with sluiced down the service saw %d of 5", got)
	}
}

// frontGet returns a GET of a path through a front proxy with an API key,
// for a site named shop.example (as a browser would send it; the proxy
// must not pass that name on to sluiced, which refuses names in Host).
func frontGet(front string) func(path, key string) (*http.Response, string, error) {
	return func(path, key string) (*http.Response, string, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+front+path, nil)
		req.Host = "shop.example"
		req.Header.Set("X-API-Key", key)
		resp, err := httpAPIClient.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp, string(b), nil
	}
}

// loadThroughFront sends 500 requests of one API key from 8 goroutines
// through a front proxy and checks that exactly limit are admitted, every
// other one is a 429 carrying Retry-After and the RateLimit headers, and
// the service saw only the admitted ones (admittedHeaders: admitted
// responses carry RateLimit-Policy too). It returns the admitted count.
func loadThroughFront(t *testing.T, get func(path, key string) (*http.Response, string, error), served *atomic.Int64, limit int64, admittedHeaders bool, logs func() string) int64 {
	t.Helper()
	const total, workers = 500, 8
	var admitted, refused, next atomic.Int64
	var mu sync.Mutex
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	policy := fmt.Sprintf(`"api";q=%d;w=3600`, limit)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= total {
				resp, body, err := get("/api/items", "load-key")
				if err != nil {
					problem("%v", err)
					continue
				}
				h := resp.Header
				switch resp.StatusCode {
				case http.StatusOK:
					admitted.Add(1)
					if admittedHeaders && !strings.Contains(h.Get("RateLimit-Policy"), policy) {
						problem("admitted without RateLimit-Policy: %v", h)
					}
				case http.StatusTooManyRequests:
					refused.Add(1)
					if h.Get("Retry-After") == "" || !strings.Contains(h.Get("RateLimit"), `"api";r=0`) ||
						!strings.Contains(h.Get("RateLimit-Policy"), policy) {
						problem("429 without its headers: %v %q", h, body)
					}
				default:
					problem("status %d: %s", resp.StatusCode, body)
				}
			}
		}()
	}
	wg.Wait()
	if len(problems) > 0 {
		t.Fatalf("%d problems, first: %s\n%s", len(problems), problems[0], logs())
	}
	if admitted.Load() != limit || refused.Load() != total-limit || served.Load() != limit {
		t.Fatalf("admitted %d, refused %d, the service saw %d; want %d, %d, %d\n%s",
			admitted.Load(), refused.Load(), served.Load(), limit, total-limit, limit, logs())
	}
	return admitted.Load()
}

// caddyBinary finds caddy, skipping the test when it is missing unless
// SLUICE_REQUIRE_CADDY=1.
func caddyBinary(t *testing.T) string {
	t.Helper()
	if path, err := exec.LookPath("caddy"); err == nil {
		return path
	}
	if os.Getenv("SLUICE_REQUIRE_CADDY") == "1" {
		t.Fatal("caddy is not installed and SLUICE_REQUIRE_CADDY=1: apt-get install -y caddy")
	}
	t.Skip("caddy is not installed (apt-get install -y caddy); set SLUICE_REQUIRE_CADDY=1 to make this a failure")
	return ""
}

// startCaddy runs caddy as an unprivileged process (nobody, when the test
// runs as root) on loopback with the README's recipe
// (testdata/Caddyfile.forward-auth) filled in, and waits until it answers.
func startCaddy(t *testing.T, sluiceHTTP, upstream string) (listen string, out *syncBuffer) {
	t.Helper()
	bin := caddyBinary(t)
	prefix := tempDir(t)
	listen = "127.0.0.1:" + freePort(t)
	tmpl, err := os.ReadFile(filepath.Join("testdata", "Caddyfile.forward-auth"))
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer("{{PORT}}", strings.TrimPrefix(listen, "127.0.0.1:"), "{{SLUICE_HTTP}}", sluiceHTTP, "{{UPSTREAM}}", upstream).Replace(string(tmpl))
	confPath := filepath.Join(prefix, "Caddyfile")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", confPath, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+prefix, "XDG_DATA_HOME="+prefix, "XDG_CONFIG_HOME="+prefix)
	out = runFront(t, "caddy", cmd, prefix, listen, syscall.SIGTERM, func() string { return "" })
	return listen, out
}

// Caddy's forward_auth with the README's recipe, under the same load as
// nginx: exactly the limit admitted, each refusal a 429 with its headers
// (Caddy copies the endpoint's answer to the client), the service seeing
// only the admitted requests.
func TestHTTPAPIForwardAuthBehindCaddy(t *testing.T) {
	t.Parallel()
	caddyBinary(t)
	const limit = 40
	rules, routes, app, served := forwardAuthFixture(t, limit)
	n := startHTTPAPINode(t, rules, routes)
	front, out := startCaddy(t, n.addr, strings.TrimPrefix(app.URL, "http://"))
	admitted := loadThroughFront(t, frontGet(front), served, limit, false, func() string {
		return fmt.Sprintf("caddy's log:\n%.4000s\nsluiced's log:\n%.4000s", out.String(), n.p.stderr.String())
	})
	t.Logf("caddy: 500 requests from 8 goroutines: %d admitted, the rest refused with 429; the service saw %d", admitted, served.Load())

	postThroughFront(t, front, "post-key", "admitted")

	// sluiced killed: forward_auth fails with 502, and the recipe's
	// handle_errors fails open to the service.
	n.p.cmd.Process.Kill()
	postThroughFront(t, front, "post-key", "failed-open")
	before := served.Load()
	for i := range 5 {
		resp, _, err := frontGet(front)("/api/items", "load-key")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("with sluiced down, request %d: %v %v (want a pass: fail open)\n%s", i, resp, err, out.String())
		}
	}
	if got := served.Load() - before; got != 5 {
		t.Fatalf("with sluiced down the service saw %d of 5", got)
	}
}

// SIGHUP re-reads the forward-auth routes: a good file takes effect, a bad
// one (a rule the daemon does not have) keeps the routes in force.
func TestHTTPAPISighupReloadsForwardAuthRoutes(t *testing.T) {
	t.Parallel()
	rules := "rules:\n  api:\n    rate: 100/1h\n  other:\n    rate: 100/1h\n"
	n := startHTTPAPINode(t, rules, "default: [{rule: api}]\n")
	routesPath := filepath.Join(filepath.Dir(n.sock), "routes.yaml")
	policy := func() string {
		req, _ := http.NewRequest(http.MethodGet, "http://"+n.addr+"/v1/auth", nil)
		req.Header.Set("X-Original-URI", "/x")
		resp, err := httpAPIClient.Do(req)
		if err != nil {
			return ""
		}
		resp.Body.Close()
		return resp.Header.Get("RateLimit-Policy")
	}
	if p := policy(); !strings.Contains(p, `"api"`) {
		t.Fatalf("before: policy %q", p)
	}
	if err := os.WriteFile(routesPath, []byte("default: [{rule: nope}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.p.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the bad routes are refused", func() bool {
		return strings.Contains(n.p.stderr.String(), "forward-auth routes reload failed")
	})
	if p := policy(); !strings.Contains(p, `"api"`) {
		t.Fatalf("after bad routes: policy %q, want the last good routes", p)
	}
	if err := os.WriteFile(routesPath, []byte("default: [{rule: other}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.p.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the new routes are in force", func() bool { return strings.Contains(policy(), `"other"`) })
}

// When the daemon's rules change under the forward-auth routes (here the
// watched rules file drops the rule a route names), the routes are checked
// again: the problem is logged at ERROR and the routes in force stay.
func TestHTTPAPIRoutesRecheckedWhenRulesChange(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	rulesPath, routesPath := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(rulesPath, []byte("rules:\n  api:\n    rate: 100/1h\n  other:\n    rate: 100/1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(routesPath, []byte("default: [{rule: api}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + freePort(t)
	p := startDaemon(t, "--socket", filepath.Join(dir, "w.sock"), "--rules", rulesPath, "--http-listen", addr, "--http-routes", routesPath)
	eventually(t, "the decision API serves", func() bool { return strings.Contains(p.stderr.String(), "http decision api serving") })
	eventually(t, "the daemon serves", func() bool { return strings.Contains(p.stderr.String(), "sluiced serving") })
	if err := os.WriteFile(rulesPath+".new", []byte("rules:\n  other:\n    rate: 100/1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(rulesPath+".new", rulesPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sluiced's log:\n%s", p.stderr.String())
		}
	})
	eventually(t, "the routes are found not to fit the new rules", func() bool {
		log := p.stderr.String()
		return strings.Contains(log, "forward-auth routes reload failed") && strings.Contains(log, "api") && strings.Contains(log, "is not defined")
	})
}

// A decision API address that is taken is an error at start, with the
// address in the message, never a daemon serving without the API its
// operator asked for.
func TestHTTPAPIAddressTakenExitsWithClearError(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := tempDir(t)
	p := startDaemon(t, "--socket", filepath.Join(dir, "t.sock"), "--http-listen", l.Addr().String())
	select {
	case err := <-p.exited:
		p.exited <- err
		if err == nil || !strings.Contains(p.stderr.String(), "http api listen") || !strings.Contains(p.stderr.String(), l.Addr().String()) {
			t.Fatalf("exit %v, log:\n%s", err, p.stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("sluiced still running with its decision API address taken:\n%s", p.stderr.String())
	}
}

// postThroughFront POSTs a body through a front proxy and checks that the
// service received it whole.
func postThroughFront(t *testing.T, front, key, what string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+front+"/api/upload", strings.NewReader("payload-"+what))
	req.Host = "shop.example"
	req.Header.Set("X-API-Key", key)
	resp, err := httpAPIClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", what, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != 200 || !strings.Contains(string(b), "payload-"+what) {
		t.Fatalf("POST %s: %d %q, want the service to echo the body", what, resp.StatusCode, b)
	}
}

// runFront starts a reverse proxy in front of the decision API (nginx or
// caddy), as nobody when the test runs as root, stops it with stop (then
// kills it) when the test ends, and waits until it answers on listen; diag
// adds the proxy's own log to a failure.
func runFront(t *testing.T, name string, cmd *exec.Cmd, prefix, listen string, stop syscall.Signal, diag func() string) *syncBuffer {
	t.Helper()
	if os.Getuid() == 0 {
		const nobody = 65534
		if err := os.Chown(prefix, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(stop)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	eventually(t, name+" answers", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s exited: %v\n%s\n%s", name, err, out.String(), diag())
		default:
		}
		cn, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			cn.Close()
		}
		return err == nil
	})
	return out
}

// forwardAuthFixture is what both front-proxy tests limit: rule "api" at
// limit per hour for "/api/" by X-API-Key behind a loopback proxy, a
// generous default, and the service behind the proxy, counting what it
// serves.
func forwardAuthFixture(t *testing.T, limit int) (rules, routes string, app *httptest.Server, served *atomic.Int64) {
	t.Helper()
	rules = fmt.Sprintf("rules:\n  api:\n    rate: %d/1h\n  default:\n    rate: 1000/1h\n", limit)
	routes = "identity:\n  header: X-API-Key\n  trusted_proxies: [127.0.0.1]\ndefault:\n  - rule: default\nroutes:\n  - match: \"/api/\"\n    limits:\n      - rule: api\n"
	served = new(atomic.Int64)
	app = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<10))
		io.WriteString(w, "ok "+string(body)+"\n")
	}))
	t.Cleanup(app.Close)
	return rules, routes, app, served
}
