package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/daemon/adminapi"
	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// These tests attack a real sluiced's gossip settings as an operator who
// forgot the key, a local user reading ps, and a host on the same network
// with the right key but another cluster's label would.

// secureKey is a test gossip key: base64 of 16 bytes.
const secureKey = "c2x1aWNlLXRlc3Qta2V5LQ=="

// secureKeyFile writes key (base64) to a 0600 file in dir and returns its path.
func secureKeyFile(t *testing.T, dir, key string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "gossip-*.key")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(key + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Chmod(0o600); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// secureRun runs sluiced with env added to the environment (and no admin
// endpoint unless args give one) until it exits or 20s pass, returning its
// exit code and output.
func secureRun(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(append(os.Environ(), "SLUICE_ADMIN_ADDR="), env...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("run sluiced: %v\n%s", err, out)
	}
	return 0, string(out)
}

// secureStart starts sluiced with env added to its environment, as
// startDaemon does.
func secureStart(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(append(os.Environ(), "SLUICE_ADMIN_ADDR="), env...)
	p := startProc(t, cmd)
	return p
}

// secureNode starts a sluiced with rules, an admin endpoint and env, and
// waits until its socket and admin endpoint answer.
func secureNode(t *testing.T, dir, name, rules string, env []string, args ...string) *adminNode {
	t.Helper()
	n := &adminNode{sock: filepath.Join(dir, name+".sock"), admin: "127.0.0.1:" + freePort(t)}
	rulesPath := filepath.Join(dir, name+"-rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	n.p = secureStart(t, env, append([]string{"--socket", n.sock, "--rules", rulesPath, "--no-watch", "--node-name", name,
		"--admin-addr", n.admin}, args...)...)
	n.awaitServing(t, name)
	return n
}

// Every way of starting a daemon that would gossip in the clear with other
// hosts, or leak its key, or take it from a file others can read, is
// refused at start: exit 1, the fix named, the key never printed.
func TestSecureUnsafeGossipSettingsAreRefusedAtStart(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	port := freePort(t)
	sock := filepath.Join(dir, "d.sock")
	openKey := filepath.Join(dir, "open.key")
	os.WriteFile(openKey, []byte(secureKey+"\n"), 0o600)
	os.Chmod(openKey, 0o644)
	groupKey := filepath.Join(dir, "group.key")
	os.WriteFile(groupKey, []byte(secureKey+"\n"), 0o600)
	os.Chmod(groupKey, 0o640)
	good := secureKeyFile(t, dir, secureKey)
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		says []string
	}{
		{"join without a key", nil, []string{"--join", "127.0.0.1:" + port},
			[]string{"--join: gossip beyond loopback needs a key", "--gossip-key-file", "SLUICE_GOSSIP_KEY", "--insecure-gossip"}},
		{"bind beyond loopback without a key", nil, []string{"--bind", "0.0.0.0:" + port},
			[]string{"--bind 0.0.0.0:" + port + " (not loopback): gossip beyond loopback needs a key", "--gossip-key-file", "--insecure-gossip"}},
		{"bind on every interface by port alone", nil, []string{"--bind", ":" + port},
			[]string{"needs a key", "--insecure-gossip"}},
		{"key on the command line", nil, []string{"--bind", "127.0.0.1:" + port, "--gossip-key", secureKey},
			[]string{"--gossip-key: refused", "ps", "--gossip-key-file FILE", "SLUICE_GOSSIP_KEY"}},
		{"key on the command line, even with --insecure-gossip", nil, []string{"--join", "127.0.0.1:" + port, "--insecure-gossip", "--gossip-key=" + secureKey},
			[]string{"--gossip-key: refused"}},
		{"world-readable key file", nil, []string{"--join", "127.0.0.1:" + port, "--gossip-key-file", openKey},
			[]string{openKey + " has mode 0644", "chmod 600 " + openKey}},
		{"group-readable key file", nil, []string{"--join", "127.0.0.1:" + port, "--gossip-key-file", groupKey},
			[]string{"mode 0640", "chmod 600"}},
		{"world-readable keyring", nil, []string{"--join", "127.0.0.1:" + port, "--gossip-keyring", openKey},
			[]string{"mode 0644", "chmod 600"}},
		{"key file and environment", []string{"SLUICE_GOSSIP_KEY=" + secureKey}, []string{"--join", "127.0.0.1:" + port, "--gossip-key-file", good},
			[]string{"both given; give one"}},
		{"key without a label", []string{"SLUICE_GOSSIP_KEY=" + secureKey}, []string{"--join", "127.0.0.1:" + port, "--cluster-label", ""},
			[]string{"a cluster label is required with a gossip key"}},
		{"bad key in the environment", []string{"SLUICE_GOSSIP_KEY=c2hvcnQ="}, []string{"--join", "127.0.0.1:" + port},
			[]string{"SLUICE_GOSSIP_KEY: gossip key of 5 bytes"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out := secureRun(t, tt.env, append([]string{"--socket", sock}, tt.args...)...)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			for _, s := range tt.says {
				if !strings.Contains(out, s) {
					t.Errorf("the error does not say %q:\n%s", s, out)
				}
			}
			if strings.Contains(out, secureKey) || strings.Contains(out, "c2hvcnQ=") {
				t.Errorf("the output shows the key:\n%s", out)
			}
			if strings.Count(strings.TrimSpace(out), "\n") > 0 {
				t.Errorf("want one line, the error:\n%s", out)
			}
		})
	}
}

// secureListening lists the TCP sockets listening and the UDP sockets bound
// that process pid holds, as "ip:port", from /proc.
func secureListening(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("cannot read /proc/%d/fd (%v): this test needs Linux's /proc", pid, err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6", "udp", "udp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			if strings.HasPrefix(table, "tcp") && fields[3] != "0A" { // not LISTEN: a connection
				continue
			}
			out = append(out, table+" "+secureProcAddr(t, fields[1]))
		}
		f.Close()
	}
	return out
}

// secureProcAddr decodes /proc/net's "HEXIP:HEXPORT" (IPv4 little-endian
// word, IPv6 four little-endian words).
func secureProcAddr(t *testing.T, s string) string {
	h, p, _ := strings.Cut(s, ":")
	port, _ := strconv.ParseUint(p, 16, 16)
	raw := make([]byte, len(h)/2)
	for i := range raw {
		b, _ := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		raw[i] = byte(b)
	}
	ip := make(net.IP, len(raw))
	for w := 0; w+4 <= len(raw); w += 4 {
		ip[w], ip[w+1], ip[w+2], ip[w+3] = raw[w+3], raw[w+2], raw[w+1], raw[w]
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10))
}

// secureOutsideAddr is an address of this host that is not loopback, or "".
func secureOutsideAddr() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
			return ipn.IP.String()
		}
	}
	return ""
}

// A daemon started with no cluster flags listens on nothing but loopback
// (its admin endpoint) and gossips nowhere; one given only a loopback
// --bind and no key gossips on loopback only, and says in /readyz and
// /metrics that its gossip is unencrypted. From the host's other address
// nothing of either answers.
func TestSecureLoneDaemonListensOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	outside := secureOutsideAddr()
	check := func(t *testing.T, p *proc, wantGossipPort string) {
		t.Helper()
		socks := secureListening(t, p.cmd.Process.Pid)
		sawGossip := wantGossipPort == ""
		for _, s := range socks {
			_, addr, _ := strings.Cut(s, " ")
			host, port, _ := net.SplitHostPort(addr)
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				t.Errorf("listening beyond loopback: %s (all: %v)", s, socks)
			}
			if port == wantGossipPort {
				sawGossip = true
			}
			if outside == "" {
				continue
			}
			if strings.HasPrefix(s, "tcp") {
				if c, err := net.DialTimeout("tcp", net.JoinHostPort(outside, port), 2*time.Second); err == nil {
					c.Close()
					t.Errorf("%s answers on the host's address %s", s, outside)
				}
			}
		}
		if !sawGossip {
			t.Errorf("no gossip socket on port %s among %v", wantGossipPort, socks)
		}
		t.Logf("listening: %v", socks)
	}
	if outside == "" {
		t.Log("this host has no address beyond loopback: sockets checked from /proc only, no connection tried from outside")
	}

	t.Run("no flags", func(t *testing.T) {
		dir := tempDir(t)
		admin := "127.0.0.1:" + freePort(t)
		p := secureStart(t, []string{"XDG_RUNTIME_DIR=" + dir, "SLUICE_ADMIN_ADDR=" + admin})
		body := rulesReadyz(t, admin)
		if _, ok := body["gossip_encrypted"]; ok {
			t.Errorf("a daemon that does not gossip reports gossip security: %v", body)
		}
		check(t, p, "")
		if strings.Contains(p.stderr.String(), "cluster gossip on") {
			t.Errorf("a lone daemon gossips:\n%s", p.stderr.String())
		}
	})
	t.Run("loopback bind, no key", func(t *testing.T) {
		dir := tempDir(t)
		admin, port := "127.0.0.1:"+freePort(t), freePort(t)
		p := secureStart(t, nil, "--socket", filepath.Join(dir, "d.sock"), "--admin-addr", admin, "--bind", "127.0.0.1:"+port)
		body := rulesReadyz(t, admin)
		if body["gossip_encrypted"] != false || body["gossip_insecure"] != true {
			t.Errorf("/readyz of unencrypted loopback gossip: %v", body)
		}
		if v := ipcMetric(t, admin, "sluice_gossip_insecure"); v != 1 {
			t.Errorf("sluice_gossip_insecure %v, want 1", v)
		}
		eventually(t, "the daemon warns that gossip is not encrypted", func() bool {
			return strings.Contains(p.stderr.String(), "[WARN]") && strings.Contains(p.stderr.String(), "gossip is not encrypted; it is bound to loopback")
		})
		check(t, p, port)
	})
}

// --insecure-gossip runs a cluster without a key, and says so: WARN at
// start, "gossip_insecure": true in /readyz, sluice_gossip_insecure 1, and
// every member shown PLAINTEXT by `sluice members`.
func TestSecureInsecureGossipIsLoudEverywhere(t *testing.T) {
	t.Parallel()
	cli := buildSluiceCLI(t)
	dir := tempDir(t)
	portA, portB := freePort(t), freePort(t)
	a := secureNode(t, dir, "a", adminRules, nil, "--bind", "127.0.0.1:"+portA, "--insecure-gossip", "--gossip-interval", "10ms")
	b := secureNode(t, dir, "b", adminRules, nil, "--bind", "127.0.0.1:"+portB, "--join", "127.0.0.1:"+portA,
		"--insecure-gossip", "--gossip-interval", "10ms")
	for _, n := range []*adminNode{a, b} {
		eventually(t, "the daemon warns at start", func() bool {
			return strings.Contains(n.p.stderr.String(), "[WARN]") && strings.Contains(n.p.stderr.String(), "gossip is NOT encrypted (--insecure-gossip)")
		})
		body := rulesReadyz(t, n.admin)
		if body["gossip_encrypted"] != false || body["gossip_insecure"] != true || body["ready"] != true {
			t.Errorf("/readyz: %v", body)
		}
		if enc, ins := ipcMetric(t, n.admin, "sluice_gossip_encrypted"), ipcMetric(t, n.admin, "sluice_gossip_insecure"); enc != 0 || ins != 1 {
			t.Errorf("sluice_gossip_encrypted %v sluice_gossip_insecure %v, want 0 and 1", enc, ins)
		}
	}
	eventually(t, "a sees two members, both saying they gossip in the clear", func() bool {
		var m adminapi.MembersView
		adminJSON(t, a.admin, "/v1/members", &m)
		return len(m.Members) == 2 && m.Unencrypted == 2
	})
	out, err := exec.Command(cli, "members", "--admin", a.admin).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice members: %v\n%s", err, out)
	}
	if bytes.Count(out, []byte("PLAINTEXT")) != 3 || !bytes.Contains(out, []byte("gossip PLAINTEXT: 2 of 2 alive members")) {
		t.Errorf("sluice members does not flag the plaintext members:\n%s", out)
	}
	t.Logf("sluice members:\n%s", out)
}

// The key from the environment or from a 0600 file: the two daemons form a
// cluster, share a limit, report encrypted gossip, `sluice members` shows
// both encrypted, and the key is in neither process's command line.
func TestSecureKeyFromEnvironmentOrFile(t *testing.T) {
	t.Parallel()
	cli := buildSluiceCLI(t)
	dir := tempDir(t)
	portA, portB := freePort(t), freePort(t)
	a := secureNode(t, dir, "a", adminRules, []string{"SLUICE_GOSSIP_KEY=" + secureKey}, "--bind", "127.0.0.1:"+portA, "--gossip-interval", "10ms")
	b := secureNode(t, dir, "b", adminRules, nil, "--bind", "127.0.0.1:"+portB, "--join", "127.0.0.1:"+portA,
		"--gossip-key-file", secureKeyFile(t, dir, secureKey), "--gossip-interval", "10ms")
	eventually(t, "both see two encrypted members", func() bool {
		var m adminapi.MembersView
		adminJSON(t, b.admin, "/v1/members", &m)
		if len(m.Members) != 2 || m.Unencrypted != 0 {
			return false
		}
		for _, mv := range m.Members {
			if mv.State != "alive" || mv.Encrypted == nil || !*mv.Encrypted || mv.Labelled == nil || !*mv.Labelled {
				return false
			}
		}
		return true
	})
	if a.spend("r", "shared", 5) != 5 {
		t.Fatal("a refused a fresh key")
	}
	eventually(t, "b hears of a's consumption", func() bool { return near(b.balance(t, "r", "shared"), 0) })
	for _, n := range []*adminNode{a, b} {
		body := rulesReadyz(t, n.admin)
		if body["gossip_encrypted"] != true || body["gossip_insecure"] != false {
			t.Errorf("/readyz: %v", body)
		}
		if enc, ins := ipcMetric(t, n.admin, "sluice_gossip_encrypted"), ipcMetric(t, n.admin, "sluice_gossip_insecure"); enc != 1 || ins != 0 {
			t.Errorf("sluice_gossip_encrypted %v sluice_gossip_insecure %v, want 1 and 0", enc, ins)
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.p.cmd.Process.Pid))
		if err == nil && bytes.Contains(cmdline, []byte(secureKey)) {
			t.Errorf("the key is on the command line: %q", cmdline)
		}
		if strings.Contains(n.p.stderr.String(), secureKey) || strings.Contains(n.p.stderr.String(), "NOT encrypted") {
			t.Errorf("the log shows the key or warns of plaintext:\n%s", n.p.stderr.String())
		}
	}
	out, err := exec.Command(cli, "members", "--admin", a.admin).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice members: %v\n%s", err, out)
	}
	if bytes.Count(out, []byte("  encrypted")) != 2 || bytes.Contains(out, []byte("PLAINTEXT")) {
		t.Errorf("sluice members does not show two encrypted members:\n%s", out)
	}
	t.Logf("sluice members:\n%s", out)
}

// secureCounters is a counters packet, as sluiced's gossip encodes it:
// [1, sender, [origin], [[0, rule, key, epoch, prev, used]]].
func secureCounters(sender, rule, key string, epoch, prev, used uint64) []byte {
	b := mp.AppendArrayHeader(nil, 4)
	b = mp.AppendUint(b, 1)
	b = mp.AppendStr(b, sender)
	b = mp.AppendArrayHeader(b, 1)
	b = mp.AppendStr(b, sender)
	b = mp.AppendArrayHeader(b, 1)
	b = mp.AppendArrayHeader(b, 6)
	b = mp.AppendUint(b, 0)
	b = mp.AppendStr(b, rule)
	b = mp.AppendStr(b, key)
	b = mp.AppendUint(b, epoch)
	b = mp.AppendUint(b, prev)
	return mp.AppendUint(b, used)
}

// secureRogue is a memberlist node in the test process with the cluster's
// key and the given label.
func secureRogue(t *testing.T, name, label string) *memberlist.Memberlist {
	t.Helper()
	c := memberlist.DefaultLocalConfig()
	c.Name, c.BindAddr, c.BindPort, c.AdvertisePort = name, "127.0.0.1", 0, 0
	c.Label = label
	c.SecretKey = []byte("sluice-test-key-")
	c.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ml.Shutdown() })
	return ml
}

// A host with the right key but another cluster's label can neither join
// (a real sluiced nor a bare memberlist node) nor inject consumption, by
// packet or by stream: the label is checked on both, and authenticated by
// the key. The same injection from a node with the right label charges the
// victim key, so the packets would have counted.
func TestSecureWrongLabelWithTheRightKeyCannotJoinOrInject(t *testing.T) {
	t.Parallel()
	if k, err := base64.StdEncoding.DecodeString(secureKey); err != nil || string(k) != "sluice-test-key-" {
		t.Fatalf("secureKey is not the rogue's key: %q %v", k, err)
	}
	dir := tempDir(t)
	portA, portB := freePort(t), freePort(t)
	key := secureKeyFile(t, dir, secureKey)
	const rules = "rules:\n  r:\n    rate: 10/1h\n"
	a := secureNode(t, dir, "a", rules, nil, "--bind", "127.0.0.1:"+portA, "--gossip-key-file", key,
		"--cluster-label", "prod", "--gossip-interval", "10ms", "--log-level", "debug")
	const (
		packetsRefused = `sluice_gossip_packets_refused_total{reason="label"}`
		streamsRefused = `sluice_gossip_streams_refused_total{reason="label"}`
	)

	rogue := secureRogue(t, "rogue", "staging")
	if n, err := rogue.Join([]string{"127.0.0.1:" + portA}); err == nil || n != 0 {
		t.Errorf("a node with another label joined: %d answered, %v", n, err)
	}
	pa, _ := strconv.Atoi(portA)
	target := &memberlist.Node{Name: "a", Addr: net.ParseIP("127.0.0.1"), Port: uint16(pa)}
	addr := memberlist.Address{Addr: "127.0.0.1:" + portA, Name: "a"}
	if err := rogue.SendToAddress(addr, secureCounters("rogue", "r", "victim", 1, 0, 4)); err != nil {
		t.Fatalf("send packet: %v", err)
	}
	rogue.SendReliable(target, secureCounters("rogue", "r", "victim", 2, 0, 4)) // refused by a: an error or not, nothing may land
	// Refused by the transport's guard (or, behind it, by memberlist's own check).
	eventually(t, "a refuses the packet and the streams (join, send) for their label", func() bool {
		s := a.p.stderr.String()
		byGuard := ipcMetric(t, a.admin, packetsRefused) >= 1 && ipcMetric(t, a.admin, streamsRefused) >= 2
		byMemberlist := strings.Contains(s, `discarding packet with unacceptable label "staging"`) && strings.Count(s, `discarding stream with unacceptable label "staging"`) >= 2
		return byGuard || byMemberlist
	})
	t.Logf("refused for their label: %v packets, %v streams", ipcMetric(t, a.admin, packetsRefused), ipcMetric(t, a.admin, streamsRefused))

	// A real sluiced with the right key and the other label cannot join either.
	b := secureNode(t, dir, "b", rules, nil, "--bind", "127.0.0.1:"+portB, "--join", "127.0.0.1:"+portA,
		"--gossip-key-file", key, "--cluster-label", "staging", "--gossip-interval", "10ms")
	eventually(t, "b's joins fail, twice", func() bool { return strings.Count(b.p.stderr.String(), "join failed; retrying") >= 2 })

	// The control: the same packets from a node with the right label count.
	friend := secureRogue(t, "friend", "prod")
	if _, err := friend.Join([]string{"127.0.0.1:" + portA}); err != nil {
		t.Fatalf("a node with the right key and label could not join: %v", err)
	}
	// The counter is cumulative, so sending it again charges nothing more:
	// it is resent until it lands (a may take the first for a stranger's if
	// it arrives before a has seen friend join, and UDP may drop it).
	eventually(t, "the right label's 3 tokens are charged", func() bool {
		if err := friend.SendToAddress(addr, secureCounters("friend", "r", "victim", 1, 0, 3)); err != nil {
			t.Fatal(err)
		}
		return near(a.balance(t, "r", "victim"), 7)
	})

	var m adminapi.MembersView
	adminJSON(t, a.admin, "/v1/members", &m)
	for _, mv := range m.Members {
		if mv.Name == "b" || mv.Name == "rogue" {
			t.Errorf("a lists %s, of another label, as a member: %+v", mv.Name, m.Members)
		}
	}
	if got := a.balance(t, "r", "victim"); !near(got, 7) {
		t.Errorf("victim balance %v, want 7: the wrong label's 8 tokens must not count", got)
	}
	adminJSON(t, b.admin, "/v1/members", &m)
	if len(m.Members) != 1 {
		t.Errorf("b, of another label, sees %d members", len(m.Members))
	}
}

// A keyring made readable by others while the daemon runs is not reloaded
// (SIGHUP): the daemon keeps the keys in use, says why and how to fix it,
// and stays up and encrypted; made private again, it reloads.
func TestSecureKeyringOpenedWhileRunningIsNotReloaded(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	ring := filepath.Join(dir, "keyring.json")
	if err := os.WriteFile(ring, []byte(`["`+secureKey+`"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	n := secureNode(t, dir, "a", adminRules, nil, "--bind", "127.0.0.1:"+freePort(t), "--gossip-keyring", ring)
	if err := os.Chmod(ring, 0o644); err != nil {
		t.Fatal(err)
	}
	n.p.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the reload refuses the open keyring", func() bool {
		s := n.p.stderr.String()
		return strings.Contains(s, "keyring reload failed; keeping the keys in use") && strings.Contains(s, "chmod 600 "+ring)
	})
	if body := rulesReadyz(t, n.admin); body["gossip_encrypted"] != true || body["ready"] != true {
		t.Errorf("/readyz after the refused reload: %v", body)
	}
	if err := os.Chmod(ring, 0o600); err != nil {
		t.Fatal(err)
	}
	n.p.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the private keyring reloads", func() bool { return strings.Contains(n.p.stderr.String(), "gossip keyring reloaded") })
	if strings.Contains(n.p.stderr.String(), secureKey) {
		t.Errorf("the log shows the key:\n%s", n.p.stderr.String())
	}
}
