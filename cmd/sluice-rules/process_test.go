package main

// Tests of real processes: the built sluice-rules binary and real sluiced
// daemons (built from ../sluiced in TestMain) polling it over loopback.

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
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/pgtest"
	"github.com/sluicelabs/sluice/cmd/sluice-rules/internal/proctest"
	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/internal/rulesapi"
)

var rulesBin, sluicedBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-rules-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rulesBin, sluicedBin = filepath.Join(dir, "sluice-rules"), filepath.Join(dir, "sluiced")
	for _, b := range []struct{ dir, out, pkg string }{{".", rulesBin, "."}, {"../..", sluicedBin, "./cmd/sluiced"}} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", b.pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	pgtest.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// eventually polls cond until it holds, failing after 15 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	proctest.Eventually(t, 15*time.Second, what, cond)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// rulesService is a running sluice-rules process.
type rulesService struct {
	*proctest.Proc
	url   string
	admin *rulesapi.Client
	state string // XDG_STATE_HOME
}

var addrLine = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startRules starts sluice-rules with no flags (SQLite in a data dir under
// state, the admin token generated there), on listen (127.0.0.1:0 for
// any port), with extra flags.
func startRules(t *testing.T, state, listen string, extra ...string) *rulesService {
	t.Helper()
	cmd := exec.Command(rulesBin, extra...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state, "SLUICE_RULES_LISTEN="+listen)
	p := proctest.Start(t, cmd)
	var addr string
	eventually(t, "sluice-rules logs its address", func() bool {
		m := addrLine.FindStringSubmatch(p.Output.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	tok, err := os.ReadFile(filepath.Join(state, "sluice-rules", "admin-token"))
	if err != nil {
		t.Fatalf("admin token file: %v\n%s", err, p.Output.String())
	}
	url := "http://" + addr
	return &rulesService{Proc: p, url: url, admin: rulesapi.NewClient(url, strings.TrimSpace(string(tok))), state: state}
}

func tempDir(t *testing.T) string {
	t.Helper()
	return proctest.TempDir(t, "srp")
}

// daemon is a running sluiced polling the rules service.
type daemon struct {
	*proctest.Proc
	admin string
}

func startDaemon(t *testing.T, rulesURL string, args ...string) *daemon {
	t.Helper()
	dir := tempDir(t)
	admin := freeAddr(t)
	all := append([]string{"--socket", filepath.Join(dir, "d.sock"), "--rules-url", rulesURL, "--admin-addr", admin}, args...)
	cmd := exec.Command(sluicedBin, all...)
	cmd.Env = append(os.Environ(), "SLUICE_ADMIN_ADDR=")
	d := &daemon{Proc: proctest.Start(t, cmd), admin: admin}
	eventually(t, "the daemon answers /readyz", func() bool { _, err := d.ready(); return err == nil })
	return d
}

// ready returns the daemon's /readyz.
func (d *daemon) ready() (map[string]any, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + d.admin + "/readyz")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

func (d *daemon) rulesHash() string {
	m, err := d.ready()
	if err != nil {
		return ""
	}
	h, _ := m["rules_hash"].(string)
	return h
}

// servedHash is the rules hash a daemon enforcing the served document has.
func servedHash(t *testing.T, url string) string {
	t.Helper()
	doc, _, err := rulesapi.NewClient(url, "").Served(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := config.ParseRules("x", doc)
	if err != nil {
		t.Fatalf("served an invalid document: %v", err)
	}
	return r.Hash
}

func teamToken(t *testing.T, svc *rulesService, team string) *rulesapi.Client {
	t.Helper()
	ctx := context.Background()
	if _, err := svc.admin.CreateTeam(ctx, team); err != nil {
		t.Fatal(err)
	}
	tok, err := svc.admin.CreateToken(ctx, team, "ci")
	if err != nil {
		t.Fatal(err)
	}
	return rulesapi.NewClient(svc.url, tok.Secret)
}

// propagation changes pay.api n times and returns, for each change and
// daemon, the time from the API's answer to the daemon enforcing it.
func propagation(t *testing.T, svc *rulesService, pay *rulesapi.Client, daemons []*daemon, n int) []time.Duration {
	t.Helper()
	ctx := context.Background()
	var out []time.Duration
	for i := range n {
		spec := fmt.Sprintf("rate: %d/1s\n", 100+i%2) // alternate: never a loosening
		if _, err := pay.PutRule(ctx, "pay", "api", spec, rulesapi.ChangeOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		want := servedHash(t, svc.url)
		got := make([]time.Duration, len(daemons))
		var wg sync.WaitGroup
		for j, d := range daemons {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				deadline := time.After(60 * time.Second)
				for d.rulesHash() != want {
					select {
					case <-tick.C:
					case <-deadline:
						got[j] = -1
						return
					}
				}
				got[j] = time.Since(start)
			}()
		}
		wg.Wait()
		for j, g := range got {
			if g < 0 {
				t.Fatalf("change %d did not reach daemon %d within 60 s", i, j)
			}
		}
		out = append(out, got...)
	}
	return out
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

// TestProcessLongPollBringsChangesToDaemonsWithinASecond: three daemons
// long-polling a real sluice-rules (poll interval an hour, so only the
// long-poll can bring the changes) enforce every change within a second;
// a fourth polling plainly every second follows too, in about half a
// second on average.
func TestProcessLongPollBringsChangesToDaemonsWithinASecond(t *testing.T) {
	svc := startRules(t, tempDir(t), "127.0.0.1:0")
	pay := teamToken(t, svc, "pay")
	url := svc.url + rulesapi.ServedPath
	var longPoll []*daemon
	for range 3 {
		longPoll = append(longPoll, startDaemon(t, url, "--rules-wait", "30s", "--rules-poll-interval", "1h"))
	}
	const changes = 10
	lp := propagation(t, svc, pay, longPoll, changes)
	p50, p99, worst := percentile(lp, 0.5), percentile(lp, 0.99), slices.Max(lp)
	t.Logf("long-poll: change -> every daemon enforcing it, %d samples: p50 %v, p99 %v, max %v", len(lp), p50, p99, worst)
	if p99 > time.Second {
		t.Errorf("long-poll p99 %v; want under a second", p99)
	}
	plain := startDaemon(t, url, "--rules-poll-interval", "1s")
	pp := propagation(t, svc, pay, []*daemon{plain}, 5)
	t.Logf("plain polling every 1s: %d samples: p50 %v, max %v", len(pp), percentile(pp, 0.5), slices.Max(pp))
	if slices.Max(pp) > 5*time.Second {
		t.Errorf("plain polling took %v; want about the poll interval", slices.Max(pp))
	}
}

// TestProcessDaemonsKeepRulesWhileTheServiceIsDown: the service stops;
// daemons keep enforcing the last rules and report it unreachable; it
// restarts on the same database and port and the next change arrives.
func TestProcessDaemonsKeepRulesWhileTheServiceIsDown(t *testing.T) {
	state := tempDir(t)
	svc := startRules(t, state, "127.0.0.1:0")
	addr := strings.TrimPrefix(svc.url, "http://")
	pay := teamToken(t, svc, "pay")
	ctx := context.Background()
	if _, err := pay.PutRule(ctx, "pay", "api", "rate: 5/1s", rulesapi.ChangeOptions{}); err != nil {
		t.Fatal(err)
	}
	want := servedHash(t, svc.url)
	d := startDaemon(t, svc.url+rulesapi.ServedPath, "--rules-wait", "30s", "--rules-poll-interval", "200ms")
	eventually(t, "the daemon enforces the rule", func() bool { return d.rulesHash() == want })

	if err := svc.Stop(t); err != nil {
		t.Fatalf("sluice-rules exit after SIGTERM: %v\n%s", err, svc.Output.String())
	}
	eventually(t, "the daemon reports the service unreachable", func() bool {
		m, err := d.ready()
		return err == nil && m["rules_url_reachable"] == false
	})
	if got := d.rulesHash(); got != want {
		t.Fatalf("rules changed while the service was down: %s, want %s", got, want)
	}
	svc2 := startRules(t, state, addr)
	if _, err := pay.PutRule(ctx, "pay", "api", "rate: 4/1s", rulesapi.ChangeOptions{}); err != nil {
		t.Fatalf("the old token after a restart: %v", err)
	}
	want2 := servedHash(t, svc2.url)
	eventually(t, "the daemon follows the restarted service", func() bool { return d.rulesHash() == want2 })
}

// TestProcessABadDocumentIsNeverServed: invalid changes are refused with
// the rule and field named, the served version does not move, and the
// daemons never see (or fail to reload) a bad document.
func TestProcessABadDocumentIsNeverServed(t *testing.T) {
	svc := startRules(t, tempDir(t), "127.0.0.1:0")
	pay := teamToken(t, svc, "pay")
	ctx := context.Background()
	if _, err := pay.PutRule(ctx, "pay", "api", "rate: 5/1s", rulesapi.ChangeOptions{}); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, svc.url+rulesapi.ServedPath, "--rules-wait", "30s", "--rules-poll-interval", "1h")
	want := servedHash(t, svc.url)
	eventually(t, "the daemon enforces the rule", func() bool { return d.rulesHash() == want })
	bad := []struct{ spec, field string }{
		{"rate: 5/1s\nburst: -1\n", "burst"},
		{"rate: five/1s\n", "rate"},
		{"rate: 5/1s\nalgorithm: magic\n", "algorithm"},
		{"rate: 5/1s\nshadow: maybe\n", "shadow"},
		{"limits: []\n", "limits"},
		{"rate: 5/1s\nextra: 1\n", "extra"},
	}
	for _, b := range bad {
		_, err := pay.PutRule(ctx, "pay", "api", b.spec, rulesapi.ChangeOptions{Confirm: true})
		var ae *rulesapi.APIError
		if !errors.As(err, &ae) || ae.Code != rulesapi.CodeInvalidRules || len(ae.Problems) == 0 || ae.Problems[0].Rule != "api" || ae.Problems[0].Field != b.field {
			t.Errorf("spec %q: %v; want invalid_rules naming rule api field %s", b.spec, err, b.field)
		}
	}
	_, err := pay.PutTeamRules(ctx, "pay", "rules:\n  api: {rate: 5/1s}\n  web: {rate: 0/1s}\n", rulesapi.ChangeOptions{})
	var ae *rulesapi.APIError
	if !errors.As(err, &ae) || ae.Code != rulesapi.CodeInvalidRules || ae.Problems[0].Rule != "web" || ae.Problems[0].Line != 3 {
		t.Errorf("bad document: %v", err)
	}
	st, err := svc.admin.Status(ctx)
	if err != nil || st.Version != 1 {
		t.Fatalf("status after refused changes: %+v %v", st, err)
	}
	m, err := d.ready()
	if err != nil || m["reloads_failed"] != float64(0) || d.rulesHash() != want {
		t.Fatalf("daemon after refused changes: %v %v", m, err)
	}
	resp, err := http.Get(svc.url + rulesapi.MetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), fmt.Sprintf("sluice_rules_validation_failures_total %d", len(bad)+1)) {
		t.Errorf("validation failures not counted:\n%s", body)
	}
}

// TestProcessTeamsAndStaleEdits: against the real binary, a team's token
// cannot touch another team's rules, and of two edits from the same
// ETag the second gets 412.
func TestProcessTeamsAndStaleEdits(t *testing.T) {
	svc := startRules(t, tempDir(t), "127.0.0.1:0")
	pay, web := teamToken(t, svc, "pay"), teamToken(t, svc, "web")
	ctx := context.Background()
	if _, err := pay.PutRule(ctx, "pay", "api", "rate: 5/1s", rulesapi.ChangeOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := web.PutRule(ctx, "pay", "api", "rate: 500/1s", rulesapi.ChangeOptions{Confirm: true})
	var ae *rulesapi.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
		t.Fatalf("web changing pay's rule: %v", err)
	}
	_, etag, err := pay.Rule(ctx, "pay", "api")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pay.PutRule(ctx, "pay", "api", "rate: 6/1s", rulesapi.ChangeOptions{IfMatch: etag}); err != nil {
		t.Fatal(err)
	}
	_, err = pay.PutRule(ctx, "pay", "api", "rate: 7/1s", rulesapi.ChangeOptions{IfMatch: etag})
	if !errors.As(err, &ae) || ae.Status != http.StatusPreconditionFailed {
		t.Fatalf("stale edit: %v", err)
	}
	log, err := svc.admin.Audit(ctx, rulesapi.AuditQuery{Team: "pay"})
	if err != nil || log.Entries[0].Action != rulesapi.ActionUpdate || !strings.Contains(log.Entries[0].After, "6/1s") {
		t.Fatalf("audit: %+v %v", log, err)
	}
}

// TestProcessShutdownAnswersHeldLongPolls: SIGTERM ends the process
// promptly and cleanly even with long-polls held.
func TestProcessShutdownAnswersHeldLongPolls(t *testing.T) {
	svc := startRules(t, tempDir(t), "127.0.0.1:0")
	got := make(chan error, 1)
	go func() {
		_, _, err := rulesapi.NewClient(svc.url, "").Served(context.Background(), `"v0"`, 5*time.Minute)
		got <- err
	}()
	eventually(t, "the long-poll is held", func() bool {
		resp, err := http.Get(svc.url + rulesapi.MetricsPath)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "sluice_rules_longpoll_waiting 1" {
				return true
			}
		}
		return false
	})
	start := time.Now()
	if err := svc.Stop(t); err != nil {
		t.Fatalf("exit: %v\n%s", err, svc.Output.String())
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("shutdown took %v with a long-poll held", took)
	}
	if err := <-got; !errors.Is(err, rulesapi.ErrNotModified) {
		t.Errorf("held long-poll at shutdown: %v; want 304", err)
	}
}

// TestProcessOnPostgreSQL: the service on PostgreSQL; a change reaches a
// long-polling daemon.
func TestProcessOnPostgreSQL(t *testing.T) {
	dbURL := pgtest.URL(t)
	svc := startRules(t, tempDir(t), "127.0.0.1:0", "--db", dbURL)
	if !strings.Contains(svc.Output.String(), "db=postgres") {
		t.Fatalf("not on postgres:\n%s", svc.Output.String())
	}
	pay := teamToken(t, svc, "pay")
	d := startDaemon(t, svc.url+rulesapi.ServedPath, "--rules-wait", "30s", "--rules-poll-interval", "1h")
	lp := propagation(t, svc, pay, []*daemon{d}, 3)
	t.Logf("postgres long-poll propagation: %v", lp)
}

// TestProcessRulesWaitAgainstAStaticServerIsPlainPolling: a real sluiced
// with --rules-wait pointed at a plain static file server (net/http's
// FileServer: Last-Modified and 304s, no ETag, no long-poll) follows a
// changed file at its poll interval, without hammering the server.
func TestProcessRulesWaitAgainstAStaticServerIsPlainPolling(t *testing.T) {
	dir := tempDir(t)
	path := filepath.Join(dir, "rules.yaml")
	write := func(rate int, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(path, fmt.Appendf(nil, "rules:\n  r:\n    rate: %d/1s\n", rate), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write(5, time.Now().Add(-time.Hour))
	var mu sync.Mutex
	requests := 0
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
		files.ServeHTTP(w, r)
	}))
	defer srv.Close()
	hash := func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := config.ParseRules("x", b)
		if err != nil {
			t.Fatal(err)
		}
		return r.Hash
	}
	d := startDaemon(t, srv.URL+"/rules.yaml", "--rules-wait", "30s", "--rules-poll-interval", "200ms")
	want := hash()
	eventually(t, "the daemon enforces the file's rules", func() bool { return d.rulesHash() == want })
	write(7, time.Now()) // a newer Last-Modified
	want = hash()
	eventually(t, "the daemon follows the changed file", func() bool { return d.rulesHash() == want })
	// Polled at the interval, not in a tight loop: ten more requests take
	// at least about ten intervals (less 10% jitter; load only slows them).
	count := func() int { mu.Lock(); defer mu.Unlock(); return requests }
	from, start := count(), time.Now()
	eventually(t, "ten more polls", func() bool { return count() >= from+10 })
	if took := time.Since(start); took < 10*200*time.Millisecond*8/10 {
		t.Errorf("ten requests to a static server in %v: a tight loop, not polling every 200ms", took)
	}
}
