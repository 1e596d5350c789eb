package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// These tests attack a real sluiced's admin endpoint as a web page, a local
// user or a squatter would, and check what an operator gets.

// adminNode is a sluiced process serving an admin endpoint.
type adminNode struct {
	p     *proc
	sock  string
	admin string // host:port
	c     *clientlib.Client
}

// startAdminNode starts sluiced with rules and an admin endpoint on a free
// loopback port, waits until both its socket and its admin endpoint answer.
func startAdminNode(t *testing.T, dir, name, rules string, args ...string) *adminNode {
	t.Helper()
	n := &adminNode{sock: filepath.Join(dir, name+".sock"), admin: "127.0.0.1:" + freePort(t)}
	rulesPath := filepath.Join(dir, name+"-rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	n.p = startDaemon(t, append([]string{"--socket", n.sock, "--rules", rulesPath, "--no-watch", "--node-name", name,
		"--admin-addr", n.admin}, args...)...)
	n.awaitServing(t, name)
	return n
}

// awaitServing waits until the node's socket and admin endpoint answer,
// and dials a client of it (closed with the test). A node that exits
// meanwhile fails the test at once, with its log.
func (n *adminNode) awaitServing(t *testing.T, name string) {
	t.Helper()
	eventually(t, name+" serves its socket and admin endpoint", func() bool {
		select {
		case err := <-n.p.exited:
			n.p.exited <- err // for the cleanup
			t.Fatalf("%s exited: %v\n%s", name, err, n.p.stderr.String())
		default:
		}
		if n.c == nil {
			c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: n.sock, Timeout: 5 * time.Second})
			if err != nil {
				return false
			}
			n.c = c
		}
		code, _ := adminRequest(t, "GET", "http://"+n.admin+"/healthz", "", nil, "")
		return code == 200
	})
	t.Cleanup(func() { n.c.Close() })
}

// adminRequest sends one request on a fresh connection (host "" keeps the
// URL's host) and returns the status and body; 0 when there was no answer.
func adminRequest(t *testing.T, method, url, host string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// adminJSON GETs path and decodes the answer into v.
func adminJSON(t *testing.T, admin, path string, v any) {
	t.Helper()
	code, body := adminRequest(t, "GET", "http://"+admin+path, "", nil, "")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
}

// spend takes count tokens of key under rule on n, returning how many were admitted.
func (n *adminNode) spend(rule, key string, count int) int {
	admitted := 0
	for range count {
		if allowFresh(n.c, rule, key) {
			admitted++
		}
	}
	return admitted
}

func (n *adminNode) balance(t *testing.T, rule, key string) float64 {
	var v adminapi.KeyView
	adminJSON(t, n.admin, "/v1/keys/"+rule+"/"+key, &v)
	return v.Balance
}

// near compares balances of a 5/1h rule read a moment apart (it refills
// 0.0014 tokens a second).
func near(b, want float64) bool { return b > want-0.1 && b < want+0.1 }

const adminRules = "rules:\n  r:\n    rate: 5/1h\n"

// A page served from a name the attacker controls, re-pointed at 127.0.0.1
// (DNS rebinding), sends its own name as Host: refused, read or write.
func TestAdminRefusesDNSRebindingHost(t *testing.T) {
	t.Parallel()
	n := startAdminNode(t, tempDir(t), "a", adminRules)
	_, port, _ := net.SplitHostPort(n.admin)
	base := "http://" + n.admin
	for _, tt := range []struct {
		method, path, host string
		want               int
	}{
		{"GET", "/v1/rules", "attacker.example:" + port, http.StatusMisdirectedRequest},
		{"GET", "/v1/top", "attacker.example:" + port, http.StatusMisdirectedRequest},
		{"GET", "/", "attacker.example:" + port, http.StatusMisdirectedRequest},
		{"POST", "/v1/reload", "attacker.example:" + port, http.StatusMisdirectedRequest},
		{"DELETE", "/v1/keys/r/victim", "attacker.example:" + port, http.StatusMisdirectedRequest},
		{"GET", "/v1/rules", n.admin, http.StatusOK},
		{"GET", "/v1/rules", "localhost:" + port, http.StatusOK},
	} {
		code, body := adminRequest(t, tt.method, base+tt.path, tt.host, map[string]string{adminapi.Header: "1"}, "")
		if code != tt.want {
			t.Errorf("%s %s Host %s: %d %s, want %d", tt.method, tt.path, tt.host, code, body, tt.want)
		}
		if tt.want == http.StatusMisdirectedRequest && !strings.Contains(body, "--admin-allowed-hosts") {
			t.Errorf("refusal does not say how to allow a name: %s", body)
		}
	}
	var ready map[string]any
	adminJSON(t, n.admin, "/readyz", &ready)
	if ready["reloads_ok"] != 0.0 {
		t.Errorf("a refused reload ran: %v", ready)
	}

	// A name the operator configures is answered.
	m := startAdminNode(t, tempDir(t), "b", adminRules, "--admin-allowed-hosts", "sluice.internal")
	_, mport, _ := net.SplitHostPort(m.admin)
	if code, body := adminRequest(t, "GET", "http://"+m.admin+"/v1/rules", "sluice.internal:"+mport, nil, ""); code != 200 {
		t.Errorf("configured name refused: %d %s", code, body)
	}
}

// A web page can POST cross-origin without the browser asking first only as
// text/plain, form-urlencoded or multipart, with no custom header. Such a
// request changes nothing: no reload, no reset.
func TestAdminRefusesSimpleCrossOriginPost(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	n := startAdminNode(t, dir, "a", adminRules)
	if got := n.spend("r", "victim", 6); got != 5 {
		t.Fatalf("admitted %d of 6 on 5/1h", got)
	}
	var before adminapi.RulesView
	adminJSON(t, n.admin, "/v1/rules", &before)
	// The file changes (--no-watch): only a reload would bring it in.
	os.WriteFile(filepath.Join(dir, "a-rules.yaml"), []byte("rules:\n  r:\n    rate: 50/1h\n"), 0o600)

	origin := map[string]string{"Origin": "http://attacker.example"}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, tt := range []struct {
		name, method, path string
		header             map[string]string
		body               string
	}{
		{"text/plain reload", "POST", "/v1/reload", with(origin, "Content-Type", "text/plain"), "x"},
		{"form reload", "POST", "/v1/reload", with(origin, "Content-Type", "application/x-www-form-urlencoded"), "a=b"},
		{"multipart reload", "POST", "/v1/reload", with(origin, "Content-Type", "multipart/form-data; boundary=x"), "--x--"},
		{"bare reload", "POST", "/v1/reload", nil, ""},
		{"reset without the header", "DELETE", "/v1/keys/r/victim", origin, ""},
	} {
		code, body := adminRequest(t, tt.method, "http://"+n.admin+tt.path, "", tt.header, tt.body)
		if code != http.StatusForbidden || !strings.Contains(body, adminapi.Header) {
			t.Errorf("%s: %d %s, want 403 naming %s", tt.name, code, body, adminapi.Header)
		}
	}
	var after adminapi.RulesView
	adminJSON(t, n.admin, "/v1/rules", &after)
	if after.Hash != before.Hash {
		t.Fatal("a refused request reloaded the rules")
	}
	if d := n.c.Allow(context.Background(), "r", "victim"); d.Allowed {
		t.Fatalf("a refused request reset the key: %+v", d)
	}
	// The same with the header (as the CLI sends), or as JSON: done.
	if code, body := adminRequest(t, "POST", "http://"+n.admin+"/v1/reload", "", map[string]string{adminapi.Header: "1"}, ""); code != 200 {
		t.Fatalf("reload with the header: %d %s", code, body)
	}
	adminJSON(t, n.admin, "/v1/rules", &after)
	if after.Hash == before.Hash {
		t.Fatal("reload with the header did not reload")
	}
	if code, body := adminRequest(t, "POST", "http://"+n.admin+"/v1/reload", "", map[string]string{"Content-Type": "application/json"}, "{}"); code != 200 {
		t.Fatalf("reload as JSON: %d %s", code, body)
	}
}

// openFDs counts the process's open file descriptors (Linux).
func openFDs(t *testing.T, pid int) int {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(entries)
}

// A local user opens connection after connection to the admin endpoint and
// keeps them silent. The daemon holds at most --admin-max-conns of them and
// ends the rest at once (503, or a plain close while too many refusals are
// under way), its file descriptors stay bounded, decisions over the socket
// and the metrics endpoint carry on, an operator's request at the cap is
// refused with a reason, and the silent connections it holds are closed by
// its header timeout, after which the endpoint answers again.
func TestAdminConnectionFloodDoesNotStopDecisions(t *testing.T) {
	t.Parallel()
	const capConns, flood = 8, 300
	metrics := "127.0.0.1:" + freePort(t)
	n := startAdminNode(t, tempDir(t), "a", adminRules, "--admin-max-conns", fmt.Sprint(capConns), "--metrics-addr", metrics)
	pid := n.p.cmd.Process.Pid
	baseline := openFDs(t, pid)

	var ended, answered503 atomic.Int64
	var lastEnded atomic.Int64 // ns after start when the last connection was ended by the daemon
	var wg sync.WaitGroup
	conns := make([]net.Conn, 0, flood)
	start := time.Now()
	for range flood {
		c, err := net.DialTimeout("tcp", n.admin, 5*time.Second)
		if err != nil {
			continue // the backlog is full: the kernel sheds too
		}
		conns = append(conns, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			b, err := io.ReadAll(c)
			if bytes.HasPrefix(b, []byte("HTTP/1.1 503")) {
				answered503.Add(1)
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				ended.Add(1)
				lastEnded.Store(int64(time.Since(start)))
			}
		}()
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}()
	eventually(t, "the connections beyond the cap are ended", func() bool { return ended.Load() >= int64(len(conns)-capConns) })

	// Meanwhile: decisions, metrics, and a bounded count of descriptors.
	for i := range 200 {
		if d := n.c.Allow(context.Background(), "r", fmt.Sprint("k", i)); !d.Allowed || d.FailedOpen {
			t.Fatalf("decision %d during the flood: %+v", i, d)
		}
	}
	if code, _ := adminRequest(t, "GET", "http://"+metrics+"/metrics", "", nil, ""); code != 200 {
		t.Fatalf("metrics during the admin flood: %d", code)
	}
	fds := openFDs(t, pid)
	if fds > baseline+capConns+4 {
		t.Fatalf("%d descriptors open during a flood of %d connections (baseline %d, cap %d)", fds, len(conns), baseline, capConns)
	}
	// The operator's request is refused with a reason rather than hanging.
	if code, body := adminRequest(t, "GET", "http://"+n.admin+"/healthz", "", nil, ""); code != 503 || !strings.Contains(body, "too many connections") {
		t.Fatalf("admin request at the cap: %d %q, want 503 too many connections", code, body)
	}
	held := int64(len(conns)) - ended.Load()
	if held > capConns {
		t.Fatalf("%d connections held, cap %d", held, capConns)
	}
	// The held, silent connections are closed by the header timeout (10s);
	// the wait is the daemon's timer, bounded at 40s.
	deadline := time.Now().Add(40 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ended.Load() < int64(len(conns)) && time.Now().Before(deadline) {
		<-tick.C
	}
	if ended.Load() < int64(len(conns)) {
		t.Fatalf("%d silent connections still open after 40s", int64(len(conns))-ended.Load())
	}
	eventually(t, "the admin endpoint answers again", func() bool {
		code, _ := adminRequest(t, "GET", "http://"+n.admin+"/healthz", "", nil, "")
		return code == 200
	})
	t.Logf("flood of %d silent connections, cap %d: %d held, the rest ended at once (%d with a 503); descriptors %d → %d; held ones closed %v after the flood began",
		len(conns), capConns, held, answered503.Load(), baseline, fds, time.Duration(lastEnded.Load()).Round(100*time.Millisecond))
}

// An admin (or metrics) address already taken is an error at start: exit 1,
// naming the address and what to do, serving nothing, instead of letting
// the squatter answer the CLI in the daemon's name.
func TestAdminAddressTakenExitsWithClearError(t *testing.T) {
	t.Parallel()
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	taken := squatter.Addr().String()
	dir := tempDir(t)
	for _, tt := range []struct {
		flag, want string
	}{
		{"--admin-addr", "admin endpoint: listen on " + taken},
		{"--metrics-addr", "metrics endpoint: listen on " + taken},
	} {
		sock := filepath.Join(dir, "d.sock")
		args := []string{"--socket", sock, tt.flag, taken}
		if tt.flag == "--metrics-addr" {
			args = append(args, "--admin-addr", "")
		}
		cmd := exec.Command(binary, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("%s taken: still running after 30s", tt.flag)
		}
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 1 {
			t.Fatalf("%s taken: exit %v, want 1\n%s", tt.flag, err, stderr.String())
		}
		if !strings.Contains(stderr.String(), tt.want) || !strings.Contains(stderr.String(), "address already in use") ||
			!strings.Contains(stderr.String(), tt.flag) {
			t.Errorf("%s taken: the error does not name the address, the cause and the flag:\n%s", tt.flag, stderr.String())
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Errorf("%s taken: the socket was created (%v)", tt.flag, err)
		}
	}
}

// --metrics-addr, for scraping from the pod network, serves metrics and
// health and none of the admin API.
func TestMetricsAddrServesMetricsButNotTheAdminAPI(t *testing.T) {
	t.Parallel()
	metrics := "127.0.0.1:" + freePort(t)
	n := startAdminNode(t, tempDir(t), "a", adminRules, "--metrics-addr", metrics)
	n.spend("r", "k", 1)
	base := "http://" + metrics
	for _, tt := range []struct {
		method, path string
		want         int
		contains     string
	}{
		{"GET", "/metrics", 200, `sluice_decisions_total{outcome="admitted",rule="r"} 1`},
		{"GET", "/healthz", 200, "ok"},
		{"GET", "/readyz", 200, `"ready": true`},
		{"GET", "/", 404, ""},
		{"GET", "/v1/rules", 404, ""},
		{"GET", "/v1/top", 404, ""},
		{"GET", "/v1/keys/r/k", 404, ""},
		{"POST", "/v1/reload", 404, ""},
		{"DELETE", "/v1/keys/r/k", 404, ""},
		{"GET", "/debug/pprof/", 404, ""},
	} {
		code, body := adminRequest(t, tt.method, base+tt.path, "scraper.pod.example:9465", map[string]string{adminapi.Header: "1"}, "")
		if code != tt.want || !strings.Contains(body, tt.contains) {
			t.Errorf("metrics endpoint %s %s: %d, want %d with %q\n%.300s", tt.method, tt.path, code, tt.want, tt.contains, body)
		}
	}
}

// Listings do not show client keys raw unless --admin-show-keys: an API key
// used as a limit key does not leak through /v1/top or the status page.
func TestAdminTopRedactsKeysByDefault(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_0123456789abcdef"
	const redacted = "sk_l…342e20dec519" // printf %s sk_live_0123456789abcdef | sha256sum | cut -c1-12
	for _, tt := range []struct {
		args []string
		show string
		hide string
	}{
		{nil, redacted, secret},
		{[]string{"--admin-show-keys"}, secret, redacted},
	} {
		n := startAdminNode(t, tempDir(t), "a", adminRules, tt.args...)
		n.spend("r", secret, 3)
		code, body := adminRequest(t, "GET", "http://"+n.admin+"/v1/top", "", nil, "")
		if code != 200 || !strings.Contains(body, tt.show) || strings.Contains(body, tt.hide) {
			t.Errorf("%v: /v1/top %d shows %q? hides %q?\n%s", tt.args, code, tt.show, tt.hide, body)
		}
		// Asked by key, the key is the caller's own: answered as given.
		if b := n.balance(t, "r", secret); b < 2 || b > 2.1 {
			t.Errorf("balance of the key asked by name: %v", b)
		}
	}
}

var (
	sluiceCLIOnce sync.Once
	sluiceCLI     string
	sluiceCLIErr  error
)

// buildSluiceCLI builds cmd/sluice once for the tests that drive it.
func buildSluiceCLI(t *testing.T) string {
	t.Helper()
	sluiceCLIOnce.Do(func() {
		sluiceCLI = filepath.Join(filepath.Dir(binary), "sluice")
		if out, err := exec.Command("go", "build", "-o", sluiceCLI, "../sluice").CombinedOutput(); err != nil {
			sluiceCLIErr = fmt.Errorf("build sluice: %w\n%s", err, out)
		}
	})
	if sluiceCLIErr != nil {
		t.Fatal(sluiceCLIErr)
	}
	return sluiceCLI
}

// Two processes in a cluster hold a key spent (one node spent it, gossip
// told the other); `sluice reset` against one clears it on both, and
// consumption after the reset is charged on both.
func TestResetReachesTheClusterThroughTheCLI(t *testing.T) {
	t.Parallel()
	cli := buildSluiceCLI(t)
	dir := tempDir(t)
	portA, portB := freePort(t), freePort(t)
	key := secureKeyFile(t, dir, "c2x1aWNlLXRlc3Qta2V5LQ==")
	a := startAdminNode(t, dir, "a", adminRules, "--bind", "127.0.0.1:"+portA, "--gossip-key-file", key, "--gossip-interval", "10ms")
	b := startAdminNode(t, dir, "b", adminRules, "--bind", "127.0.0.1:"+portB, "--join", "127.0.0.1:"+portA,
		"--gossip-key-file", key, "--gossip-interval", "10ms")
	eventually(t, "both see two members", func() bool {
		var m adminapi.MembersView
		adminJSON(t, a.admin, "/v1/members", &m)
		return len(m.Members) == 2 && m.Members[0].State == "alive" && m.Members[1].State == "alive"
	})
	// A key new to the cluster is held to a's share of its burst for one
	// propagation delay (bucket/firstshare.go): a spends the rest after it.
	spent := 0
	eventually(t, "a spends 5 on a fresh key", func() bool {
		spent += a.spend("r", "victim", 5-spent)
		return spent == 5
	})
	eventually(t, "both hold the key spent", func() bool {
		return near(a.balance(t, "r", "victim"), 0) && near(b.balance(t, "r", "victim"), 0)
	})
	if a.spend("r", "victim", 1)+b.spend("r", "victim", 1) != 0 {
		t.Fatal("a spent key was admitted")
	}

	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(cli, args...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := run("reset", "--admin", a.admin, "nope", "victim"); code != 2 || !strings.Contains(errOut, `no rule "nope"`) {
		t.Errorf("reset of an unknown rule: exit %d %s", code, errOut)
	}
	code, out, errOut := run("reset", "--admin", a.admin, "r", "victim")
	if code != 0 || !strings.Contains(out, `reset r "victim" on a and 1 of 1 other members`) {
		t.Fatalf("sluice reset: exit %d\n%s%s", code, out, errOut)
	}
	eventually(t, "both nodes hold the key full", func() bool {
		return near(a.balance(t, "r", "victim"), 5) && near(b.balance(t, "r", "victim"), 5)
	})
	if a.spend("r", "victim", 1) != 1 || b.spend("r", "victim", 1) != 1 {
		t.Fatal("the reset key was refused")
	}
	eventually(t, "consumption after the reset is charged on both", func() bool {
		return near(a.balance(t, "r", "victim"), 3) && near(b.balance(t, "r", "victim"), 3)
	})
	code, out, _ = run("reset", "--json", "--admin", b.admin, "r", "victim")
	var v adminapi.ResetView
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Node != "b" || v.Told != 1 || !v.Clustered {
		t.Fatalf("sluice reset --json: exit %d %v %s", code, err, out)
	}
}
