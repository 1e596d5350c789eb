package main

import (
	"bytes"
	"fmt"

	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// Shipping: what a release build says about itself, run as operators run it.

// shipVersion and friends are stamped into the binaries shipBinaries builds,
// the way scripts/release.sh stamps a release.
const (
	shipVersion  = "v9.8.7-ship"
	shipRevision = "0123456789abcdef0123456789abcdef01234567"
	shipTime     = "2026-11-23T23:00:00Z"
)

var (
	shipOnce                sync.Once
	shipSluiced, shipSluice string
	shipBuildErr            error
)

// shipBinaries builds sluiced and sluice once with release-style version
// stamps (-X), next to the test binary.
func shipBinaries(t *testing.T) (sluiced, sluice string) {
	t.Helper()
	shipOnce.Do(func() {
		dir := filepath.Dir(binary)
		const pkg = "github.com/sluicelabs/sluice/internal/buildinfo"
		ld := fmt.Sprintf("-X %s.version=%s -X %s.revision=%s -X %s.commitTime=%s -X %s.dirty=true", pkg, shipVersion, pkg, shipRevision, pkg, shipTime, pkg)
		shipSluiced, shipSluice = filepath.Join(dir, "sluiced-ship"), filepath.Join(dir, "sluice-ship")
		for out, src := range map[string]string{shipSluiced: ".", shipSluice: "../sluice"} {
			if b, err := exec.Command("go", "build", "-ldflags", ld, "-o", out, src).CombinedOutput(); err != nil {
				shipBuildErr = fmt.Errorf("build %s: %w\n%s", src, err, b)
				return
			}
		}
	})
	if shipBuildErr != nil {
		t.Fatal(shipBuildErr)
	}
	return shipSluiced, shipSluice
}

// runOut runs a command to its end and returns its exit code and output.
func runOut(t *testing.T, name string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	} else if err != nil {
		t.Fatalf("run %s: %v", name, err)
	}
	return 0, out.String(), errOut.String()
}

// startShipNode is startAdminNode for another binary.
func startShipNode(t *testing.T, bin, dir, name string, args ...string) *adminNode {
	t.Helper()
	n := &adminNode{sock: filepath.Join(dir, name+".sock"), admin: "127.0.0.1:" + freePort(t)}
	cmd := exec.Command(bin, append([]string{"--socket", n.sock, "--node-name", name, "--admin-addr", n.admin}, args...)...)
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
	})
	n.p = p
	n.awaitServing(t, name)
	return n
}

// The version has one source: --version of both binaries, the start log,
// the sluice_build_info metric, and the version a peer sees in gossip
// metadata all show the stamped build.
func TestShipVersionIsOneSource(t *testing.T) {
	sluiced, sluice := shipBinaries(t)
	line := fmt.Sprintf("%s (revision %s+dirty, committed %s, %s)", shipVersion, shipRevision, shipTime, runtime.Version())
	if code, out, _ := runOut(t, sluiced, "--version"); code != 0 || out != "sluiced version "+line+"\n" {
		t.Errorf("sluiced --version: exit %d, %q; want %q", code, out, "sluiced version "+line)
	}
	if code, out, _ := runOut(t, sluice, "version"); code != 0 || out != "sluice version "+line+"\n" {
		t.Errorf("sluice version: exit %d, %q; want %q", code, out, "sluice version "+line)
	}
	if code, out, _ := runOut(t, sluice, "version", "--json"); code != 0 || !strings.Contains(out, `"version":"`+shipVersion+`"`) || !strings.Contains(out, `"modified":true`) {
		t.Errorf("sluice version --json: exit %d, %q", code, out)
	}

	dir := tempDir(t)
	portA, portB := freePort(t), freePort(t)
	key := secureKeyFile(t, dir, "c2x1aWNlLXRlc3Qta2V5LQ==")
	a := startShipNode(t, sluiced, dir, "a", "--bind", "127.0.0.1:"+portA, "--gossip-key-file", key)
	b := startShipNode(t, binary, dir, "b", "--bind", "127.0.0.1:"+portB, "--join", "127.0.0.1:"+portA, "--gossip-key-file", key)
	if log := a.p.stderr.String(); !strings.Contains(log, "version="+shipVersion) || !strings.Contains(log, `revision="`+shipRevision+`+dirty"`) {
		t.Errorf("start log without the version:\n%s", log)
	}
	_, metrics := adminRequest(t, "GET", "http://"+a.admin+"/metrics", "", nil, "")
	want := fmt.Sprintf(`sluice_build_info{goversion=%q,revision="%s+dirty",version=%q} 1`, runtime.Version(), shipRevision, shipVersion)
	if !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	// b is an unstamped build (go build in a worktree or go test): "(devel)".
	eventually(t, "b sees a's stamped version and a sees b's", func() bool {
		var mb, ma adminapi.MembersView
		adminJSON(t, b.admin, "/v1/members", &mb)
		adminJSON(t, a.admin, "/v1/members", &ma)
		return memberVersion(mb, "a") == shipVersion && memberVersion(ma, "b") != "" && memberVersion(ma, "a") == shipVersion
	})
}

// memberVersion is the version a members view shows for a member, "" when
// the member is not there.
func memberVersion(v adminapi.MembersView, name string) string {
	for _, m := range v.Members {
		if m.Name == name {
			return m.Version
		}
	}
	return ""
}

// `sluice lint` as a rules repository's CI runs it: the built CLI, no
// daemon anywhere, the embedded default rules valid, a broken pair of files
// refused with every problem on its own file:line:col line and no Go names.
func TestShipLintRunsWithoutADaemon(t *testing.T) {
	_, sluice := shipBinaries(t)
	dir := tempDir(t)
	rules := filepath.Join(dir, "rules.yaml")
	routes := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(rules, []byte("rules:\n  api: {rate: 100/1s, burst: 10}\n  junk: {rate: often}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(routes, []byte("identity: {client_ip: sometimes}\nroutes:\n  - match: /\n    limits: [{rule: api, cost: many}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runOut(t, sluice, "lint", "../../config/default_rules.yaml")
	if code != 0 || !strings.HasPrefix(out, "../../config/default_rules.yaml: 3 rules, valid") || errOut != "" {
		t.Fatalf("lint of the default rules: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runOut(t, sluice, "lint", rules, routes)
	want := []string{
		rules + ":3:16: rules.junk.rate: ",
		routes + ":1:23: identity.client_ip: expected true or false, got \"sometimes\"",
		routes + ":4:32: routes[0].limits[0].cost: expected a whole number, got \"many\"",
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if code != 1 || out != "" || len(lines) != len(want) {
		t.Fatalf("lint of broken files: exit %d (want 1), stdout %q, stderr:\n%s", code, out, errOut)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want it to start %q", i, lines[i], w)
		}
	}
	if strings.Contains(errOut, "config.") || strings.Contains(errOut, ".go:") || strings.Contains(errOut, "int64") {
		t.Errorf("Go names in the problems:\n%s", errOut)
	}
}
