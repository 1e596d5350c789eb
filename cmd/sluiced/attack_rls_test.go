package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// These tests call a real sluiced as Envoy does: the generated
// RateLimitService client, over the gRPC Unix socket or TCP, against the
// envoyproxy/ratelimit YAML the daemon was started with.

// Limits are per week: fixed windows are aligned to the Unix epoch, and a
// test must not straddle a window's end (rlsFreshWindow checks).
const rlsConfig = `domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: week, requests_per_unit: 3}
  - key: path
    value: /login
    rate_limit: {unit: week, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: week, requests_per_unit: 5}
  - key: user
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: week, requests_per_unit: 1}
      - key: plan
        value: vip
        rate_limit: {unlimited: true}
  - key: probe
    shadow_mode: true
    rate_limit: {unit: week, requests_per_unit: 1}
`

// rlsClient dials a sluiced's rate limit service at target ("unix:/path"
// or "host:port").
func rlsClient(t *testing.T, target string) rlsv3.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

// rlsDesc builds a descriptor from key, value pairs.
func rlsDesc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// rlsCall asks once, with a deadline, and fails the test on an error.
func rlsCall(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// rlsCodes is a response's overall code and its descriptors' codes, e.g.
// "OVER_LIMIT: OK OVER_LIMIT".
func rlsCodes(r *rlsv3.RateLimitResponse) string {
	parts := []string{r.GetOverallCode().String() + ":"}
	for _, s := range r.GetStatuses() {
		parts = append(parts, s.GetCode().String())
	}
	return strings.Join(parts, " ")
}

// rlsFreshWindow skips a test that would straddle the end of a weekly
// window (a few minutes a week).
func rlsFreshWindow(t *testing.T, r *rlsv3.RateLimitResponse) {
	t.Helper()
	for _, s := range r.GetStatuses() {
		if d := s.GetDurationUntilReset(); d != nil && d.AsDuration() < 5*time.Minute {
			t.Skipf("the weekly window ends in %v: too close to count across", d.AsDuration())
		}
	}
}

// rlsStart starts a sluiced serving the rate limit service on a Unix socket
// and TCP, with cfg as its envoy config; it returns the process, both
// targets and the config path.
func rlsStart(t *testing.T, dir, cfg string, args ...string) (p *proc, unixTarget, tcpTarget, cfgPath string) {
	t.Helper()
	cfgPath = filepath.Join(dir, "ratelimit.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	unixTarget = "unix:" + filepath.Join(dir, "rls.sock")
	tcpTarget = "127.0.0.1:" + freePort(t)
	p = startDaemon(t, append([]string{"--socket", filepath.Join(dir, "d.sock"), "--envoy-config", cfgPath,
		"--grpc-listen", unixTarget + "," + tcpTarget}, args...)...)
	c := rlsClient(t, unixTarget)
	eventually(t, "the rate limit service answers", func() bool {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("sluiced exited: %v\n%s", err, p.stderr.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "none", Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc("k", "v")}})
		return err == nil
	})
	return p, unixTarget, tcpTarget, cfgPath
}

func TestRLSDecidesAsRatelimitDoes(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	_, unixTarget, tcpTarget, _ := rlsStart(t, dir, rlsConfig, "--envoy-response-headers")
	c := rlsClient(t, unixTarget)
	req := func(hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "web", Descriptors: ds, HitsAddend: hits}
	}
	rlsFreshWindow(t, rlsCall(t, c, req(0, rlsDesc("path", "/warmup"))))

	t.Run("value before key-only, key-only counts per value", func(t *testing.T) {
		for i, want := range []string{"OK: OK", "OK: OK", "OVER_LIMIT: OVER_LIMIT"} {
			r := rlsCall(t, c, req(0, rlsDesc("path", "/login")))
			if got := rlsCodes(r); got != want {
				t.Fatalf("/login call %d: %s, want %s", i, got, want)
			}
			if l := r.Statuses[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 2 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_WEEK {
				t.Fatalf("/login current_limit %v, want 2 per WEEK", l)
			}
		}
		for i := range 6 {
			r := rlsCall(t, c, req(0, rlsDesc("path", "/a")))
			want, remaining := rlsv3.RateLimitResponse_OK, uint32(4-i)
			if i == 5 {
				want, remaining = rlsv3.RateLimitResponse_OVER_LIMIT, 0
			}
			if s := r.Statuses[0]; s.GetCode() != want || s.GetLimitRemaining() != remaining || s.GetCurrentLimit().GetRequestsPerUnit() != 5 {
				t.Fatalf("/a call %d: %v, want %v with %d remaining of 5", i, s, want, remaining)
			}
			if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d <= 0 || d > 7*24*time.Hour {
				t.Fatalf("duration_until_reset %v", d)
			}
		}
		if got := rlsCodes(rlsCall(t, c, req(0, rlsDesc("path", "/b")))); got != "OK: OK" {
			t.Fatalf("/b after /a is spent: %s (the key-only descriptor counts each value apart)", got)
		}
	})
	t.Run("nested, unlimited, no match", func(t *testing.T) {
		free := rlsDesc("user", "ann", "plan", "free")
		if got := rlsCodes(rlsCall(t, c, req(0, free))); got != "OK: OK" {
			t.Fatal(got)
		}
		if got := rlsCodes(rlsCall(t, c, req(0, free))); got != "OVER_LIMIT: OVER_LIMIT" {
			t.Fatalf("second free call: %s", got)
		}
		for range 5 {
			r := rlsCall(t, c, req(0, rlsDesc("user", "ann", "plan", "vip")))
			if s := r.Statuses[0]; s.GetCode() != rlsv3.RateLimitResponse_OK || s.GetLimitRemaining() != math.MaxUint32 {
				t.Fatalf("unlimited: %v", s)
			}
		}
		for _, d := range []*ratelimitv3.RateLimitDescriptor{rlsDesc("user", "ann"), rlsDesc("method", "GET"), rlsDesc("path", "/login", "x", "y")} {
			r := rlsCall(t, c, req(0, d))
			if got := rlsCodes(r); got != "OK: OK" || r.Statuses[0].GetCurrentLimit() != nil {
				t.Fatalf("%v matches no limit, got %s %v", d, got, r.Statuses[0])
			}
		}
		r := rlsCall(t, c, &rlsv3.RateLimitRequest{Domain: "elsewhere", Descriptors: []*ratelimitv3.RateLimitDescriptor{free}})
		if rlsCodes(r) != "OK: OK" {
			t.Fatalf("unknown domain: %s", rlsCodes(r))
		}
	})
	t.Run("shadow mode answers OK", func(t *testing.T) {
		for i := range 4 {
			r := rlsCall(t, c, req(0, rlsDesc("probe", "x")))
			if rlsCodes(r) != "OK: OK" || r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
				t.Fatalf("shadow call %d: %s %v", i, rlsCodes(r), r.Statuses[0])
			}
		}
	})
	t.Run("several descriptors: all or nothing, one status each", func(t *testing.T) {
		ip, free := rlsDesc("remote_address", "10.0.0.1"), rlsDesc("user", "bob", "plan", "free")
		if got := rlsCodes(rlsCall(t, c, req(0, ip, free))); got != "OK: OK OK" {
			t.Fatal(got)
		}
		if got := rlsCodes(rlsCall(t, c, req(0, ip, free))); got != "OVER_LIMIT: OK OVER_LIMIT" {
			t.Fatal(got)
		}
		// The refused call spent nothing of ip's 3: two are left.
		for i, want := range []string{"OK: OK", "OK: OK", "OVER_LIMIT: OVER_LIMIT"} {
			if got := rlsCodes(rlsCall(t, c, req(0, ip))); got != want {
				t.Fatalf("ip call %d after the refused pair: %s, want %s", i, got, want)
			}
		}
	})
	t.Run("hits_addend is the cost", func(t *testing.T) {
		ip := rlsDesc("remote_address", "10.0.0.2")
		r := rlsCall(t, c, req(2, ip))
		if rlsCodes(r) != "OK: OK" || r.Statuses[0].GetLimitRemaining() != 1 {
			t.Fatalf("cost 2 of 3: %s %v", rlsCodes(r), r.Statuses[0])
		}
		if got := rlsCodes(rlsCall(t, c, req(2, ip))); got != "OVER_LIMIT: OVER_LIMIT" {
			t.Fatalf("cost 2 with 1 left: %s", got)
		}
		if got := rlsCodes(rlsCall(t, c, req(4, rlsDesc("remote_address", "10.0.0.3")))); got != "OVER_LIMIT: OVER_LIMIT" {
			t.Fatalf("cost above the limit: %s", got)
		}
	})
	t.Run("headers", func(t *testing.T) {
		r := rlsCall(t, c, req(0, rlsDesc("remote_address", "10.0.0.4"), rlsDesc("path", "/c")))
		h := map[string]string{}
		for _, hv := range r.GetResponseHeadersToAdd() {
			h[hv.GetKey()] = hv.GetValue()
		}
		// The descriptor closest to its limit: the address, 2 left of 3.
		if h["RateLimit-Policy"] != `"default";q=3;w=604800` || !strings.HasPrefix(h["RateLimit"], `"default";r=2;t=`) {
			t.Fatalf("headers %v", h)
		}
	})
	t.Run("invalid requests are refused, not passed", func(t *testing.T) {
		for _, bad := range []*rlsv3.RateLimitRequest{
			{Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc("path", "/x")}},
			{Domain: "web"},
			{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.ShouldRateLimit(ctx, bad)
			cancel()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%v: %v, want InvalidArgument", bad, err)
			}
		}
	})
	t.Run("a request over 64 KiB is refused before it is decoded", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.ShouldRateLimit(ctx, req(0, rlsDesc("path", strings.Repeat("x", 100<<10))))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a 100 KiB request: %v, want ResourceExhausted", err)
		}
		if got := rlsCodes(rlsCall(t, c, req(0, rlsDesc("method", "GET")))); got != "OK: OK" {
			t.Fatalf("the connection after the refusal: %s", got)
		}
	})
	t.Run("the gRPC health service answers SERVING", func(t *testing.T) {
		cc, err := grpc.NewClient(tcpTarget, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
			r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health of %q: %v %v", svc, r, err)
			}
		}
	})
	t.Run("TCP serves the same buckets", func(t *testing.T) {
		r := rlsCall(t, rlsClient(t, tcpTarget), req(0, rlsDesc("path", "/login")))
		if rlsCodes(r) != "OVER_LIMIT: OVER_LIMIT" {
			t.Fatalf("over TCP: %s", rlsCodes(r))
		}
	})
}

// The YAML reloads on change, on SIGHUP, and a bad one keeps the last good
// configuration with the error named by file, line and column.
func TestRLSConfigHotReload(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	p, unixTarget, _, cfgPath := rlsStart(t, dir, rlsConfig)
	c := rlsClient(t, unixTarget)
	newLimit := func() uint32 {
		r := rlsCall(t, c, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc("tenant", "t1")}})
		return r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := newLimit(); got != 0 {
		t.Fatalf("tenant limited before it is configured: %d", got)
	}
	write := func(content string) { // a new file renamed over the old: atomic
		tmp := cfgPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfgPath); err != nil {
			t.Fatal(err)
		}
	}
	write(rlsConfig + "  - key: tenant\n    rate_limit: {unit: week, requests_per_unit: 7}\n")
	eventually(t, "the watcher loads the new descriptor", func() bool { return newLimit() == 7 })

	write(rlsConfig + "  - key: tenant\n    rate_limit: {unit: week, requests_per_unit: seven}\n")
	eventually(t, "the bad file is refused with its position", func() bool {
		return strings.Contains(p.stderr.String(), "ratelimit.yaml:22:49: descriptors[5].rate_limit.requests_per_unit")
	})
	if got := newLimit(); got != 7 {
		t.Fatalf("after a bad file the limit is %d, want the last good 7", got)
	}

	// With the watcher off, SIGHUP reloads.
	dir2 := filepath.Join(dir, "nowatch")
	if err := os.Mkdir(dir2, 0o700); err != nil {
		t.Fatal(err)
	}
	admin := "127.0.0.1:" + freePort(t)
	p2, target2, _, cfgPath2 := rlsStart(t, dir2, rlsConfig, "--no-watch", "--admin-addr", admin)
	c2 := rlsClient(t, target2)
	cfgPath = cfgPath2
	write(rlsConfig + "  - key: tenant\n    rate_limit: {unit: week, requests_per_unit: 9}\n")
	if err := p2.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	limit2 := func() uint32 {
		r := rlsCall(t, c2, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc("tenant", "t1")}})
		return r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	eventually(t, "SIGHUP loads the new file", func() bool { return limit2() == 9 })

	// And POST /v1/reload, the admin API's reload, as the CLI sends it.
	write(rlsConfig + "  - key: tenant\n    rate_limit: {unit: week, requests_per_unit: 11}\n")
	if code, body := adminRequest(t, "POST", "http://"+admin+"/v1/reload", "", map[string]string{adminapi.Header: "1"}, ""); code != 200 {
		t.Fatalf("POST /v1/reload: %d %s", code, body)
	}
	if got := limit2(); got != 11 {
		t.Fatalf("after POST /v1/reload the limit is %d, want 11", got)
	}
}

// Three keyed daemons gossip; calls spread over their rate limit services
// share one limit.
func TestRLSClusterLimitHoldsAcrossThreeNodes(t *testing.T) {
	dir := tempDir(t)
	const limit = 30
	cfg := filepath.Join(dir, "ratelimit.yaml")
	if err := os.WriteFile(cfg, []byte("domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: week, requests_per_unit: 30}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := secureKeyFile(t, dir, "c2x1aWNlLXRlc3Qta2V5LQ==")
	ports := []string{freePort(t), freePort(t), freePort(t)}
	var procs []*proc
	var clients []rlsv3.RateLimitServiceClient
	for i, name := range []string{"a", "b", "c"} {
		target := "unix:" + filepath.Join(dir, name+"-rls.sock")
		args := []string{"--socket", filepath.Join(dir, name+".sock"), "--envoy-config", cfg, "--grpc-listen", target,
			"--bind", "127.0.0.1:" + ports[i], "--gossip-key-file", key, "--node-name", name, "--gossip-interval", "10ms"}
		if i > 0 {
			args = append(args, "--join", "127.0.0.1:"+ports[0])
		}
		procs = append(procs, startDaemon(t, args...))
		clients = append(clients, rlsClient(t, target))
	}
	eventually(t, "b and c joined a", func() bool {
		s := procs[0].stderr.String()
		return strings.Contains(s, "member joined: name=b") && strings.Contains(s, "member joined: name=c")
	})
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc("tenant", "t1")}}
	probe := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc("tenant", "probe")}}
	for _, c := range clients {
		rlsFreshWindow(t, rlsCall(t, c, probe))
	}
	// Spread 3×limit calls over the nodes at 150/s: alone, each node would
	// admit the limit, 3×limit in all. Together they overshoot by what is
	// admitted during one propagation delay (a few calls; bounded here
	// loosely, below 2×limit, for a loaded machine), then refuse.
	tick := time.NewTicker(time.Second / 150)
	defer tick.Stop()
	admitted := 0
	for i := range 3 * limit {
		<-tick.C
		if rlsCall(t, clients[i%3], req).GetOverallCode() == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	t.Logf("admitted %d of %d calls spread over 3 nodes, limit %d", admitted, 3*limit, limit)
	if admitted < limit || admitted >= 2*limit {
		t.Fatalf("admitted %d cluster-wide, want from %d to below %d", admitted, limit, 2*limit)
	}
	for i, c := range clients {
		eventually(t, "every node refuses once the cluster has spent the limit", func() bool {
			return rlsCall(t, c, req).GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		})
		for range 5 {
			if r := rlsCall(t, c, req); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("node %d admitted after the cluster spent the limit: %s", i, rlsCodes(r))
			}
		}
	}
}

// SIGTERM ends the rate limit service with the daemon: the process exits 0
// and the gRPC socket file is gone.
func TestRLSShutsDownWithTheDaemon(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	p, unixTarget, _, _ := rlsStart(t, dir, rlsConfig)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("sluiced did not exit within 30s of SIGTERM\n%s", p.stderr.String())
	}
	if _, err := os.Stat(strings.TrimPrefix(unixTarget, "unix:")); !os.IsNotExist(err) {
		t.Fatalf("the gRPC socket is left behind: %v", err)
	}
	if !strings.Contains(p.stderr.String(), "envoy rate limit service stopped") {
		t.Fatalf("no stop logged:\n%s", p.stderr.String())
	}
}

// --allow-uid guards the gRPC socket as it guards the daemon's: a peer not
// listed is refused before gRPC reads a byte, and a TCP listener, which
// cannot tell who connects, is refused at start.
func TestRLSAllowUIDsGuardTheGRPCSocket(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs to run as root (uid 0 is the caller allowed below)")
	}
	dir := tempDir(t)
	cfgPath := filepath.Join(dir, "ratelimit.yaml")
	if err := os.WriteFile(cfgPath, []byte(rlsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc("path", "/x")}}

	other := "unix:" + filepath.Join(dir, "other.sock")
	p := startDaemon(t, "--socket", filepath.Join(dir, "o.sock"), "--envoy-config", cfgPath, "--grpc-listen", other, "--allow-uid", "54321")
	eventually(t, "the guarded socket exists", func() bool {
		_, err := os.Stat(strings.TrimPrefix(other, "unix:"))
		return err == nil
	})
	c := rlsClient(t, other)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := c.ShouldRateLimit(ctx, req)
	cancel()
	if status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a peer outside --allow-uid got %v, want no service", err)
	}
	eventually(t, "the refusal is logged", func() bool {
		return strings.Contains(p.stderr.String(), "connection refused: peer not in --allow-uid/--allow-gid: uid=0")
	})

	root := "unix:" + filepath.Join(dir, "root.sock")
	startDaemon(t, "--socket", filepath.Join(dir, "r.sock"), "--envoy-config", cfgPath, "--grpc-listen", root, "--allow-uid", "0")
	cr := rlsClient(t, root)
	eventually(t, "an allowed peer is served", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cr.ShouldRateLimit(ctx, req)
		return err == nil
	})

	code, out := secureRun(t, nil, "--socket", filepath.Join(dir, "t.sock"), "--envoy-config", cfgPath,
		"--grpc-listen", "127.0.0.1:"+freePort(t), "--allow-uid", "0")
	if code == 0 || !strings.Contains(out, "can only be enforced on a unix: listener") {
		t.Fatalf("TCP with --allow-uid: exit %d\n%s", code, out)
	}
}
