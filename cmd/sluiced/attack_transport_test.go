package main

import (
	"bufio"
	"bytes"
	"compress/lzw"
	"context"
	be "encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/clientlib"
)

// These tests attack a real sluiced's gossip port as a stranger on the
// network would: crafted TCP streams and UDP packets before any key is
// checked. Each ends with the daemon up and answering.

// transportTestKey is a 16-byte gossip key, passed through the environment
// (SLUICE_GOSSIP_KEY), never argv.
const transportTestKey = "c2x1aWNlLXRlc3Qta2V5LQ=="

// transportNode is a sluiced process with gossip bound to a loopback port.
type transportNode struct {
	p      *proc
	sock   string
	gossip string // 127.0.0.1:port, TCP and UDP
	c      *clientlib.Client
}

// startTransportNode starts sluiced with gossip on a free loopback port;
// key "" runs plain gossip, otherwise SLUICE_GOSSIP_KEY carries it.
// startTransportVictim starts a node to attack, with key ("" for none) and
// a metrics endpoint, and waits until the endpoint answers; it returns the
// node and the endpoint's address.
func startTransportVictim(t *testing.T, key string) (*transportNode, string) {
	t.Helper()
	metrics := "127.0.0.1:" + freePort(t)
	n := startTransportNode(t, "victim", key, "--metrics-addr", metrics)
	eventually(t, "metrics answer", func() bool {
		code, _ := adminRequest(t, "GET", "http://"+metrics+"/metrics", "", nil, "")
		return code == 200
	})
	return n, metrics
}

func startTransportNode(t *testing.T, name, key string, args ...string) *transportNode {
	t.Helper()
	dir := tempDir(t)
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte("rules:\n  r:\n    rate: 5/1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := &transportNode{sock: filepath.Join(dir, name+".sock"), gossip: "127.0.0.1:" + freePort(t)}
	// The key goes in the daemon's environment only (not t.Setenv: these
	// tests run in parallel); an empty one overrides any inherited key.
	cmd := exec.Command(binary, append([]string{"--socket", n.sock, "--rules", rules, "--no-watch", "--node-name", name,
		"--bind", n.gossip}, args...)...)
	cmd.Env = append(os.Environ(), "SLUICE_ADMIN_ADDR=", "SLUICE_GOSSIP_KEY="+key)
	n.p = startProc(t, cmd)
	eventually(t, name+" serves its socket", func() bool {
		c, err := clientlib.Dial(context.Background(), clientlib.Options{SocketPath: n.sock, Timeout: 5 * time.Second})
		if err != nil {
			return false
		}
		n.c = c
		return true
	})
	t.Cleanup(func() { n.c.Close() })
	eventually(t, name+" accepts on its gossip port", func() bool {
		c, err := net.DialTimeout("tcp", n.gossip, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return n
}

// assertUp fails the test if the daemon has exited or no longer decides.
func (n *transportNode) assertUp(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-n.p.exited:
		n.p.exited <- err
		t.Fatalf("%s: sluiced exited (%v); stderr:\n%s", what, err, tail(n.p.stderr.String(), 3000))
	default:
	}
	if d := n.c.Allow(context.Background(), "r", "probe-"+strconv.FormatInt(time.Now().UnixNano(), 36)); !d.Allowed || d.FailedOpen {
		t.Fatalf("%s: the daemon no longer decides: %+v; stderr:\n%s", what, d, tail(n.p.stderr.String(), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// mpMap1Int encodes a msgpack map of one string key to an int64, as
// memberlist's codec encodes its stream headers.
func mpMap1Int(key string, v int64) []byte {
	b := []byte{0x81, 0xa0 | byte(len(key))}
	b = append(b, key...)
	b = append(b, 0xd3)
	return be.BigEndian.AppendUint64(b, uint64(v))
}

// labelled prefixes b with memberlist's label header.
func labelled(label string, b []byte) []byte {
	return append(append([]byte{244, byte(len(label))}, label...), b...)
}

// streamCrashPayload is the 30-byte stream that killed sluiced: the label
// header for the default label "sluice", the user-message type (8) and a
// userMsgHeader declaring a length memberlist passes to make([]byte, n).
func streamCrashPayload(msgLen int64) []byte {
	return labelled("sluice", append([]byte{8}, mpMap1Int("UserMsgLen", msgLen)...))
}

// pushPullCrashPayload declares a push-pull of n node states (memberlist
// makes a slice of n) and a user state of userLen bytes.
func pushPullCrashPayload(nodes, userLen int64) []byte {
	b := []byte{6, 0x83}
	for _, kv := range []struct {
		k string
		v int64
	}{{"Nodes", nodes}, {"UserStateLen", userLen}} {
		b = append(b, 0xa0|byte(len(kv.k)))
		b = append(b, kv.k...)
		b = append(b, 0xd3)
		b = be.BigEndian.AppendUint64(b, uint64(kv.v))
	}
	b = append(b, 0xa4, 'J', 'o', 'i', 'n', 0xc2)
	return labelled("sluice", b)
}

// sendStream writes b to addr on a fresh TCP connection and closes it once
// the daemon has read or refused it (bounded wait).
func sendStream(t *testing.T, addr string, b []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	c.Write(b)
	c.(*net.TCPConn).CloseWrite()
	bufio.NewReader(c).ReadString(0) // until the daemon closes or the deadline
}

// A stranger's single short stream declaring an impossible length used to
// kill the daemon (memberlist trusted the header). Every variant, plain and
// against an encrypted daemon, leaves it up.
func TestGossipStreamCrashPayloadsLeaveDaemonUp(t *testing.T) {
	t.Parallel()
	payloads := []struct {
		name string
		b    []byte
	}{
		{"user message of 2^62 bytes", streamCrashPayload(1 << 62)},
		{"user message of max int64 bytes", streamCrashPayload(1<<63 - 1)},
		{"user message of 4 GiB", streamCrashPayload(4 << 30)},
		{"user message of -1 bytes", streamCrashPayload(-1)},
		{"push-pull of 2^40 nodes", pushPullCrashPayload(1<<40, 0)},
		{"push-pull user state of 2^62 bytes", pushPullCrashPayload(0, 1<<62)},
		{"unlabelled user message of 2^62 bytes", append([]byte{8}, mpMap1Int("UserMsgLen", 1<<62)...)},
		{"encrypted frame of 4 GiB", labelled("sluice", []byte{10, 0xff, 0xff, 0xff, 0xff})},
	}
	if len(streamCrashPayload(1<<62)) != 30 {
		t.Fatalf("the crash payload is %d bytes, not 30", len(streamCrashPayload(1<<62)))
	}
	for _, mode := range []struct{ name, key string }{{"plain", ""}, {"encrypted", transportTestKey}} {
		t.Run(mode.name, func(t *testing.T) {
			n := startTransportNode(t, "victim", mode.key)
			for _, p := range payloads {
				sendStream(t, n.gossip, p.b)
				n.assertUp(t, fmt.Sprintf("after %s (%d bytes)", p.name, len(p.b)))
			}
		})
	}
}

// transportMetric scrapes one sample of /metrics at addr (name with its
// labels, as exposed); -1 when absent.
func transportMetric(t *testing.T, addr, sample string) float64 {
	t.Helper()
	code, body := adminRequest(t, "GET", "http://"+addr+"/metrics", "", nil, "")
	if code != 200 {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return -1
}

// procKiB reads a field of /proc/<pid>/status in KiB (VmRSS, VmHWM).
func procKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc/<pid>/status here: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// flood runs n connections, conc at a time, each running attack; it stops
// early after limit.
func flood(n, conc int, limit time.Duration, attack func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	stop := time.Now().Add(limit)
	for i := range n {
		if time.Now().After(stop) {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			attack(i)
		}()
	}
	wg.Wait()
}

// transportMemoryBoundMiB is the most a pre-auth stream flood may grow
// sluiced's peak RSS by: the stream budget (2 × 12 MiB + 8 MiB declared at
// once, held about three times over by memberlist while it reads and
// decrypts) and the 32 open streams' buffers, with room for the collector.
const transportMemoryBoundMiB = 160

// Strangers without the key, from fifty addresses, flood an encrypted
// daemon's gossip port: 1,000 streams each declaring a 20 MiB encrypted
// frame (memberlist's own cap, which it would have buffered before checking
// the key), then 100 declaring just under Sluice's cap and really sending
// all 12 MiB. The daemon stays up, refuses and counts them, and its peak
// RSS grows by less than transportMemoryBoundMiB.
func TestGossipPreAuthStreamFloodIsBounded(t *testing.T) {
	t.Parallel()
	n, metrics := startTransportVictim(t, transportTestKey)
	pid := n.p.cmd.Process.Pid
	baseRSS, baseHWM := procKiB(t, pid, "VmRSS"), procKiB(t, pid, "VmHWM")
	junk := make([]byte, 64<<10)
	header := func(declared uint32) []byte {
		return labelled("sluice", be.BigEndian.AppendUint32([]byte{10}, declared))
	}
	send := func(i int, declared uint32, body int) {
		c, err := streamsDialFrom(n.gossip, i)
		if err != nil {
			return // refused at the backlog: also fine
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := c.Write(header(declared)); err != nil {
			return
		}
		for sent := 0; sent < body; sent += len(junk) {
			if _, err := c.Write(junk); err != nil {
				return
			}
		}
	}
	start := time.Now()
	flood(1000, 50, 60*time.Second, func(i int) { send(i, 20<<20, 1<<20) })
	t.Logf("1,000 streams declaring 20 MiB each: %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	flood(100, 50, 60*time.Second, func(i int) { send(i, 12<<20, 12<<20) })
	t.Logf("100 streams declaring and sending 12 MiB each: %s", time.Since(start).Round(time.Millisecond))
	n.assertUp(t, "after the flood")
	hwm := procKiB(t, pid, "VmHWM")
	grew := (hwm - max(baseHWM, baseRSS)) >> 10
	t.Logf("RSS before %d MiB, peak before %d MiB, peak after %d MiB: grew %d MiB (bound %d MiB)",
		baseRSS>>10, baseHWM>>10, hwm>>10, grew, transportMemoryBoundMiB)
	if grew > transportMemoryBoundMiB {
		t.Fatalf("peak RSS grew by %d MiB under the flood, bound %d MiB", grew, transportMemoryBoundMiB)
	}
	refused := 0.0
	for _, r := range []string{"length", "busy", "budget", "timeout", "source"} {
		v := transportMetric(t, metrics, `sluice_gossip_streams_refused_total{reason="`+r+`"}`)
		t.Logf("refused for %s: %v", r, v)
		refused += v
	}
	t.Logf("accepted: %v, bytes refused: %v", transportMetric(t, metrics, "sluice_gossip_streams_accepted_total"),
		transportMetric(t, metrics, "sluice_gossip_stream_bytes_refused_total"))
	if refused < 1000 {
		t.Fatalf("%v streams refused, want at least the 1,000 declaring 20 MiB", refused)
	}
	if b := transportMetric(t, metrics, "sluice_gossip_stream_bytes_refused_total"); b < 20<<20 {
		t.Fatalf("bytes refused: %v, want at least one 20 MiB declaration", b)
	}
	eventually(t, "every stream is closed", func() bool {
		return transportMetric(t, metrics, "sluice_gossip_streams_open") == 0
	})
	if lines := strings.Count(n.p.stderr.String(), "refused a gossip stream: length"); lines > 3 {
		t.Fatalf("%d log lines for streams refused for length: not rate-limited", lines)
	}
}

// Streams held open beyond one source's share (or 32 in all) are refused at
// once, not queued; once the holders go, streams are accepted again, and a
// stream that sends nothing is closed within the header deadline (5 s).
func TestGossipStreamSlotsAndDeadline(t *testing.T) {
	t.Parallel()
	n, metrics := startTransportVictim(t, "")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 40 {
		c, err := net.DialTimeout("tcp", n.gossip, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c) // sends nothing: held until the deadline
	}
	eventually(t, "streams beyond the caps are refused (busy, or the source's share)", func() bool {
		return transportMetric(t, metrics, `sluice_gossip_streams_refused_total{reason="busy"}`)+
			transportMetric(t, metrics, `sluice_gossip_streams_refused_total{reason="source"}`) >= 8
	})
	if open := transportMetric(t, metrics, "sluice_gossip_streams_open"); open > 32 {
		t.Fatalf("%v streams open, cap 32", open)
	}
	start := time.Now()
	c := held[0]
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a silent stream was answered")
	}
	took := time.Since(start)
	t.Logf("a silent stream was closed after %s", took.Round(time.Millisecond))
	if took > 20*time.Second {
		t.Fatalf("a silent stream stayed open %s", took)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	eventually(t, "slots are given back", func() bool {
		return transportMetric(t, metrics, "sluice_gossip_streams_open") == 0
	})
	sendStream(t, n.gossip, streamCrashPayload(1<<62))
	n.assertUp(t, "after the slots were given back")
}

// lzwBombPacket is a labelled packet holding a compressed message (which
// Sluice never sends) whose LZW payload, under 64 KiB, inflates to about
// 80 MiB: memberlist decompresses any it is given.
func lzwBombPacket(t *testing.T) ([]byte, int) {
	t.Helper()
	var z bytes.Buffer
	w := lzw.NewWriter(&z, lzw.LSB, 8)
	zeros := make([]byte, 1<<20)
	inflated := 0
	for z.Len() < 60<<10 {
		w.Write(zeros)
		inflated += len(zeros)
	}
	w.Close()
	b := []byte{9, 0x82, 0xa4, 'A', 'l', 'g', 'o', 0x00, 0xa3, 'B', 'u', 'f', 0xc6}
	b = be.BigEndian.AppendUint32(b, uint32(z.Len()))
	return labelled("sluice", append(b, z.Bytes()...)), inflated
}

// A stranger's UDP packets: compression bombs (memberlist inflates about
// 1,300:1, and Sluice never compresses), packets with another cluster's
// label or none. A plain daemon refuses them before memberlist, counts
// them by reason, logs them at most once per cause per interval, and its
// peak RSS barely moves.
func TestGossipHostilePacketsAreRefused(t *testing.T) {
	t.Parallel()
	n, metrics := startTransportVictim(t, "")
	pid := n.p.cmd.Process.Pid
	baseHWM := procKiB(t, pid, "VmHWM")
	bomb, inflated := lzwBombPacket(t)
	t.Logf("bomb packet: %d bytes inflating to %d MiB", len(bomb), inflated>>20)
	c, err := net.Dial("udp", n.gossip)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const sent = 20
	pace := time.NewTicker(20 * time.Millisecond)
	defer pace.Stop()
	for range sent {
		if _, err := c.Write(bomb); err != nil {
			t.Fatal(err)
		}
		c.Write([]byte{8, 1, 2, 3})                            // no label
		c.Write(labelled("other-cluster", []byte{8, 1, 2, 3})) // another cluster's
		<-pace.C                                               // pacing, not waiting for an outcome: UDP has no backpressure
	}
	eventually(t, "the bombs are refused", func() bool {
		return transportMetric(t, metrics, `sluice_gossip_packets_refused_total{reason="compressed"}`) >= 1 &&
			transportMetric(t, metrics, `sluice_gossip_packets_refused_total{reason="label"}`) >= 2
	})
	n.assertUp(t, "after the bombs")
	grew := (procKiB(t, pid, "VmHWM") - baseHWM) >> 10
	t.Logf("refused: compressed %v, label %v of %d each; peak RSS grew %d MiB",
		transportMetric(t, metrics, `sluice_gossip_packets_refused_total{reason="compressed"}`),
		transportMetric(t, metrics, `sluice_gossip_packets_refused_total{reason="label"}`), sent, grew)
	if grew > 32 {
		t.Fatalf("peak RSS grew %d MiB from %d refused packets", grew, sent)
	}
	if lines := strings.Count(n.p.stderr.String(), "refused a gossip packet"); lines > 4 {
		t.Fatalf("%d log lines for refused packets: not rate-limited\n%s", lines, tail(n.p.stderr.String(), 2000))
	}
}

// A stranger without the key floods an encrypted daemon with packets it
// cannot decrypt: memberlist refuses each, and the daemon logs about one
// line per interval instead of one per packet.
func TestGossipUndecryptablePacketFloodIsLoggedOncePerInterval(t *testing.T) {
	n := startTransportNode(t, "victim", transportTestKey)
	c, err := net.Dial("udp", n.gossip)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	junk := labelled("sluice", make([]byte, 200))
	pace := time.NewTicker(10 * time.Millisecond)
	defer pace.Stop()
	for i := range 500 {
		junk[len(junk)-1] = byte(i)
		c.Write(junk)
		if i%50 == 49 {
			<-pace.C // pacing: UDP has no backpressure
		}
	}
	eventually(t, "the first undecryptable packet is logged", func() bool {
		return strings.Contains(n.p.stderr.String(), "Decrypt packet failed")
	})
	n.assertUp(t, "after the flood")
	if lines := strings.Count(n.p.stderr.String(), "Decrypt packet failed"); lines > 2 {
		t.Fatalf("%d log lines for 500 undecryptable packets: not rate-limited", lines)
	}
}

// The same flood against a daemon without a key: 1,000 streams whose plain
// headers declare the largest user message or push-pull Sluice accepts (9
// MiB of user state, which memberlist allocates as soon as it has read the
// header), each sending 1 MiB, 50 at a time. Peak RSS grows by less than
// transportMemoryBoundMiB.
func TestGossipPlainDeclaredLengthFloodIsBounded(t *testing.T) {
	t.Parallel()
	n, metrics := startTransportVictim(t, "")
	pid := n.p.cmd.Process.Pid
	baseRSS, baseHWM := procKiB(t, pid, "VmRSS"), procKiB(t, pid, "VmHWM")
	junk := make([]byte, 64<<10)
	start := time.Now()
	flood(1000, 50, 60*time.Second, func(i int) {
		c, err := streamsDialFrom(n.gossip, i)
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(15 * time.Second))
		header := streamCrashPayload(9 << 20)
		if i%2 == 1 {
			header = pushPullCrashPayload(2048, 9<<20)
		}
		if _, err := c.Write(header); err != nil {
			return
		}
		for sent := 0; sent < 1<<20; sent += len(junk) {
			if _, err := c.Write(junk); err != nil {
				return
			}
		}
	})
	t.Logf("1,000 plain streams declaring 9 MiB each: %s", time.Since(start).Round(time.Millisecond))
	n.assertUp(t, "after the flood")
	hwm := procKiB(t, pid, "VmHWM")
	grew := (hwm - max(baseHWM, baseRSS)) >> 10
	t.Logf("RSS before %d MiB, peak after %d MiB: grew %d MiB (bound %d MiB)", baseRSS>>10, hwm>>10, grew, transportMemoryBoundMiB)
	for _, r := range []string{"length", "busy", "budget", "timeout", "source"} {
		t.Logf("refused for %s: %v", r, transportMetric(t, metrics, `sluice_gossip_streams_refused_total{reason="`+r+`"}`))
	}
	t.Logf("accepted: %v", transportMetric(t, metrics, "sluice_gossip_streams_accepted_total"))
	if grew > transportMemoryBoundMiB {
		t.Fatalf("peak RSS grew by %d MiB under the flood, bound %d MiB", grew, transportMemoryBoundMiB)
	}
}
