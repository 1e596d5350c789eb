package main

import (
	"bufio"
	"context"
	be "encoding/binary"
	"fmt"
	"net"
	"os"
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
func startTransportNode(t *testing.T, name, key string, args ...string) *transportNode {
	t.Helper()
	dir := tempDir(t)
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte("rules:\n  r:\n    rate: 5/1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := &transportNode{sock: filepath.Join(dir, name+".sock"), gossip: "127.0.0.1:" + freePort(t)}
	t.Setenv("SLUICE_GOSSIP_KEY", key)
	n.p = startDaemon(t, append([]string{"--socket", n.sock, "--rules", rules, "--no-watch", "--node-name", name,
		"--bind", n.gossip}, args...)...)
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

var _ = sync.Mutex{}
var _ = strings.Contains
