package main

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Issue 14, HTTP edge: these tests attack real sluiced processes through
// both proxies, the sidecar (`sluiced proxy`, deciding over the socket) and
// the one built into the daemon (--proxy-listen, deciding in-process).

// httpRig is a daemon with its built-in proxy and a sidecar proxy talking
// to it, both in front of one upstream.
type httpRig struct {
	dir, sock, rules, routes string
	daemon, sidecar          *proc
	builtIn, side            string // base URLs
	admin, metrics           string // the daemon's admin address, the sidecar's metrics address
	reached                  *atomic.Int64
}

func httpWrite(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// httpUpstream is the service behind the proxies; it counts the requests
// that reach it.
func httpUpstream(t *testing.T) (string, *atomic.Int64) {
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	t.Cleanup(up.Close)
	return up.URL, &reached
}

// startHTTPRig starts the daemon (with its built-in proxy) on rules and
// routes, then the sidecar, and waits until both serve and the sidecar has
// reached the daemon.
func startHTTPRig(t *testing.T, rules, routes string, sidecarArgs ...string) *httpRig {
	t.Helper()
	dir := tempDir(t)
	r := &httpRig{dir: dir, sock: filepath.Join(dir, "d.sock"), rules: filepath.Join(dir, "rules.yaml"), routes: filepath.Join(dir, "routes.yaml")}
	httpWrite(t, r.rules, rules)
	httpWrite(t, r.routes, routes)
	var upstream string
	upstream, r.reached = httpUpstream(t)
	builtIn, side := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	r.admin, r.metrics = "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	r.builtIn, r.side = "http://"+builtIn, "http://"+side
	r.daemon = startDaemon(t, "--socket", r.sock, "--rules", r.rules, "--admin-addr", r.admin,
		"--proxy-listen", builtIn, "--proxy-upstream", upstream, "--proxy-routes", r.routes)
	eventually(t, "the daemon's socket", func() bool { _, err := os.Stat(r.sock); return err == nil })
	args := append([]string{"proxy", "--listen", side, "--upstream", upstream, "--socket", r.sock, "--routes", r.routes,
		"--decision-timeout", "2s", "--connect-wait", "10s", "--metrics-addr", r.metrics}, sidecarArgs...)
	r.sidecar = startDaemon(t, args...)
	eventually(t, "the sidecar reaches the daemon", func() bool { return strings.Contains(r.sidecar.stderr.String(), "connected to the daemon") })
	// All three of the sidecar's connections (two for decisions, one for
	// checking routes) are made before a test goes on.
	eventually(t, "both proxies serve", func() bool {
		return httpMetric(r.admin, "sluice_proxy_daemon_up") == 1 && httpMetric(r.metrics, "sluice_proxy_daemon_up") == 1 &&
			httpMetric(r.admin, "sluice_ipc_connections") >= 3
	})
	return r
}

// httpDo sends one request and returns its status and headers (status 0 if
// it could not be sent).
func httpDo(base, path string, headers map[string]string) (int, http.Header) {
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		return 0, nil
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// httpMetric scrapes one series from a /metrics endpoint: its value, or -1
// if the endpoint or the series is not there.
func httpMetric(addr, series string) float64 {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// httpExit waits for a process to exit on its own and returns its error.
func httpExit(t *testing.T, p *proc) error {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("still running after 30s; output:\n%s", p.stderr.String())
		return nil
	}
}

func httpCodes(base, path string, n int, headers map[string]string) []int {
	var codes []int
	for range n {
		code, _ := httpDo(base, path, headers)
		codes = append(codes, code)
	}
	return codes
}

// A 300-byte and a 100 KiB X-API-Key (longer than the daemon's 256-byte
// keys) used to make the daemon refuse the check and the proxies serve the
// request unlimited. Now they are limited like any other key.
func TestHTTPAttackLongAPIKeyThroughBothProxies(t *testing.T) {
	t.Parallel()
	r := startHTTPRig(t, "rules:\n  api:\n    rate: 2/1h\n", "identity:\n  header: X-API-Key\ndefault:\n  - rule: api\n")
	for _, px := range []struct{ name, base string }{{"sidecar", r.side}, {"built-in", r.builtIn}} {
		for _, n := range []int{300, 100 << 10} {
			key := px.name + strings.Repeat("k", n-len(px.name))
			before := r.reached.Load()
			codes := httpCodes(px.base, "/", 3, map[string]string{"X-API-Key": key})
			if fmt.Sprint(codes) != "[200 200 429]" || r.reached.Load()-before != 2 {
				t.Fatalf("%s, %d-byte key: codes %v, %d reached the upstream; want [200 200 429], 2", px.name, n, codes, r.reached.Load()-before)
			}
			// Another long key sharing the first 255 bytes has its own bucket.
			other := key[:n-1] + "j"
			if code, _ := httpDo(px.base, "/", map[string]string{"X-API-Key": other}); code != 200 {
				t.Fatalf("%s, %d-byte key: a different long key got %d (shares a bucket)", px.name, n, code)
			}
		}
	}
	if v := httpMetric(r.metrics, `sluice_proxy_failed_open_total{cause="internal"}`); v != 0 {
		t.Fatalf("the sidecar failed open %v times on long keys", v)
	}
}

// Behind a trusted proxy, a client sends both forwarding headers, varying
// the one the proxy does not write, to get a fresh bucket each time. Only
// the header the operator named is read, so it cannot.
func TestHTTPAttackBothForwardingHeaders(t *testing.T) {
	t.Parallel()
	routes := func(header string) string {
		return "identity:\n  trusted_proxies: [127.0.0.1]\n  forwarded_header: " + header + "\ndefault:\n  - rule: api\n"
	}
	r := startHTTPRig(t, "rules:\n  api:\n    rate: 2/1h\n", routes("X-Forwarded-For"))
	attack := func(base, fixedHeader, fixed, rotatingHeader string) []int {
		var codes []int
		for i := range 4 {
			rotating := fmt.Sprintf("203.0.113.%d", 10+i)
			if rotatingHeader == "Forwarded" {
				rotating = "for=" + rotating
			}
			code, _ := httpDo(base, "/", map[string]string{fixedHeader: fixed, rotatingHeader: rotating})
			codes = append(codes, code)
		}
		return codes
	}
	for i, base := range []string{r.side, r.builtIn} {
		client := fmt.Sprintf("198.51.100.%d", 1+i)
		if codes := attack(base, "X-Forwarded-For", client, "Forwarded"); fmt.Sprint(codes) != "[200 200 429 429]" {
			t.Fatalf("%s, forwarded_header X-Forwarded-For, Forwarded rotating: codes %v, want [200 200 429 429]", base, codes)
		}
	}
	// The other way round, after a reload of both proxies.
	httpWrite(t, r.routes, routes("Forwarded"))
	r.sidecar.cmd.Process.Signal(syscall.SIGHUP)
	r.daemon.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "both proxies reload", func() bool {
		return strings.Contains(r.sidecar.stderr.String(), "routes reloaded") && strings.Contains(r.daemon.stderr.String(), "routes reloaded")
	})
	for i, base := range []string{r.side, r.builtIn} {
		client := fmt.Sprintf("for=198.51.100.%d", 11+i)
		if codes := attack(base, "Forwarded", client, "X-Forwarded-For"); fmt.Sprint(codes) != "[200 200 429 429]" {
			t.Fatalf("%s, forwarded_header Forwarded, X-Forwarded-For rotating: codes %v, want [200 200 429 429]", base, codes)
		}
	}
}

// A route costing more than its rule's burst, or naming a rule that does
// not exist, stops either proxy from starting, with the file and line; a
// reload to such a file keeps the routes in force.
func TestHTTPAttackRoutesTheRulesCannotServe(t *testing.T) {
	t.Parallel()
	const rules = "rules:\n  api:\n    rate: 2/1h\n"
	const good = "identity:\n  header: X-API-Key\ndefault:\n  - rule: api\n"
	// want is what the error says; at is its file:line:column and field,
	// which a log line (quoting the error) holds too.
	bad := []struct{ name, routes, want, at string }{
		{"cost above burst", "identity:\n  header: X-API-Key\ndefault:\n  - rule: api\n    cost: 3\n",
			"routes.yaml:5:11: default[0].cost: cost 3 exceeds the burst 2", "routes.yaml:5:11: default[0].cost"},
		{"unknown rule", "identity:\n  header: X-API-Key\nroutes:\n  - match: /\n    limits: [{rule: nope}]\n",
			`routes.yaml:5:21: routes[0].limits[0].rule: rule "nope" is not defined`, "routes.yaml:5:21: routes[0].limits[0].rule"},
	}
	for _, tt := range bad {
		t.Run("start-up/"+tt.name, func(t *testing.T) {
			dir := tempDir(t)
			sock, rulesPath, routes := filepath.Join(dir, "d.sock"), filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "routes.yaml")
			httpWrite(t, rulesPath, rules)
			httpWrite(t, routes, tt.routes)
			upstream, _ := httpUpstream(t)
			builtIn := startDaemon(t, "--socket", sock, "--rules", rulesPath, "--admin-addr", "",
				"--proxy-listen", "127.0.0.1:"+freePort(t), "--proxy-upstream", upstream, "--proxy-routes", routes)
			if err := httpExit(t, builtIn); err == nil || !strings.Contains(builtIn.stderr.String(), tt.want) {
				t.Fatalf("built-in proxy: exit %v, output %q, want it to mention %q", err, builtIn.stderr.String(), tt.want)
			}
			sock2 := filepath.Join(dir, "d2.sock")
			startDaemon(t, "--socket", sock2, "--rules", rulesPath, "--admin-addr", "")
			eventually(t, "the daemon's socket", func() bool { _, err := os.Stat(sock2); return err == nil })
			side := startDaemon(t, "proxy", "--listen", "127.0.0.1:"+freePort(t), "--upstream", upstream, "--socket", sock2,
				"--routes", routes, "--connect-wait", "10s")
			if err := httpExit(t, side); err == nil || !strings.Contains(side.stderr.String(), tt.want) {
				t.Fatalf("sidecar: exit %v, output %q, want it to mention %q", err, side.stderr.String(), tt.want)
			}
		})
	}
	t.Run("reload", func(t *testing.T) {
		r := startHTTPRig(t, rules, good)
		for _, tt := range bad {
			httpWrite(t, r.routes, tt.routes)
			r.sidecar.cmd.Process.Signal(syscall.SIGHUP)
			r.daemon.cmd.Process.Signal(syscall.SIGHUP)
			eventually(t, "both proxies refuse the reload, naming the line", func() bool {
				return strings.Contains(r.sidecar.stderr.String(), tt.at) && strings.Contains(r.daemon.stderr.String(), tt.at)
			})
		}
		// The old routes are in force: api, 2 an hour per key (the bad
		// ones would have refused every request, or passed them unlimited).
		for _, base := range []string{r.side, r.builtIn} {
			if codes := httpCodes(base, "/", 3, map[string]string{"X-API-Key": "after-" + base}); fmt.Sprint(codes) != "[200 200 429]" {
				t.Fatalf("%s after the refused reloads: codes %v, want the old routes' [200 200 429]", base, codes)
			}
		}
	})
	t.Run("daemon not reachable at start", func(t *testing.T) {
		dir := tempDir(t)
		sock, rulesPath, routes := filepath.Join(dir, "d.sock"), filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "routes.yaml")
		httpWrite(t, rulesPath, rules)
		httpWrite(t, routes, bad[1].routes)
		upstream, _ := httpUpstream(t)
		metrics := "127.0.0.1:" + freePort(t)
		side := startDaemon(t, "proxy", "--listen", "127.0.0.1:"+freePort(t), "--upstream", upstream, "--socket", sock,
			"--routes", routes, "--connect-wait", "50ms", "--metrics-addr", metrics)
		eventually(t, "a loud warning naming the socket", func() bool {
			out := side.stderr.String()
			return strings.Contains(out, "[WARN]") && strings.Contains(out, "daemon not reachable") && strings.Contains(out, "socket="+sock)
		})
		eventually(t, "the metrics say so", func() bool {
			return httpMetric(metrics, "sluice_proxy_daemon_up") == 0 && httpMetric(metrics, "sluice_proxy_routes_unchecked") == 1
		})
		startDaemon(t, "--socket", sock, "--rules", rulesPath, "--admin-addr", "")
		eventually(t, "the routes are checked once the daemon is reachable", func() bool {
			out := side.stderr.String()
			return strings.Contains(out, "[ERROR]") && strings.Contains(out, bad[1].at)
		})
		eventually(t, "the metrics say so", func() bool {
			return httpMetric(metrics, "sluice_proxy_daemon_up") == 1 && httpMetric(metrics, "sluice_proxy_routes_invalid") == 1 &&
				httpMetric(metrics, "sluice_proxy_routes_unchecked") == 0
		})
	})
}

// The daemon is killed under --fail-closed: the sidecar answers 503 with a
// Retry-After of 1 to 5 s, never 429 with Retry-After 0.
func TestHTTPAttackDaemonStoppedUnderFailClosed(t *testing.T) {
	t.Parallel()
	r := startHTTPRig(t, "rules:\n  api:\n    rate: 100/1s\n", "identity:\n  header: X-API-Key\ndefault:\n  - rule: api\n", "--fail-closed")
	if code, _ := httpDo(r.side, "/", map[string]string{"X-API-Key": "k"}); code != 200 {
		t.Fatalf("before the outage: %d", code)
	}
	r.daemon.cmd.Process.Signal(syscall.SIGKILL)
	<-r.daemon.exited
	r.daemon.exited <- nil
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sidecar:\n%s", r.sidecar.stderr.String())
		}
	})
	// The client learns that its connections died as it uses them, so
	// requests go on until the metrics show the outage.
	eventually(t, "the sidecar answers 503 without its daemon, and counts it", func() bool {
		code, h := httpDo(r.side, "/", map[string]string{"X-API-Key": "k"})
		switch code {
		case 429:
			t.Fatalf("429 during an outage, Retry-After %q", h.Get("Retry-After"))
		case 503:
			ra, err := strconv.Atoi(h.Get("Retry-After"))
			if err != nil || ra < 1 || ra > 5 || h.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("503 with Retry-After %q, Content-Type %q", h.Get("Retry-After"), h.Get("Content-Type"))
			}
		default:
			return false
		}
		undecided := 0.0
		for _, cause := range []string{"daemon_down", "timeout", "protocol", "closed", "canceled", "internal"} {
			undecided += max(httpMetric(r.metrics, `sluice_proxy_failed_closed_total{cause="`+cause+`"}`), 0)
		}
		return undecided >= 1 && httpMetric(r.metrics, "sluice_proxy_daemon_up") == 0
	})
	if !strings.Contains(r.sidecar.stderr.String(), "failing closed (request denied)") {
		t.Fatalf("the outage is not logged:\n%s", r.sidecar.stderr.String())
	}
}

// With no daemon, every request fails open: each is counted in the metric,
// and the log has one line per interval (here an hour), not one per request.
func TestHTTPFailOpenLoggedOncePerIntervalCountedEveryTime(t *testing.T) {
	dir := tempDir(t)
	sock, routes := filepath.Join(dir, "absent.sock"), filepath.Join(dir, "routes.yaml")
	httpWrite(t, routes, "identity:\n  header: X-API-Key\ndefault:\n  - rule: api\n")
	upstream, reached := httpUpstream(t)
	listen, metrics := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	side := startDaemon(t, "proxy", "--listen", listen, "--upstream", upstream, "--socket", sock, "--routes", routes,
		"--connect-wait", "50ms", "--metrics-addr", metrics, "--log-interval", "1h")
	eventually(t, "the proxy serves", func() bool { return httpMetric(metrics, "sluice_proxy_daemon_up") == 0 })
	const n = 50
	for i := range n {
		if code, h := httpDo("http://"+listen, "/", map[string]string{"X-API-Key": "k"}); code != 200 || h.Get("X-Ratelimit-Limit") != "" {
			t.Fatalf("request %d without a daemon: %d, headers %v", i, code, h)
		}
	}
	if reached.Load() != n {
		t.Fatalf("upstream reached %d times, want %d", reached.Load(), n)
	}
	if v := httpMetric(metrics, `sluice_proxy_failed_open_total{cause="daemon_down"}`); v != n {
		t.Fatalf("failed-open metric %v, want %d", v, n)
	}
	out := side.stderr.String()
	if lines := strings.Count(out, "failing open (request allowed)"); lines != 1 || !strings.Contains(out, "count=1") {
		t.Fatalf("%d fail-open lines for %d requests in one interval:\n%s", lines, n, out)
	}
	if !strings.Contains(out, "socket="+sock) {
		t.Fatalf("the start-up warning does not name the socket:\n%s", out)
	}
}

// Limit, Remaining and the policy agree for every algorithm, through both
// proxies, and the reset is sent as X-RateLimit-Reset too.
func TestHTTPHeadersConsistentForEveryAlgorithm(t *testing.T) {
	t.Parallel()
	algorithms := []struct {
		name     string
		admitted int
	}{{"token_bucket", 4}, {"leaky_bucket", 4}, {"gcra", 4}, {"fixed_window", 2}, {"sliding_window", 2}, {"sliding_log", 2}}
	var rules, routes strings.Builder
	rules.WriteString("rules:\n")
	routes.WriteString("identity:\n  header: X-API-Key\nroutes:\n")
	for _, a := range algorithms {
		fmt.Fprintf(&rules, "  %s:\n    rate: 2/1h\n    algorithm: %s\n", a.name, a.name)
		if a.admitted > 2 {
			rules.WriteString("    burst: 4\n")
		}
		fmt.Fprintf(&routes, "  - match: \"GET /%s\"\n    limits: [{rule: %s}]\n", a.name, a.name)
	}
	r := startHTTPRig(t, rules.String(), routes.String())
	for _, base := range []string{r.side, r.builtIn} {
		for _, a := range algorithms {
			key := map[string]string{"X-API-Key": base}
			for i := range a.admitted + 1 {
				code, h := httpDo(base, "/"+a.name, key)
				limit, _ := strconv.Atoi(h.Get("X-Ratelimit-Limit"))
				remaining, err1 := strconv.Atoi(h.Get("X-Ratelimit-Remaining"))
				reset, err2 := strconv.Atoi(h.Get("X-Ratelimit-Reset"))
				where := fmt.Sprintf("%s %s request %d", base, a.name, i)
				if limit != 2 || err1 != nil || err2 != nil || remaining < 0 || remaining > limit || reset < 1 {
					t.Fatalf("%s: code %d Limit %q Remaining %q Reset %q", where, code, h.Get("X-Ratelimit-Limit"), h.Get("X-Ratelimit-Remaining"), h.Get("X-Ratelimit-Reset"))
				}
				if p, rl := h.Get("RateLimit-Policy"), h.Get("RateLimit"); p != fmt.Sprintf(`"%s";q=2;w=3600`, a.name) || rl != fmt.Sprintf(`"%s";r=%d;t=%d`, a.name, remaining, reset) {
					t.Fatalf("%s: RateLimit-Policy %q RateLimit %q, Remaining %d Reset %d", where, p, rl, remaining, reset)
				}
				if i < a.admitted && code != 200 || i == a.admitted && code != 429 {
					t.Fatalf("%s: code %d", where, code)
				}
				if ra, _ := strconv.Atoi(h.Get("Retry-After")); code == 429 && (ra < 1 || ra != reset || remaining != 0) {
					t.Fatalf("%s: 429 with Retry-After %d, Reset %d, Remaining %d", where, ra, reset, remaining)
				}
			}
		}
	}
}

// The daemon's rules change under routes that were valid: the rule a route
// names is dropped. Both proxies notice without a reload of their own and
// say so at ERROR with the routes file's line, and their metrics show it.
func TestHTTPRulesChangingUnderTheRoutesAreNoticed(t *testing.T) {
	t.Parallel()
	r := startHTTPRig(t, "rules:\n  api:\n    rate: 2/1h\n  other:\n    rate: 2/1h\n",
		"identity:\n  header: X-API-Key\nroutes:\n  - match: /\n    limits: [{rule: api}]\n", "--routes-check-interval", "100ms")
	httpWrite(t, r.rules, "rules:\n  other:\n    rate: 2/1h\n") // the daemon watches its rules file
	const at = "routes.yaml:5:21: routes[0].limits[0].rule"
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon:\n%s\nsidecar:\n%s", r.daemon.stderr.String(), r.sidecar.stderr.String())
		}
	})
	eventually(t, "both proxies report the routes invalid", func() bool {
		return strings.Contains(r.sidecar.stderr.String(), at) && strings.Contains(r.daemon.stderr.String(), at) &&
			httpMetric(r.metrics, "sluice_proxy_routes_invalid") == 1 && httpMetric(r.admin, "sluice_proxy_routes_invalid") == 1
	})
	// Requests on the route are now unlimited (unknown_rule: allow), and counted as such.
	for _, base := range []string{r.side, r.builtIn} {
		if codes := httpCodes(base, "/", 3, map[string]string{"X-API-Key": base}); fmt.Sprint(codes) != "[200 200 200]" {
			t.Fatalf("%s: codes %v", base, codes)
		}
	}
	if a, b := httpMetric(r.metrics, "sluice_proxy_unknown_rule_total"), httpMetric(r.admin, "sluice_proxy_unknown_rule_total"); a != 3 || b != 3 {
		t.Fatalf("unknown-rule requests counted %v (sidecar) and %v (built-in), want 3 each", a, b)
	}
}

// A request the daemon refuses as invalid, here because a per-key override
// has a burst below the route's cost (the route itself fits the rule), is
// answered 500 "rate limit misconfigured" by both proxies, never forwarded,
// counted and logged; other keys are served as usual.
func TestHTTPInvalidDecisionIsA500NotAPass(t *testing.T) {
	t.Parallel()
	r := startHTTPRig(t, "rules:\n  api:\n    rate: 10/1h\n    overrides:\n      \"key:tiny\": {rate: 1/1h, burst: 1}\n",
		"identity:\n  header: X-API-Key\ndefault:\n  - rule: api\n    cost: 5\n")
	for _, px := range []struct{ name, base, metrics string }{{"sidecar", r.side, r.metrics}, {"built-in", r.builtIn, r.admin}} {
		before := r.reached.Load()
		for i := range 3 {
			code, h := httpDo(px.base, "/", map[string]string{"X-API-Key": "tiny"})
			if code != 500 || h.Get("Content-Type") != "application/problem+json" || h.Get("Retry-After") != "" {
				t.Fatalf("%s request %d by the misconfigured key: %d %v", px.name, i, code, h)
			}
		}
		if r.reached.Load() != before {
			t.Fatalf("%s forwarded %d invalid requests", px.name, r.reached.Load()-before)
		}
		if v := httpMetric(px.metrics, "sluice_proxy_invalid_total"); v != 3 {
			t.Fatalf("%s counted %v invalid requests, want 3", px.name, v)
		}
		if codes := httpCodes(px.base, "/", 3, map[string]string{"X-API-Key": px.name}); fmt.Sprint(codes) != "[200 200 429]" {
			t.Fatalf("%s, an ordinary key (10/1h, cost 5): codes %v", px.name, codes)
		}
	}
	for _, p := range []*proc{r.sidecar, r.daemon} {
		out := p.stderr.String()
		if strings.Count(out, "refused as invalid") != 1 {
			t.Fatalf("want one rate-limited line for the invalid requests:\n%s", out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "refused as invalid") {
				t.Log(line)
			}
		}
	}
}
