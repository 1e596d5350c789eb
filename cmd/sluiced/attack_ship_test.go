package main

import (
	"bytes"
	"fmt"
	"net/http"

	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

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
	p := startProc(t, cmd)
	n.p = p
	n.awaitServing(t, name)
	return n
}

// The version has one source: --version of both binaries, the start log,
// the sluice_build_info metric, and the version a peer sees in gossip
// metadata all show the stamped build.
func TestShipVersionIsOneSource(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// copyExecutable puts a binary into dir (a hard link, else a copy of mode
// 0755), for a process running as another user, who cannot reach the
// test's private temporary directories.
func copyExecutable(t *testing.T, src, dir string) string {
	t.Helper()
	dst := filepath.Join(dir, filepath.Base(src))
	// A hard link, where it can be made, opens no file for writing: a copy
	// written while a parallel test forks can still be open for writing in
	// that child until it execs, and running the copy then fails with
	// "text file busy" (ETXTBSY; CI saw it once, golang/go#22315).
	if err := os.Link(src, dst); err == nil {
		return dst
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// A Kubernetes pod's socket volume, made as the kubelet makes an emptyDir
// with securityContext.fsGroup: owned by root, group fsGroup, mode 2777
// (world-writable, setgid, not sticky). sluiced runs as a non-root user in
// that group, the app as another non-root user in it. The daemon refuses the
// volume unless told it is a pod volume (--socket-shared-volume), then makes
// its own directory inside (group fsGroup by the setgid bit), and the app
// connects through the group bits (--socket-mode 0660). A directory another
// user made first at the socket directory's name is refused.
func TestShipSocketOnAnEmptyDirWithFSGroup(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs the daemon and the app as two other users")
	}
	const daemonUID, appUID, fsGroup = 65532, 10001, 4242
	base := tempDir(t)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	_, cli := shipBinaries(t)
	daemonBin, cliBin := copyExecutable(t, binary, bin), copyExecutable(t, cli, bin)
	vol := filepath.Join(base, "vol")
	if err := os.Mkdir(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(vol, 0, fsGroup); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(vol, 0o777|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(vol, "sock", "sluiced.sock")
	as := func(cmd *exec.Cmd, uid uint32) *exec.Cmd {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{fsGroup}}}
		cmd.Env = []string{"PATH=/usr/bin:/bin", "SLUICE_ADMIN_ADDR=", "SLUICE_DAEMON_UIDS=65532"}
		return cmd
	}
	daemonArgs := []string{"--socket", sock, "--socket-mode", "0660", "--node-name", "pod-0"}

	// Without the flag: refused, and the message names the way out.
	out, err := as(exec.Command(daemonBin, daemonArgs...), daemonUID).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "writable by others and not sticky") || !strings.Contains(string(out), "--socket-shared-volume") {
		t.Fatalf("sluiced on a world-writable volume without --socket-shared-volume: %v\n%s", err, out)
	}

	// Another user got there first: refused even with the flag.
	squat := filepath.Join(vol, "sock")
	os.Remove(squat) // the refused daemon made it before checking
	if err := os.Mkdir(squat, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(squat, appUID, fsGroup); err != nil {
		t.Fatal(err)
	}
	out, err = as(exec.Command(daemonBin, append(daemonArgs, "--socket-shared-volume")...), daemonUID).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "owned by uid 10001") {
		t.Fatalf("sluiced with the socket directory made by another user: %v\n%s", err, out)
	}
	if err := os.Remove(squat); err != nil {
		t.Fatal(err)
	}

	cmd := as(exec.Command(daemonBin, append(daemonArgs, "--socket-shared-volume")...), daemonUID)
	p := startProc(t, cmd)
	eventually(t, "sluiced serves on the pod volume", func() bool {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("sluiced exited: %v\n%s", err, p.stderr.String())
		default:
		}
		_, err := os.Stat(sock)
		return err == nil
	})
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Dir(sock), &st); err != nil || st.Uid != daemonUID || st.Gid != fsGroup || st.Mode&0o777 != 0o750 {
		t.Fatalf("socket directory: uid %d gid %d mode %o (%v), want %d, %d, 0750", st.Uid, st.Gid, st.Mode&0o7777, err, daemonUID, fsGroup)
	}
	// The app, another user in the fsGroup, is answered; a user outside it is not.
	if out, err := as(exec.Command(cliBin, "check", "--socket", sock, "default", "k"), appUID).CombinedOutput(); err != nil {
		t.Fatalf("the app in the fsGroup: %v\n%s", err, out)
	}
	outsider := exec.Command(cliBin, "check", "--socket", sock, "default", "k")
	outsider.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 10002, Gid: 10002}}
	outsider.Env = []string{"PATH=/usr/bin:/bin", "SLUICE_DAEMON_UIDS=65532"}
	if out, err := outsider.CombinedOutput(); err == nil {
		t.Fatalf("a user outside the fsGroup was answered:\n%s", out)
	}
}

// The gossip key as Kubernetes mounts a Secret for a non-root container in
// a pod with an fsGroup: root:fsGroup, mode 0440. sluiced, running as a
// non-root user in that group, accepts it and gossips encrypted; the same
// file group-writable, or readable by others, is refused; a daemon running
// as root still refuses a group-readable key (TestSecureUnsafeGossipSettingsAreRefusedAtStart).
func TestShipGossipKeyFromASecretWithFSGroup(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the key is root's and the daemon runs as another user")
	}
	const daemonUID, fsGroup = 65532, 4242
	base := tempDir(t)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	daemonBin := copyExecutable(t, binary, base)
	secrets := filepath.Join(base, "secret")
	if err := os.Mkdir(secrets, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(mode os.FileMode) *proc {
		key := filepath.Join(secrets, fmt.Sprintf("key-%o", mode))
		if err := os.WriteFile(key, []byte(secureKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(key, 0, fsGroup); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(key, mode); err != nil {
			t.Fatal(err)
		}
		sockDir := filepath.Join(base, fmt.Sprintf("run-%o", mode))
		if err := os.Mkdir(sockDir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(sockDir, daemonUID, fsGroup); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(daemonBin, "--socket", filepath.Join(sockDir, "s.sock"), "--bind", "127.0.0.1:"+freePort(t), "--gossip-key-file", key)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: daemonUID, Gid: daemonUID, Groups: []uint32{fsGroup}}}
		cmd.Env = []string{"SLUICE_ADMIN_ADDR="}
		p := startProc(t, cmd)
		return p
	}
	ok := run(0o440)
	eventually(t, "sluiced gossips encrypted with the Secret's key", func() bool {
		select {
		case err := <-ok.exited:
			ok.exited <- err
			t.Fatalf("sluiced refused the root:fsGroup 0440 key: %v\n%s", err, ok.stderr.String())
		default:
		}
		return strings.Contains(ok.stderr.String(), "encrypted=true")
	})
	for _, mode := range []os.FileMode{0o460, 0o444} {
		p := run(mode)
		select {
		case err := <-p.exited:
			p.exited <- err // for the cleanup
			if err == nil || !strings.Contains(p.stderr.String(), fmt.Sprintf("has mode %04o", mode)) {
				t.Errorf("key mode %04o: exit %v\n%s", mode, err, p.stderr.String())
			}
		case <-time.After(15 * time.Second):
			t.Errorf("key mode %04o: sluiced still running after 15s; want it refused at start\n%s", mode, p.stderr.String())
		}
	}
}

// --join with a DNS name that resolves to several addresses, as a headless
// Service's name does (one A record per pod): three daemons that know
// nothing of each other, and a fourth joining through the name alone, end
// in one cluster of four, so the fourth reached every address. With
// rejoin, the name lists only the first at the start (pods started
// together see few of each other), and the other two are added while the
// fourth runs: it finds them by resolving the name again. The name is
// resolved from an /etc/hosts bind-mounted, in a mount namespace of the
// fourth daemon's own, over the real one (and rewritten in place).
func TestShipJoinThroughANameWithSeveralAddresses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		rejoin bool
	}{{"every address at the start", false}, {"addresses added later, found by rejoin", true}} {
		t.Run(tt.name, func(t *testing.T) { testJoinThroughAName(t, tt.rejoin) })
	}
}

func testJoinThroughAName(t *testing.T, later bool) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a mount namespace to give the joining daemon its own /etc/hosts")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	dir := tempDir(t)
	key := secureKeyFile(t, dir, "c2x1aWNlLXRlc3Qta2V5LQ==")
	port := freePort(t) // the same port on 127.0.0.1, .2 and .3, as pods share one
	const name = "sluice-peers.example.test"
	var peers []*adminNode
	hosts := "127.0.0.1 localhost\n"
	first := ""
	for i, ip := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		node := fmt.Sprintf("pod-%d", i)
		peers = append(peers, startShipNode(t, binary, dir, node, "--bind", ip+":"+port, "--gossip-key-file", key))
		hosts += ip + " " + name + "\n"
		if i == 0 {
			first = hosts
		}
	}
	hostsFile := filepath.Join(dir, "hosts")
	initial := hosts
	if later {
		initial = first
	}
	if err := os.WriteFile(hostsFile, []byte(initial), 0o644); err != nil {
		t.Fatal(err)
	}
	joiner := &adminNode{sock: filepath.Join(dir, "pod-3.sock"), admin: "127.0.0.1:" + freePort(t)}
	script := `mount --bind "$1" /etc/hosts && shift && exec "$@"`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", hostsFile,
		binary, "--socket", joiner.sock, "--node-name", "pod-3", "--admin-addr", joiner.admin,
		"--bind", "127.0.0.4:"+port, "--join", name+":"+port, "--gossip-key-file", key, "--rejoin-interval", "200ms")
	p := startProc(t, cmd)
	joiner.p = p
	joiner.awaitServing(t, "pod-3")
	if later {
		eventually(t, "pod-3 joins the one address the name has", func() bool { return strings.Contains(p.stderr.String(), "peers_answered=1") })
		// In place (the bind mount holds this inode): the name now lists all three.
		if err := os.WriteFile(hostsFile, []byte(hosts), 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		eventually(t, "pod-3 says all three addresses answered", func() bool { return strings.Contains(p.stderr.String(), "peers_answered=3") })
	}
	for _, n := range append(peers, joiner) {
		eventually(t, "every daemon sees four alive members", func() bool {
			var v adminapi.MembersView
			adminJSON(t, n.admin, "/v1/members", &v)
			alive := 0
			for _, m := range v.Members {
				if m.State == "alive" {
					alive++
				}
			}
			return alive == 4
		})
	}
	if later && !strings.Contains(p.stderr.String(), "joined peers found by resolving the join list again") {
		t.Errorf("no log of the rejoin:\n%s", p.stderr.String())
	}
}

// The Kubernetes example's sidecar, as far as it runs without Kubernetes:
// sluiced started with the exact arguments of deploy/kubernetes/deployment.yaml
// (the downward-API variables filled in, the mount paths moved under a
// temporary directory, the ports made free ones), as its uid with the pod's
// fsGroup, on a directory made like the emptyDir, the ConfigMap's rules and a
// key file made like the Secret's, and the container's literal environment
// (GOMEMLIMIT). It must serve: the probes' /readyz and /healthz on the
// metrics address, and a check from the app's uid. Then the example's app
// container (a stand-in: sluiced proxy) runs with its own arguments and
// environment as the app's user, and answers through the sidecar until the
// "default" rule's burst is spent.
func TestShipKubernetesSidecarArgsStartTheDaemon(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemon and the app run as the pod's users")
	}
	const sidecarUID, appUID, fsGroup = 65532, 10001, 4242
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					InitContainers []struct {
						Args []string
						Env  []struct{ Name, Value string }
					} `yaml:"initContainers"`
					Containers []struct {
						Args []string
						Env  []struct{ Name, Value string }
					}
				}
			}
		}
	}
	if err := yaml.Unmarshal(data, &dep); err != nil || len(dep.Spec.Template.Spec.InitContainers) != 1 || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("deployment.yaml: %v", err)
	}
	cmData, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "configmap-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct{ Data map[string]string }
	if err := yaml.Unmarshal(cmData, &cm); err != nil {
		t.Fatal(err)
	}

	base := tempDir(t)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mkdir := func(p string, mode os.FileMode, uid, gid int) {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, body string, mode os.FileMode, uid, gid int) {
		t.Helper()
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(base, "pod")
	mkdir(filepath.Join(root, "run", "sluice"), 0o777|os.ModeSetgid, 0, fsGroup) // the emptyDir
	mkdir(filepath.Join(root, "etc", "sluice", "rules"), 0o755, 0, fsGroup)      // the ConfigMap
	write(filepath.Join(root, "etc", "sluice", "rules", "rules.yaml"), cm.Data["rules.yaml"], 0o644, 0, fsGroup)
	mkdir(filepath.Join(root, "etc", "sluice", "gossip"), 0o755, 0, fsGroup) // the Secret
	write(filepath.Join(root, "etc", "sluice", "gossip", "gossip.key"), secureKey+"\n", 0o440, 0, fsGroup)
	daemonBin := copyExecutable(t, binary, base)

	gossipPort, metrics, admin := freePort(t), "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	var args []string
	for _, a := range dep.Spec.Template.Spec.InitContainers[0].Args {
		a = strings.NewReplacer("$(POD_NAME)", "example-app-0", "$(POD_IP)", "127.0.0.1", "$(POD_NAMESPACE)", "default",
			":7946", ":"+gossipPort, "0.0.0.0:9465", metrics, "127.0.0.1:9464", admin,
			"/run/sluice", filepath.Join(root, "run", "sluice"), "/etc/sluice", filepath.Join(root, "etc", "sluice")).Replace(a)
		args = append(args, a)
	}
	sock := filepath.Join(root, "run", "sluice", "sock", "sluiced.sock")
	if !slices.Contains(args, "--socket="+sock) {
		t.Fatalf("the sidecar's socket is not where the test expects it: %q", args)
	}
	cmd := exec.Command(daemonBin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: sidecarUID, Gid: sidecarUID, Groups: []uint32{fsGroup}}}
	cmd.Env = []string{}
	for _, e := range dep.Spec.Template.Spec.InitContainers[0].Env {
		if e.Value != "" { // the literal ones (GOMEMLIMIT); the downward API's are in the arguments above
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	p := startProc(t, cmd)
	eventually(t, "the sidecar's probes pass", func() bool {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("sluiced with the sidecar's arguments exited: %v\n%s", err, p.stderr.String())
		default:
		}
		ready, _ := adminRequest(t, "GET", "http://"+metrics+"/readyz", "", nil, "")
		live, _ := adminRequest(t, "GET", "http://"+metrics+"/healthz", "", nil, "")
		return ready == 200 && live == 200
	})
	if !strings.Contains(p.stderr.String(), `"encrypted":true`) {
		t.Errorf("the sidecar does not gossip encrypted with the Secret's key:\n%s", p.stderr.String())
	}
	// The app, as in the example: its uid, the fsGroup, SLUICE_SOCKET and SLUICE_DAEMON_UIDS.
	_, cli := shipBinaries(t)
	app := exec.Command(copyExecutable(t, cli, base), "check", "api", "user-1")
	app.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: appUID, Gid: appUID, Groups: []uint32{fsGroup}}}
	app.Env = []string{"SLUICE_SOCKET=" + sock, "SLUICE_DAEMON_UIDS=65532"}
	if out, err := app.CombinedOutput(); err != nil {
		t.Fatalf("the app's check: %v\n%s", err, out)
	}

	// The example's app container itself, a stand-in (sluiced proxy) run
	// with its arguments and environment as its user: it answers through
	// the sidecar's socket, and refuses past the "default" rule's burst.
	spec := dep.Spec.Template.Spec.Containers[0]
	listen := "127.0.0.1:" + freePort(t)
	var appArgs []string
	for _, a := range spec.Args {
		appArgs = append(appArgs, strings.NewReplacer("0.0.0.0:8080", listen, "127.0.0.1:9465", metrics).Replace(a))
	}
	proxyCmd := exec.Command(daemonBin, appArgs...)
	proxyCmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: appUID, Gid: appUID, Groups: []uint32{fsGroup}}}
	proxyCmd.Env = []string{}
	for _, e := range spec.Env {
		v := strings.ReplaceAll(e.Value, "/run/sluice", filepath.Join(root, "run", "sluice"))
		proxyCmd.Env = append(proxyCmd.Env, e.Name+"="+v)
	}
	pp := startProc(t, proxyCmd)
	var codes []int
	eventually(t, "the stand-in app answers, then refuses past the burst", func() bool {
		select {
		case err := <-pp.exited:
			pp.exited <- err
			t.Fatalf("the app container's proxy exited: %v\n%s", err, pp.stderr.String())
		default:
		}
		code, _ := adminRequest(t, "GET", "http://"+listen+"/healthz", "", nil, "")
		if code != 0 {
			codes = append(codes, code)
		}
		return code == http.StatusTooManyRequests
	})
	// The 429 comes from the sidecar deciding; a call that failed open for
	// any cause but a slow answer (a loaded machine: the daemon was reached
	// and answered late) would mean the app does not reach it as deployed.
	if !slices.Contains(codes, http.StatusOK) || failedOpenNotSlow(pp.stderr.String()) {
		t.Fatalf("the stand-in app's answers %v (want 200s through the sidecar, then 429); its log:\n%s", codes, pp.stderr.String())
	}
	t.Logf("the stand-in app answered %v", codes)
}

// failedOpenNotSlow reports whether log holds a call that failed open for
// another cause than the daemon's answer coming late (cause=timeout).
func failedOpenNotSlow(log string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "failing open") && !strings.Contains(line, "cause=timeout") {
			return true
		}
	}
	return false
}

// The systemd unit's common case, as far as it runs without systemd as
// PID 1: sluiced started with the unit's ExecStart arguments (paths moved
// under a temporary directory, the admin port a free one) as its User
// (uid 65532 here), Group (gid 4242, "sluice-clients") and
// SupplementaryGroups, under its UMask, in a directory made as
// RuntimeDirectory= makes it (User:Group, RuntimeDirectoryMode). A service
// whose user is in the group, with SLUICE_SOCKET and SLUICE_DAEMON_UIDS as
// the unit's header says, is answered; a user outside the group is told
// the socket's path and the fix; a service that does not trust the
// daemon's uid is told to set SLUICE_DAEMON_UIDS.
func TestShipSystemdUnitSharesTheSocketWithItsGroup(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemon and the services run as other users")
	}
	const daemonUID, clientsGID, serviceUID, outsiderUID = 65532, 4242, 10001, 10002
	unit, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "sluiced.service"))
	if err != nil {
		t.Fatal(err)
	}
	directives := map[string]string{}
	text := strings.ReplaceAll(string(unit), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			directives[k] = v
		}
	}
	for k, want := range map[string]string{"User": "sluiced", "Group": "sluice-clients", "SupplementaryGroups": "sluiced",
		"RuntimeDirectory": "sluice", "RuntimeDirectoryMode": "0750", "UMask": "0077"} {
		if directives[k] != want {
			t.Fatalf("the unit's %s=%q, want %q (the test models that)", k, directives[k], want)
		}
	}
	exec0 := strings.Fields(directives["ExecStart"])
	if len(exec0) < 2 || exec0[0] != "/usr/local/bin/sluiced" {
		t.Fatalf("the unit's ExecStart: %q", directives["ExecStart"])
	}

	base := tempDir(t)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	run, etc := filepath.Join(base, "run", "sluice"), filepath.Join(base, "etc", "sluice")
	for _, d := range []string{filepath.Dir(run), etc} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(run, 0o750); err != nil { // RuntimeDirectory=: User:Group, RuntimeDirectoryMode
		t.Fatal(err)
	}
	if err := os.Chown(run, daemonUID, clientsGID); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "rules.yaml"), []byte("rules:\n  api:\n    rate: 100/1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, cli := shipBinaries(t)
	daemonBin, cliBin := copyExecutable(t, binary, base), copyExecutable(t, cli, base)
	admin := "127.0.0.1:" + freePort(t)
	args := []string{"-c", `umask 0077 && exec "$@"`, "sh", daemonBin}
	for _, a := range exec0[1:] {
		args = append(args, strings.NewReplacer("/run/sluice", run, "/etc/sluice", etc, "127.0.0.1:9464", admin).Replace(a))
	}
	daemon := exec.Command("/bin/sh", args...)
	daemon.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: daemonUID, Gid: clientsGID, Groups: []uint32{daemonUID}}}
	daemon.Env = []string{}
	p := startProc(t, daemon)
	sock := filepath.Join(run, "sluiced.sock")
	eventually(t, "sluiced serves the unit's socket", func() bool {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("sluiced with the unit's arguments exited: %v\n%s", err, p.stderr.String())
		default:
		}
		_, err := os.Stat(sock)
		return err == nil
	})
	var st syscall.Stat_t
	if err := syscall.Stat(sock, &st); err != nil || st.Uid != daemonUID || st.Gid != clientsGID || st.Mode&0o777 != 0o660 {
		t.Fatalf("socket: uid %d gid %d mode %o (%v), want %d, %d, 0660", st.Uid, st.Gid, st.Mode&0o7777, err, daemonUID, clientsGID)
	}
	check := func(uid uint32, groups []uint32, env ...string) (int, string) {
		c := exec.Command(cliBin, "check", "api", "k")
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: groups}}
		c.Env = append([]string{"PATH=/usr/bin:/bin", "SLUICE_SOCKET=" + sock}, env...)
		out, err := c.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	trust := fmt.Sprintf("SLUICE_DAEMON_UIDS=%d", daemonUID)
	if code, out := check(serviceUID, []uint32{clientsGID}, trust); code != 0 {
		t.Fatalf("a service in sluice-clients: exit %d\n%s", code, out)
	}
	code, out := check(outsiderUID, nil, trust)
	for _, want := range []string{sock, "permission denied", fmt.Sprintf("add this user to group %d", clientsGID), "sluice doctor"} {
		if code != 2 || !strings.Contains(out, want) {
			t.Errorf("a user outside the group: exit %d, want 2 and %q in:\n%s", code, want, out)
		}
	}
	code, out = check(serviceUID, []uint32{clientsGID})
	if code != 2 || !strings.Contains(out, "SLUICE_DAEMON_UIDS") || !strings.Contains(out, strconv.Itoa(daemonUID)) {
		t.Errorf("a service that does not trust the daemon's uid: exit %d, want 2 naming SLUICE_DAEMON_UIDS and uid %d:\n%s", code, daemonUID, out)
	}
}

// The systemd unit passes systemd's own checker, `systemd-analyze verify`
// (unknown directives, values it cannot parse, a missing executable), with
// its ExecStart pointed at the built sluiced. systemd-analyze exits 0 even
// when it ignores a line it cannot read, so any line it prints about the
// unit fails the test. Skips without systemd-analyze (Debian's systemd
// package); SLUICE_REQUIRE_SYSTEMD=1 (set by .ci/run) fails instead.
func TestShipSystemdUnitVerifies(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_SYSTEMD") != "" {
			t.Fatalf("SLUICE_REQUIRE_SYSTEMD is set but systemd-analyze is not installed: %v", err)
		}
		t.Skipf("skipped: systemd-analyze is not installed (apt-get install systemd): %v", err)
	}
	unit, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "sluiced.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("ExecStart=/usr/local/bin/sluiced ")) {
		t.Fatal("the unit's ExecStart no longer runs /usr/local/bin/sluiced: update this test")
	}
	dir := tempDir(t)
	path := filepath.Join(dir, "sluiced.service")
	abs, err := filepath.Abs(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/sluiced"), []byte(abs)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte(path)) {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	if len(bytes.TrimSpace(out)) > 0 {
		t.Logf("systemd-analyze verify said, about other units:\n%s", out)
	}
}
