package main

import (
	"context"
	"encoding/base64"
	be "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"golang.org/x/sys/unix"

	"github.com/sluicelabs/sluice/clientlib"
	"github.com/sluicelabs/sluice/daemon/adminapi"
	"github.com/sluicelabs/sluice/gossip"
	"github.com/sluicelabs/sluice/internal/netnstest"
)

// These tests repeat issue 15's attacks on the gossip port across real
// interfaces: three keyed sluiced processes, each in a network namespace
// of its own on a private segment (10.213.0.0/24, veths on a bridge), and
// an attacker in a fourth namespace that is not a member. The daemons run
// under `ip netns exec`, which execs them in place (the pid is sluiced's,
// for /proc and kill) and is what an operator would type to reproduce;
// the attacker's sockets are made by the test on a thread moved into its
// namespace (netnstest.Host.Do), since a Go process cannot run a goroutine
// in another namespace. They need root and iproute2, and skip otherwise;
// SLUICE_REQUIRE_NETNS=1 (set by .ci/run) makes them fail instead.

// netnsRequireEnv makes a missing netns support a failure, not a skip.
const netnsRequireEnv = "SLUICE_REQUIRE_NETNS"

// netnsLabel is the test cluster's label.
const netnsLabel = "netns-prod"

// netnsGossipPort is every node's gossip port (each has its own address).
const netnsGossipPort = "7946"

// netnsRules: rule r as the loopback peers tests have it (burst 100 at
// 10/s: one allowance is 121 tokens); slow, a burst of 100 that refills
// so little (10 an hour) that balances read seconds apart agree to 0.1;
// and api, testcluster's loss tests' rule (100/s, burst 100).
const netnsRules = peersRules + "  slow:\n    rate: 10/1h\n    burst: 100\n  api:\n    rate: 100/1s\n"

// netnsPacketBoundMiB is the most a node's peak RSS may grow from hostile
// packets, as TestGossipHostilePacketsAreRefused asserts.
const netnsPacketBoundMiB = 32

var netnsWhy = sync.OnceValue(netnstest.Unavailable)

// netnsLab returns a fresh lab, or skips the test saying why namespaces
// cannot be made here (fails instead under SLUICE_REQUIRE_NETNS=1).
func netnsLab(t *testing.T) *netnstest.Lab {
	t.Helper()
	if why := netnsWhy(); why != "" {
		if os.Getenv(netnsRequireEnv) != "" {
			t.Fatalf("%s is set but network namespaces cannot be made here: %s", netnsRequireEnv, why)
		}
		t.Skipf("skipped: network namespaces cannot be made here: %s (set %s=1 to fail instead)", why, netnsRequireEnv)
	}
	return netnstest.New(t)
}

// netnsNode is a sluiced in its own namespace: gossip on its eth0 address,
// the admin endpoint on the namespace's loopback (the attacker cannot
// reach it; the test reaches it through the namespace).
type netnsNode struct {
	name   string
	host   *netnstest.Host
	p      *proc
	sock   string
	gossip string // ip:port on eth0
	c      *clientlib.Client
	http   *http.Client
}

// netnsStart starts cmd as startDaemon starts sluiced: no admin endpoint
// unless the arguments give one, killed when the test ends.
func netnsStart(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	cmd.Env = append(os.Environ(), "SLUICE_ADMIN_ADDR=")
	p := startProc(t, cmd)
	return p
}

// netnsStartNode starts sluiced named name in host h, with the gossip
// security flags security (a key file or --insecure-gossip) and the
// cluster's label, joining join (host:port) unless it is "", and waits
// until its socket and admin endpoint answer.
func netnsStartNode(t *testing.T, h *netnstest.Host, dir, name string, security []string, join string) *netnsNode {
	t.Helper()
	rules := filepath.Join(dir, name+"-rules.yaml")
	if err := os.WriteFile(rules, []byte(netnsRules), 0o600); err != nil {
		t.Fatal(err)
	}
	n := &netnsNode{name: name, host: h, sock: filepath.Join(dir, name+".sock"), gossip: net.JoinHostPort(h.IP, netnsGossipPort),
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}}
	args := []string{"--socket", n.sock, "--rules", rules, "--no-watch", "--node-name", name, "--bind", n.gossip,
		"--admin-addr", "127.0.0.1:9464", "--cluster-label", netnsLabel, "--gossip-interval", "20ms"}
	args = append(args, security...)
	if join != "" {
		args = append(args, "--join", join)
	}
	n.p = netnsStart(t, h.Command(binary, args...))
	eventually(t, name+" serves its socket and admin endpoint", func() bool {
		n.assertAlive(t, "starting")
		if n.c == nil {
			c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: n.sock, Timeout: 5 * time.Second})
			if err != nil {
				return false
			}
			n.c = c
		}
		code, _ := n.get("/healthz")
		return code == 200
	})
	t.Cleanup(func() { n.c.Close() })
	return n
}

// get GETs path from the node's admin endpoint; 0 when there was no answer.
func (n *netnsNode) get(path string) (int, string) {
	resp, err := n.http.Get("http://127.0.0.1:9464" + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b)
}

// key reads a key's balance under rule, and whether the node holds it.
func (n *netnsNode) key(t *testing.T, rule, key string) (balance float64, held bool) {
	t.Helper()
	code, body := n.get("/v1/keys/" + rule + "/" + key)
	if code != 200 {
		t.Fatalf("%s: GET /v1/keys/%s/%s: %d %s", n.name, rule, key, code, body)
	}
	var v struct {
		Balance float64 `json:"balance"`
		Held    bool    `json:"held"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%s: /v1/keys: %v: %s", n.name, err, body)
	}
	return v.Balance, v.Held
}

// metrics returns the node's /metrics text.
func (n *netnsNode) metrics(t *testing.T) string {
	t.Helper()
	code, body := n.get("/metrics")
	if code != 200 {
		t.Fatalf("%s: GET /metrics: %d %s", n.name, code, body)
	}
	return body
}

// metric returns one sample of the node's /metrics (name with labels), or
// 0 when absent.
func (n *netnsNode) metric(t *testing.T, sample string) float64 {
	t.Helper()
	for _, line := range strings.Split(n.metrics(t), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// assertAlive fails the test, with the daemon's log, if it has exited.
func (n *netnsNode) assertAlive(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-n.p.exited:
		n.p.exited <- err // for the cleanup
		t.Fatalf("%s: %s exited (%v); stderr:\n%s", what, n.name, err, tail(n.p.stderr.String(), 3000))
	default:
	}
}

// assertUp fails the test if the daemon has exited or no longer decides.
func (n *netnsNode) assertUp(t *testing.T, what string) {
	t.Helper()
	n.assertAlive(t, what)
	if d := n.c.Allow(context.Background(), "r", fmt.Sprintf("probe-%d", time.Now().UnixNano())); !d.Allowed || d.FailedOpen {
		t.Fatalf("%s: %s no longer decides: %+v; stderr:\n%s", what, n.name, d, tail(n.p.stderr.String(), 3000))
	}
}

// peak is the node's peak RSS so far (or its RSS, if higher), in KiB.
func (n *netnsNode) peak(t *testing.T) int64 {
	pid := n.p.cmd.Process.Pid
	return max(procKiB(t, pid, "VmHWM"), procKiB(t, pid, "VmRSS"))
}

// netnsCluster is three keyed members, each in its own namespace, and an
// attacker's namespace on the same segment.
type netnsCluster struct {
	nodes    []*netnsNode
	attacker *netnstest.Host
	secret   []byte // the gossip key (the keyed rogue has it)
	dir      string
	security []string // the gossip security flags every node was started with
}

// startNetnsCluster starts the cluster, keyed (a 0600 key file, never on
// a command line) or, if insecure, with --insecure-gossip, and waits until
// every member sees the other two alive.
func startNetnsCluster(t *testing.T, insecure bool) *netnsCluster {
	t.Helper()
	lab := netnsLab(t)
	dir := tempDir(t)
	security := []string{"--insecure-gossip"}
	c := &netnsCluster{dir: dir}
	if !insecure {
		secret, err := base64.StdEncoding.DecodeString(secureKey)
		if err != nil {
			t.Fatal(err)
		}
		c.secret = secret
		security = []string{"--gossip-key-file", secureKeyFile(t, dir, secureKey)}
	}
	c.security = security
	hosts := []*netnstest.Host{lab.Add(), lab.Add(), lab.Add()}
	c.attacker = lab.Add()
	for i, h := range hosts {
		join := ""
		if i > 0 {
			join = c.nodes[0].gossip
		}
		c.nodes = append(c.nodes, netnsStartNode(t, h, dir, fmt.Sprintf("n%d", i+1), security, join))
	}
	for _, n := range c.nodes {
		eventually(t, n.name+" sees three members alive", func() bool {
			code, body := n.get("/v1/members")
			var m adminapi.MembersView
			if code != 200 || json.Unmarshal([]byte(body), &m) != nil || len(m.Members) != 3 || (m.Unencrypted != 0) != insecure {
				return false
			}
			for _, mv := range m.Members {
				if mv.State != "alive" {
					return false
				}
			}
			return true
		})
	}
	t.Logf("cluster: %s, %s, %s; attacker %s (not a member)", c.nodes[0].gossip, c.nodes[1].gossip, c.nodes[2].gossip, c.attacker.IP)
	return c
}

// peaks returns every node's peak RSS, in KiB.
func (c *netnsCluster) peaks(t *testing.T) []int64 {
	var out []int64
	for _, n := range c.nodes {
		out = append(out, n.peak(t))
	}
	return out
}

// assertUp checks every daemon is up and deciding, its peak RSS grew by at
// most boundMiB since before (from peaks), and the cluster still gossips:
// a spend on each node reaches the others.
func (c *netnsCluster) assertUp(t *testing.T, what string, before []int64, boundMiB int64) {
	t.Helper()
	for i, n := range c.nodes {
		n.assertUp(t, what)
		grew := (n.peak(t) - before[i]) >> 10
		t.Logf("%s: %s peak RSS %d MiB, grew %d MiB (bound %d MiB)", what, n.name, n.peak(t)>>10, grew, boundMiB)
		if grew > boundMiB {
			t.Errorf("%s: %s's peak RSS grew by %d MiB, bound %d MiB", what, n.name, grew, boundMiB)
		}
	}
	key := fmt.Sprintf("after-%d", time.Now().UnixNano())
	for i, n := range c.nodes {
		if d := n.c.Allow(context.Background(), "slow", key); !d.Allowed || d.FailedOpen {
			t.Fatalf("%s: %s refused a fresh key: %+v", what, n.name, d)
		}
		for _, m := range c.nodes {
			eventually(t, fmt.Sprintf("%s: %s hears of %s's spend", what, m.name, n.name), func() bool {
				b, _ := m.key(t, "slow", key)
				return b < 100-float64(i+1)+0.1 // this spend and the ones before
			})
		}
	}
}

// Without a key, a daemon told to gossip on its veth's address refuses to
// start: exit 1, the fix named, nothing bound.
func TestNetnsInsecureBindOnVethIsRefused(t *testing.T) {
	t.Parallel()
	lab := netnsLab(t)
	h := lab.Add()
	dir := tempDir(t)
	bind := net.JoinHostPort(h.IP, netnsGossipPort)
	cmd := h.Command(binary, "--socket", filepath.Join(dir, "d.sock"), "--bind", bind, "--admin-addr", "")
	cmd.Env = append(os.Environ(), "SLUICE_ADMIN_ADDR=")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { <-ctx.Done(); cmd.Process.Kill() }() // bounded even if it serves
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("sluiced --bind %s without a key: %v, want exit 1:\n%s", bind, err, out)
	}
	for _, s := range []string{"--bind " + bind + " (not loopback): gossip beyond loopback needs a key", "--gossip-key-file", "--insecure-gossip"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("the error does not say %q:\n%s", s, out)
		}
	}
	t.Logf("refused: %s", strings.TrimSpace(string(out)))
}

// netnsRelabel gives a labelled memberlist packet or stream another label.
func netnsRelabel(t *testing.T, b []byte, label string) []byte {
	t.Helper()
	plain, _, err := memberlist.RemoveLabelHeaderFromPacket(b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := memberlist.AddLabelHeaderToPacket(plain, label)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// netnsShortVsnPushPull is the push-pull that panicked memberlist's
// verifyProtocol (gossip/testdata/fuzz/FuzzTransportStream/
// crash-push-pull-short-vsn): one node state whose version list is one
// byte long.
func netnsShortVsnPushPull() []byte {
	b := []byte{6, 0x83, 0xa5}
	b = append(b, "Nodes"...)
	b = append(b, 1, 0xac)
	b = append(b, "UserStateLen"...)
	b = append(b, 4, 0xa4)
	b = append(b, "Join"...)
	b = append(b, 0xc2, 0x85, 0xa4, 'N', 'a', 'm', 'e', 0xa1, 'x', 0xa4, 'A', 'd', 'd', 'r', 0xc4, 4, 127, 255, 249, 1,
		0xa4, 'P', 'o', 'r', 't', 0xcd, 0x1f, 0x0a, 0xa5, 'S', 't', 'a', 't', 'e', 0,
		0xa3, 'V', 's', 'n', 0xc4, 1, 5, 2, 0, 0, 0, 0x94, 2, 0xa1, 'z', 0x90)
	return labelled("sluice", b)
}

// netnsSendStream writes b to addr from the attacker's namespace on a
// fresh TCP connection and waits (bounded) until the daemon closes it.
func netnsSendStream(t *testing.T, from *netnstest.Host, addr string, b []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := from.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, from.Name, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(b)
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, c) // until the daemon closes or the deadline
}

// netnsUDP is a UDP socket in the attacker's namespace.
func netnsUDP(t *testing.T, from *netnstest.Host) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	if err := from.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp", net.JoinHostPort(from.IP, "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

// The attacks of issue 15 from a host on the segment that is not a member,
// on a keyed three-node cluster, each in namespaces of its own. Each ends
// with every daemon up and deciding, its peak RSS within the loopback
// tests' bound, and the cluster still gossiping.
func TestNetnsStrangerAttacksOnKeyedCluster(t *testing.T) {
	t.Parallel()
	c := startNetnsCluster(t, false)

	// (a) The 30-byte user-message stream that killed sluiced and the
	// push-pull whose short version list panicked memberlist, to every
	// node, with the cluster's label and with the default one.
	t.Run("crash streams", func(t *testing.T) { netnsCrashStreams(t, c) })

	// (b) Forged plain counter packets from the attacker, and real
	// encrypted ones captured on a member's link and replayed. The forged
	// ones charge nothing (a keyed node reads nothing it cannot decrypt),
	// the replays charge nothing more than the original did.
	t.Run("forged and replayed packets", func(t *testing.T) {
		before := c.peaks(t)
		victim, origin := c.nodes[0], c.nodes[1]
		pc := netnsUDP(t, c.attacker)
		dst, err := net.ResolveUDPAddr("udp", victim.gossip)
		if err != nil {
			t.Fatal(err)
		}
		now := uint64(time.Now().UnixNano())
		absurd := peersPacket("x", now, peersCounter{"forged", now - 1, 0, math.MaxUint64})
		posing := peersPacket(origin.name, now, peersCounter{"forged", now - 1, 0, 1e12}) // as a member
		pace := time.NewTicker(5 * time.Millisecond)
		defer pace.Stop()
		for range 20 {
			for _, b := range [][]byte{absurd, netnsRelabel(t, absurd, netnsLabel), posing, netnsRelabel(t, posing, netnsLabel)} {
				if _, err := pc.WriteTo(b, dst); err != nil {
					t.Fatal(err)
				}
			}
			<-pace.C // pacing: UDP has no backpressure
		}
		// Those with the default label are refused for it; those with the
		// cluster's, by memberlist, which cannot decrypt them.
		eventually(t, "the victim refuses the forged packets", func() bool {
			return strings.Contains(victim.p.stderr.String(), "Decrypt packet failed") &&
				victim.metric(t, `sluice_gossip_packets_refused_total{reason="label"}`) >= 1
		})

		// Capture the origin's real packets on the victim's link while the
		// origin spends 6 tokens of "replayed", 2 at a time, each pair
		// charged by the victim before the next (so in separate packets).
		capture := netnsCapture(t, victim.host, origin.host.IP, victim.host.IP, 7946)
		for round := 1; round <= 3; round++ {
			if got := netnsSpend(origin, "slow", "replayed", 2); got != 2 {
				t.Fatalf("the origin admitted %d of 2 on a key at %d", got, 100-2*(round-1))
			}
			eventually(t, "the victim charges the origin's spend", func() bool {
				b, _ := victim.key(t, "slow", "replayed")
				return near(b, float64(100-2*round))
			})
		}
		packets := capture()
		if len(packets) == 0 {
			t.Fatal("no packet from the origin to the victim was captured")
		}
		for range 20 {
			for _, p := range packets {
				if _, err := pc.WriteTo(p, dst); err != nil {
					t.Fatal(err)
				}
			}
			<-pace.C // pacing
		}
		// A fresh spend after the replays is charged after them (one
		// goroutine reads the port in order): then they have all been read.
		netnsSpend(origin, "slow", "replay-marker", 1)
		eventually(t, "the marker sent after the replays is charged", func() bool {
			_, held := victim.key(t, "slow", "replay-marker")
			return held
		})
		if b, _ := victim.key(t, "slow", "replayed"); !near(b, 94) {
			t.Errorf("after %d captured packets replayed 20 times each, the victim's key is at %.2f, want 94 (charged once)", len(packets), b)
		}
		for _, n := range c.nodes {
			if b, held := n.key(t, "r", "forged"); held || b != 100 {
				t.Errorf("%s: the forged packets charged the key: balance %.1f, held %v", n.name, b, held)
			}
		}
		t.Logf("forged: 80 plain packets (absurd, and posing as %s) charged nothing; replayed: %d captured packets (%d bytes) × 20 charged nothing more", origin.name, len(packets), netnsBytes(packets))
		t.Logf("victim: %s", grepLines(victim.metrics(t), "sluice_gossip_packets_refused|sluice_gossip_bad_packets|sluice_gossip_suspicious"))
		c.assertUp(t, "after the packets", before, netnsPacketBoundMiB)
	})

	// (c) TestGossipPreAuthStreamFloodIsBounded's flood across the
	// segment, each phase bounded to 20 s: 1,000 streams declaring 20 MiB
	// encrypted frames, sending 1 MiB each, then 100 declaring and sending
	// just under 12 MiB, 50 at a time.
	t.Run("pre-auth stream flood", func(t *testing.T) {
		before := c.peaks(t)
		c.spendVictim(t, "flood-victim")
		victim := c.nodes[0]
		refusedBefore := netnsStreamsRefused(t, victim)
		junk := make([]byte, 64<<10)
		send := func(declared uint32, body int) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, err := c.attacker.DialContext(ctx, "tcp", victim.gossip)
			if err != nil {
				return // refused at the backlog: also fine
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(15 * time.Second))
			if _, err := conn.Write(labelled(netnsLabel, be.BigEndian.AppendUint32([]byte{10}, declared))); err != nil {
				return
			}
			for sent := 0; sent < body; sent += len(junk) {
				if _, err := conn.Write(junk); err != nil {
					return
				}
			}
		}
		start := time.Now()
		flood(1000, 50, 20*time.Second, func(int) { send(20<<20, 1<<20) })
		t.Logf("1,000 streams declaring 20 MiB each: %s", time.Since(start).Round(time.Millisecond))
		start = time.Now()
		flood(100, 50, 20*time.Second, func(int) { send(12<<20-64, 12<<20-64) })
		t.Logf("100 streams declaring and sending 12 MiB each: %s", time.Since(start).Round(time.Millisecond))
		refused := netnsStreamsRefused(t, victim) - refusedBefore
		t.Logf("victim: %v streams refused; %s", refused, grepLines(victim.metrics(t), "sluice_gossip_streams_|sluice_gossip_stream_bytes"))
		if refused < 1000 {
			t.Errorf("%v streams refused, want at least the 1,000 declaring 20 MiB", refused)
		}
		eventually(t, "every stream is closed", func() bool { return victim.metric(t, "sluice_gossip_streams_open") == 0 })
		c.assertUp(t, "after the flood", before, transportMemoryBoundMiB)
		c.assertVictim(t, "flood-victim", "after the flood")
	})

	// (d) A keyed rogue: it has the key and the label and joins from the
	// attacker's namespace, then drains victim keys as in
	// TestPeersKeyedRogueCannotDrainKeys, with the same bounds.
	t.Run("keyed rogue", func(t *testing.T) {
		for i, tt := range []struct {
			name  string
			debt  float64
			floor float64
		}{
			// The bounds of TestPeersKeyedRogueCannotDrainKeys: one
			// allowance (burst 100 + 1 s of rate + 1) below the truth, and
			// 0.3 s of rate for the two clocks.
			{"absurd debt", -1e12, 100 - 111 - 3},
			{"debt within a burst", -99, 100 - 111 - 3},
		} {
			t.Run(tt.name, func(t *testing.T) {
				before := c.peaks(t)
				netnsRogue(t, c, fmt.Sprintf("rogue-%d", i), tt.debt, tt.floor)
				c.assertUp(t, "after the rogue", before, transportMemoryBoundMiB)
			})
		}
	})

	// Through all of it, no member clamped another's honest reports.
	c.assertNoneClamped(t)
}

// assertNoneClamped fails the test if any node clamped a member's report
// as suspicious (sluice_gossip_suspicious_reports_total{origin="nX"}):
// honest members never are, as testcluster's assertNoneClamped checks.
func (c *netnsCluster) assertNoneClamped(t *testing.T) {
	t.Helper()
	for _, n := range c.nodes {
		m := n.metrics(t)
		for _, member := range c.nodes {
			if v := n.metric(t, `sluice_gossip_suspicious_reports_total{origin="`+member.name+`"}`); v != 0 {
				t.Errorf("%s clamped %v honest reports from %s:\n%s", n.name, v, member.name, grepLines(m, "suspicious"))
			}
		}
	}
}

// netnsCrashStreams sends the streams that crashed sluiced or memberlist
// (each with the default label and with the cluster's) from the attacker
// to every node: every one is refused and every node stays up.
func netnsCrashStreams(t *testing.T, c *netnsCluster) {
	before := c.peaks(t)
	c.spendVictim(t, "crash-victim")
	payloads := []struct {
		name string
		b    []byte
	}{
		{"user message of 2^62 bytes", streamCrashPayload(1 << 62)},
		{"push-pull with a 1-byte version list", netnsShortVsnPushPull()},
		{"push-pull of 2^40 nodes", pushPullCrashPayload(1<<40, 0)},
		{"encrypted frame of 4 GiB", labelled("sluice", []byte{10, 0xff, 0xff, 0xff, 0xff})},
	}
	for _, n := range c.nodes {
		refusedBefore := netnsStreamsRefused(t, n)
		for _, p := range payloads {
			for _, b := range [][]byte{p.b, netnsRelabel(t, p.b, netnsLabel)} {
				netnsSendStream(t, c.attacker, n.gossip, b)
				n.assertUp(t, fmt.Sprintf("after %s (%d bytes)", p.name, len(b)))
			}
		}
		// A refusal is counted when the guard has read and judged the
		// stream, which may be just after the attacker's write returned.
		eventually(t, fmt.Sprintf("%s refused all %d streams", n.name, 2*len(payloads)), func() bool {
			return netnsStreamsRefused(t, n)-refusedBefore >= float64(2*len(payloads))
		})
	}
	t.Logf("n1: %s", grepLines(c.nodes[0].metrics(t), "sluice_gossip_streams_refused"))
	c.assertUp(t, "after the crash streams", before, transportMemoryBoundMiB)
	c.assertVictim(t, "crash-victim", "after the crash streams")
}

// On a cluster gossiping in the clear (--insecure-gossip), where the
// guard reads the streams' plain headers and node states (a keyed node
// refuses them as unencrypted before that), the crash streams from a
// stranger are refused too, and every node stays up.
func TestNetnsCrashStreamsOnAPlainCluster(t *testing.T) {
	t.Parallel()
	netnsCrashStreams(t, startNetnsCluster(t, true))
}

// spendVictim has the second node spend 3 tokens of key under slow, and
// waits until every node has charged them: the key the attack must leave
// at 97 everywhere.
func (c *netnsCluster) spendVictim(t *testing.T, key string) {
	t.Helper()
	if got := netnsSpend(c.nodes[1], "slow", key, 3); got != 3 {
		t.Fatalf("%s admitted %d of 3 on a fresh key", c.nodes[1].name, got)
	}
	c.assertVictim(t, key, "before the attack")
}

// assertVictim waits until every node has key at 97 (the 3 tokens
// spendVictim spent), failing the test if one never gets there.
func (c *netnsCluster) assertVictim(t *testing.T, key, when string) {
	t.Helper()
	for _, n := range c.nodes {
		eventually(t, fmt.Sprintf("%s: %s has victim key %s at 97", when, n.name, key), func() bool {
			b, _ := n.key(t, "slow", key)
			return near(b, 97)
		})
	}
}

// netnsBytes is the total length of packets.
func netnsBytes(packets [][]byte) int {
	n := 0
	for _, p := range packets {
		n += len(p)
	}
	return n
}

// netnsStreamsRefused sums the node's refused streams over every reason.
func netnsStreamsRefused(t *testing.T, n *netnsNode) float64 {
	t.Helper()
	sum := 0.0
	for _, line := range strings.Split(n.metrics(t), "\n") {
		if rest, ok := strings.CutPrefix(line, "sluice_gossip_streams_refused_total{"); ok {
			var v float64
			if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

// netnsSpend takes count tokens of key under rule on n; it returns how many
// were admitted.
func netnsSpend(n *netnsNode, rule, key string, count int) int {
	admitted := 0
	for range count {
		if allowFresh(n.c, rule, key) {
			admitted++
		}
	}
	return admitted
}

// netnsCapture records the UDP payloads from src to dst:port seen on h's
// eth0, as a sniffer on that link would (an AF_PACKET socket made in h's
// namespace). The returned function stops it and returns the payloads.
func netnsCapture(t *testing.T, h *netnstest.Host, src, dst string, port uint16) func() [][]byte {
	t.Helper()
	proto := int(htons(unix.ETH_P_IP))
	var fd int
	if err := h.Do(func() error {
		eth, err := net.InterfaceByName("eth0")
		if err != nil {
			return fmt.Errorf("find eth0: %w", err)
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, proto)
		if err != nil {
			return fmt.Errorf("open a packet socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: eth.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind the packet socket to eth0: %w", err)
		}
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 50_000})
	}); err != nil {
		t.Fatalf("capture on %s: %v", h.Name, err)
	}
	srcIP, dstIP := net.ParseIP(src).To4(), net.ParseIP(dst).To4()
	var mu sync.Mutex
	var got [][]byte
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for i := 0; i < 1_000_000; i++ { // bounded; stops in 50 ms once told
			select {
			case <-stop:
				return
			default:
			}
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil || n < 28 {
				continue
			}
			ip := buf[:n]
			ihl := int(ip[0]&0x0f) * 4
			if ip[0]>>4 != 4 || ip[9] != unix.IPPROTO_UDP || n < ihl+8 ||
				!net.IP(ip[12:16]).Equal(srcIP) || !net.IP(ip[16:20]).Equal(dstIP) || be.BigEndian.Uint16(ip[ihl+2:]) != port {
				continue
			}
			mu.Lock()
			got = append(got, append([]byte(nil), ip[ihl+8:]...))
			mu.Unlock()
		}
	}()
	var once sync.Once
	finish := func() [][]byte {
		once.Do(func() { close(stop); <-done; unix.Close(fd) })
		mu.Lock()
		defer mu.Unlock()
		return got
	}
	t.Cleanup(func() { finish() })
	return finish
}

// htons is a 16-bit value in network byte order, as AF_PACKET wants it.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// netnsTransport dials memberlist's streams from inside the attacker's
// namespace (its packets already go out on the socket made there).
type netnsTransport struct {
	memberlist.NodeAwareTransport
	host *netnstest.Host
}

func (n netnsTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return n.host.DialContext(ctx, "tcp", addr)
}

func (n netnsTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return n.DialTimeout(a.Addr, timeout)
}

// netnsRogue runs a keyed rogue member named name from the attacker's
// namespace for 3 seconds, reporting a trillion tokens per victim per
// round and claiming debt at push-pull (peersRogue's attack), and fails
// the test if any node's victim balance goes below floor.
func netnsRogue(t *testing.T, c *netnsCluster, name string, debt, floor float64) {
	t.Helper()
	victims := []string{name + "-v1", name + "-v2", name + "-v3"}
	var rogue *gossip.Syncer
	if err := c.attacker.Do(func() error {
		var err error
		rogue, err = gossip.New(gossip.Config{NodeName: name, BindAddr: c.attacker.IP, BindPort: 0, SecretKey: c.secret, Label: netnsLabel,
			GossipInterval: 20 * time.Millisecond, PushPullInterval: 200 * time.Millisecond, Join: []string{c.nodes[0].gossip},
			WrapTransport: func(tr memberlist.Transport) memberlist.Transport {
				return netnsTransport{NodeAwareTransport: tr.(memberlist.NodeAwareTransport), host: c.attacker}
			}},
			&rogueLedger{victims: victims, epoch: uint64(time.Now().UnixNano()), debt: debt})
		if err != nil {
			return err
		}
		// Start binds memberlist's sockets: in the attacker's namespace too.
		return rogue.Start()
	}); err != nil {
		t.Fatalf("start the rogue in %s: %v", c.attacker.Name, err)
	}
	defer rogue.Shutdown()
	for _, n := range c.nodes {
		eventually(t, n.name+" hears the rogue join", func() bool {
			return strings.Contains(n.p.stderr.String(), "member joined: name="+name)
		})
	}
	start := time.Now()
	eventually(t, "the rogue's reports reach every node", func() bool {
		for _, n := range c.nodes {
			if _, held := n.key(t, "r", victims[0]); !held {
				return false
			}
		}
		return true
	})
	worst := 100.0
	pace := time.NewTicker(50 * time.Millisecond)
	defer pace.Stop()
	for time.Since(start) < 3*time.Second {
		for _, n := range c.nodes {
			for _, v := range victims {
				b, _ := n.key(t, "r", v)
				worst = min(worst, b)
				if b < floor {
					t.Fatalf("%s: victim %s at %.1f after %s of the attack, below the bound %.0f (truth: 100)",
						n.name, v, b, time.Since(start).Round(time.Millisecond), floor)
				}
			}
		}
		<-pace.C // sampling period, not waiting for an outcome
	}
	t.Logf("claimed debt %g: lowest victim balance on 3 nodes over 3s of a keyed rogue's attack across namespaces: %.1f (truth: 100; bound: %.0f)", debt, worst, floor)
	for _, n := range c.nodes {
		if m := n.metrics(t); !strings.Contains(m, `sluice_gossip_suspicious_reports_total{origin="`+name+`"}`) {
			t.Errorf("%s does not name the rogue in its suspicious reports:\n%s", n.name, grepLines(m, "suspicious"))
		}
	}
}

// netnsDropped is how many packets the host's iptables INPUT chain has
// dropped.
func netnsDropped(t *testing.T, h *netnstest.Host) int64 {
	t.Helper()
	out, err := h.Exec("iptables", "-L", "INPUT", "-v", "-x", "-n")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[2] == "DROP" {
			var n int64
			fmt.Sscan(f[0], &n)
			total += n
		}
	}
	return total
}

// netnsDrive offers perNode requests a second for d on each node (paced,
// bounded in count and time) for one key, and returns how many were
// admitted cluster-wide, as testcluster's drive does.
//
// It returns how many calls were admitted and how many were made: on a
// loaded machine the callers may offer less than asked, and a check of
// what was admitted must not blame the limiter for calls never made.
func netnsDrive(c *netnsCluster, rule, key string, perNode []int, d time.Duration) (admitted, offered int) {
	perSec, offered := netnsDriveSeconds(c, rule, key, perNode, d)
	for _, n := range perSec {
		admitted += n
	}
	return admitted, offered
}

// With 10% of every packet into each member's eth0 dropped (iptables
// statistic match, in each member's namespace), skewed load at 5× the
// limit is held to within 10% of burst + rate × time cluster-wide, the
// bound of testcluster's TestFaultyNetworkKeepsTheBound, and no member
// clamps another's honest reports.
func TestNetnsLossKeepsTheClusterLimit(t *testing.T) {
	c := startNetnsCluster(t, false)
	netnsRequireIptables(t)
	for _, n := range c.nodes {
		if _, err := n.host.Exec("iptables", "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random",
			"--probability", "0.1", "-j", "DROP"); err != nil {
			t.Fatal(err)
		}
	}
	const secs = 6
	start := time.Now()
	got, offered := netnsDrive(c, "api", "hot-key", []int{350, 100, 50}, secs*time.Second)
	elapsed := time.Since(start).Seconds()
	want := min(100+100*elapsed, float64(offered)) // a starved caller offers less
	var dropped []int64
	for _, n := range c.nodes {
		dropped = append(dropped, netnsDropped(t, n.host))
	}
	t.Logf("admitted %d over %.2fs, limit allows %.0f (%.1f%%), with 10%% of packets into each member dropped (dropped %v)",
		got, elapsed, want, 100*float64(got)/want, dropped)
	for i, d := range dropped {
		if d == 0 {
			t.Errorf("%s's iptables dropped nothing: the loss was not applied", c.nodes[i].name)
		}
	}
	assertNearLimit(t, "10% loss", got, offered, (350+100+50)*secs, want, 0.10)
	c.assertNoneClamped(t)
}

// netnsWithin is eventually with its own deadline, for what memberlist's
// failure detection and rejoin timers pace (seconds, not milliseconds).
func netnsWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", d, what)
		}
		<-poll.C
	}
}

// alive is how many members n sees alive, or -1 if it does not answer.
func (n *netnsNode) alive(t *testing.T) int {
	t.Helper()
	code, body := n.get("/v1/members")
	if code != 200 {
		return -1
	}
	return aliveIn([]byte(body))
}

// netnsDropFrom makes h's namespace drop every packet from the given
// addresses (iptables INPUT), until netnsHeal.
func netnsDropFrom(t *testing.T, h *netnstest.Host, ips ...string) {
	t.Helper()
	for _, ip := range ips {
		if _, err := h.Exec("iptables", "-A", "INPUT", "-s", ip, "-j", "DROP"); err != nil {
			t.Fatal(err)
		}
	}
}

// netnsHeal removes every INPUT rule in h's namespace.
func netnsHeal(t *testing.T, h *netnstest.Host) {
	t.Helper()
	if _, err := h.Exec("iptables", "-F", "INPUT"); err != nil {
		t.Fatal(err)
	}
}

// netnsRequireIptables skips the test without iptables (fails under
// SLUICE_REQUIRE_NETNS).
func netnsRequireIptables(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil {
		if os.Getenv(netnsRequireEnv) != "" {
			t.Fatalf("%s is set but iptables is not installed: %v", netnsRequireEnv, err)
		}
		t.Skipf("skipped: iptables is not installed (apt-get install iptables): %v", err)
	}
}

// Real processes in namespaces, split {n1, n2} | {n3} by iptables: once
// the sides have declared each other dead, each holds the limit on its own
// (within testcluster's TestPartitionEachSideEnforcesThenConverges bounds,
// 0.9–1.15 × burst + rate × time per side); healed, all three are members
// again and consumption reaches every node. Then n3 is killed (-9): the
// others keep deciding, n1 spends a whole burst meanwhile, and n3,
// restarted in its namespace, learns that debt at join and denies the key.
// From the crash on, no member clamps another's report.
func TestNetnsPartitionThenCrash(t *testing.T) {
	c := startNetnsCluster(t, false)
	netnsRequireIptables(t)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]

	netnsDropFrom(t, n1.host, n3.host.IP)
	netnsDropFrom(t, n2.host, n3.host.IP)
	netnsDropFrom(t, n3.host, n1.host.IP, n2.host.IP)
	split := time.Now()
	netnsWithin(t, 30*time.Second, "the sides declare each other dead", func() bool {
		return n1.alive(t) == 2 && n2.alive(t) == 2 && n3.alive(t) == 1
	})
	t.Logf("the sides declared each other dead %s after the split", time.Since(split).Round(time.Millisecond))
	const secs = 3
	var majority, minority, majOffered, minOffered int
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		majority, majOffered = netnsDrive(c, "api", "split-key", []int{200, 200, 0}, secs*time.Second)
	}()
	go func() {
		defer wg.Done()
		minority, minOffered = netnsDrive(c, "api", "split-key", []int{0, 0, 300}, secs*time.Second)
	}()
	wg.Wait()
	limit := 100 + 100*secs
	t.Logf("during the partition: majority admitted %d of %d, minority %d of %d (limit per side %d)", majority, majOffered, minority, minOffered, limit)
	for _, side := range []struct {
		name                     string
		admitted, offered, asked int
	}{{"majority", majority, majOffered, 400 * secs}, {"minority", minority, minOffered, 300 * secs}} {
		// Each side alone enforces the limit: never much more, and not
		// less than the limit (or than what its callers, starved on a
		// loaded machine, managed to offer).
		if float64(side.admitted) > 1.15*float64(limit) {
			t.Errorf("%s side admitted %d of %d offered, want about the limit %d on its own", side.name, side.admitted, side.offered, limit)
		}
		assertNearLimit(t, side.name+" side", side.admitted, side.offered, side.asked, float64(min(limit, side.offered)), 0.10)
	}
	for _, n := range c.nodes {
		netnsHeal(t, n.host)
	}
	healed := time.Now()
	for _, n := range c.nodes {
		netnsWithin(t, 30*time.Second, n.name+" sees all three members again", func() bool { return n.alive(t) == 3 })
	}
	t.Logf("all three members again %s after the heal", time.Since(healed).Round(time.Millisecond))
	if got := netnsSpend(n3, "slow", "after-heal", 5); got != 5 {
		t.Fatalf("n3 admitted %d of 5 on a fresh key", got)
	}
	for _, n := range c.nodes {
		eventually(t, n.name+" hears of n3's spend after the heal", func() bool {
			b, _ := n.key(t, "slow", "after-heal")
			return b < 95.1
		})
	}

	// The sides together admitted about twice the limit: the split key is
	// in debt deeper than a burst. A node learning that debt by push-pull
	// takes it as 0 and counts the report as suspicious (issue 15's known
	// gap, which testcluster's partition tests log rather than fail): the
	// same here, and the crash below starts once the debt has refilled,
	// so that from then on no clamp at all is allowed.
	for _, n := range c.nodes {
		eventually(t, n.name+"'s split key refills out of debt", func() bool { b, _ := n.key(t, "api", "split-key"); return b > 0 })
	}
	clampsBefore := map[string]float64{}
	for _, n := range c.nodes {
		clampsBefore[n.name] = c.honestClamps(t, n)
		if clampsBefore[n.name] > 0 {
			t.Logf("after the partition, %s clamped %v honest reports (known gap: a debt deeper than a burst learned by push-pull)", n.name, clampsBefore[n.name])
		}
	}

	// Crash n3; n1 spends the whole burst of a key while it is down.
	n3.p.cmd.Process.Kill()
	<-n3.p.exited
	n3.p.exited <- nil // for the cleanup
	n1.assertUp(t, "after n3 was killed")
	n2.assertUp(t, "after n3 was killed")
	// A key new to the cluster is held to n1's share of its burst for one
	// propagation delay (bucket/firstshare.go); then n1 has the rest.
	spent := 0
	eventually(t, "n1 spends a fresh burst of 100", func() bool {
		spent += netnsSpend(n1, "slow", "debtor", 100-spent)
		return spent == 100
	})
	eventually(t, "n2 hears of n1's spend", func() bool { b, _ := n2.key(t, "slow", "debtor"); return b < 0.1 })
	restarted := netnsStartNode(t, n3.host, c.dir, "n3", c.security, n1.gossip)
	back := time.Now()
	eventually(t, "the restarted n3 learns the debt it missed", func() bool {
		b, _ := restarted.key(t, "slow", "debtor")
		return b < 0.1
	})
	t.Logf("the restarted n3 had the debt %s after it served", time.Since(back).Round(time.Millisecond))
	if d := restarted.c.Allow(context.Background(), "slow", "debtor"); d.Allowed {
		t.Fatalf("the restarted n3 admitted a key whose burst was spent while it was down: %+v", d)
	}
	clampsBefore[restarted.name] = 0 // a new process
	for _, n := range []*netnsNode{n1, n2, restarted} {
		if got := c.honestClamps(t, n) - clampsBefore[n.name]; got != 0 {
			t.Errorf("%s clamped %v honest reports during the crash and restart:\n%s\n%s", n.name, got, grepLines(n.metrics(t), "suspicious"),
				grepLines(n.p.stderr.String(), "suspicious|clamp"))
		}
	}
}

// honestClamps is how many reports of the cluster's members n has clamped.
func (c *netnsCluster) honestClamps(t *testing.T, n *netnsNode) float64 {
	t.Helper()
	sum := 0.0
	for _, member := range c.nodes {
		sum += n.metric(t, `sluice_gossip_suspicious_reports_total{origin="`+member.name+`"}`)
	}
	return sum
}
