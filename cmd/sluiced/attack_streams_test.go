package main

import (
	"bytes"
	be "encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// These tests attack a real sluiced where issue 15 left known limits: key
// files owned by another user, stream slots held by a stranger, hostile
// replies on streams the daemon opened, and forged epochs in the relay
// queue.

// A key file or keyring chowned to nobody is refused at start even at mode
// 0600, naming the file, its owner and the fix, as ssh refuses a key owned
// by another user. Needs root to chown.
func TestStreamsKeyFileOwnedByAnotherUserIsRefused(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown a key file to nobody (uid 65534)")
	}
	dir := tempDir(t)
	port := freePort(t)
	keyFile := secureKeyFile(t, dir, secureKey)
	ring := filepath.Join(dir, "keyring.json")
	if err := os.WriteFile(ring, []byte(`["`+secureKey+`"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{keyFile, ring} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct{ flag, path string }{{"--gossip-key-file", keyFile}, {"--gossip-keyring", ring}} {
		t.Run(tt.flag, func(t *testing.T) {
			code, out := secureRun(t, nil, "--socket", filepath.Join(dir, "d.sock"), "--join", "127.0.0.1:"+port, tt.flag, tt.path)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			for _, s := range []string{tt.path + " is owned by uid 65534", "or root", "chown 0 " + tt.path} {
				if !strings.Contains(out, s) {
					t.Errorf("the error does not say %q:\n%s", s, out)
				}
			}
			if strings.Contains(out, secureKey) {
				t.Errorf("the output shows the key:\n%s", out)
			}
		})
	}
}

// streamsFakePeer listens on a loopback port and answers every stream with
// reply (then reads what the daemon sent until it closes, at most 5 s). It
// returns its address and how many streams it answered.
func streamsFakePeer(t *testing.T, reply []byte) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	served := &atomic.Int64{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				go c.Write(reply)
				io.Copy(io.Discard, c)
				served.Add(1)
			}()
		}
	}()
	return l.Addr().String(), served
}

// streamsNodeState is a push-pull node state as memberlist encodes it.
type streamsNodeState struct {
	Name        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Incarnation uint32
	State       uint8
	Vsn         []uint8
}

// streamsPushPull is a plain push-pull reply holding states and user state.
func streamsPushPull(t *testing.T, states []streamsNodeState, user []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteByte(6)
	enc := codec.NewEncoder(&b, &codec.MsgpackHandle{})
	if err := enc.Encode(map[string]any{"Nodes": len(states), "UserStateLen": len(user), "Join": false}); err != nil {
		t.Fatal(err)
	}
	for i := range states {
		if err := enc.Encode(&states[i]); err != nil {
			t.Fatal(err)
		}
	}
	b.Write(user)
	return b.Bytes()
}

// A daemon that joins a fake peer (or push-pulls with one) reads the
// peer's reply. Without a key, memberlist read it unchecked: a node state
// with a one-byte version list panicked memberlist, and declared lengths
// were allocated as given. Now each hostile reply is refused before
// memberlist reads it, counted in sluice_gossip_replies_refused_total: the
// daemon stays up, learns of no member, and its peak RSS grows by less
// than streamsReplyBoundMiB. With a key, a reply declaring an encrypted
// frame beyond the cap is refused the same way.
func TestStreamsHostileRepliesAreRefused(t *testing.T) {
	t.Parallel()
	fake := func(vsn ...uint8) []streamsNodeState {
		return []streamsNodeState{{Name: "fake", Addr: []byte{127, 0, 0, 1}, Port: 1, State: 0, Vsn: vsn}}
	}
	declare := func(nodes, userLen int64) []byte {
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
		return append(b, 0xa4, 'J', 'o', 'i', 'n', 0xc2)
	}
	plain := []struct {
		name, reason string
		reply        []byte
	}{
		{"a one-byte version list (panicked memberlist)", "header", streamsPushPull(t, fake(1), nil)},
		{"another cluster's label", "label", labelled("other", streamsPushPull(t, fake(1, 5, 5, 0, 1, 1), nil))},
		{"this cluster's label (replies carry none)", "label", labelled("sluice", streamsPushPull(t, fake(1, 5, 5, 0, 1, 1), nil))},
		{"2^40 node states", "length", declare(1<<40, 0)},
		{"a user state of 2^62 bytes", "length", declare(0, 1<<62)},
		{"garbage", "type", []byte("HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n")},
	}
	t.Run("plain", func(t *testing.T) {
		var joins []string
		var served []*atomic.Int64
		for _, p := range plain {
			addr, n := streamsFakePeer(t, p.reply)
			joins = append(joins, addr)
			served = append(served, n)
		}
		metrics := "127.0.0.1:" + freePort(t)
		n := startTransportNode(t, "victim", "", "--metrics-addr", metrics, "--insecure-gossip", "--join", strings.Join(joins, ","))
		pid := n.p.cmd.Process.Pid
		base := procKiB(t, pid, "VmHWM")
		eventually(t, "every fake peer was dialled twice", func() bool {
			for _, s := range served {
				if s.Load() < 2 {
					return false
				}
			}
			return true
		})
		for _, reason := range []string{"header", "label", "length", "type"} {
			v := transportMetric(t, metrics, `sluice_gossip_replies_refused_total{reason="`+reason+`"}`)
			want := 0
			for _, p := range plain {
				if p.reason == reason {
					want += 2
				}
			}
			t.Logf("replies refused for %s: %v (at least %d)", reason, v, want)
			if v < float64(want) {
				t.Errorf("replies refused for %s: %v, want at least %d", reason, v, want)
			}
		}
		n.assertUp(t, "after the hostile replies")
		if alive := transportMetric(t, metrics, `sluice_members{state="alive"}`); alive != 1 {
			t.Fatalf("%v members alive: a hostile reply was merged", alive)
		}
		grew := (procKiB(t, pid, "VmHWM") - base) >> 10
		t.Logf("peak RSS grew by %d MiB (bound %d MiB)", grew, streamsReplyBoundMiB)
		if grew > streamsReplyBoundMiB {
			t.Fatalf("peak RSS grew by %d MiB, bound %d MiB", grew, streamsReplyBoundMiB)
		}
	})
	t.Run("encrypted", func(t *testing.T) {
		addr, served := streamsFakePeer(t, []byte{10, 0xff, 0xff, 0xff, 0xff})
		metrics := "127.0.0.1:" + freePort(t)
		n := startTransportNode(t, "victim", transportTestKey, "--metrics-addr", metrics, "--join", addr)
		eventually(t, "the fake peer was dialled twice", func() bool { return served.Load() >= 2 })
		if v := transportMetric(t, metrics, `sluice_gossip_replies_refused_total{reason="length"}`); v < 2 {
			t.Fatalf("replies declaring a 4 GiB frame refused: %v, want at least 2", v)
		}
		n.assertUp(t, "after the hostile replies")
	})
}

// streamsReplyBoundMiB bounds what hostile replies may grow a daemon's peak
// RSS by: each is refused from its first bytes.
const streamsReplyBoundMiB = 32

// streamsStranger keeps n silent streams open to addr from the loopback
// addresses sources (round robin), dialling again whenever the daemon
// closes one (after 100 ms), until stop is called (or 90 s pass). It counts the streams
// it opened.
func streamsStranger(t *testing.T, addr string, n int, sources []string) (stop func(), opened *atomic.Int64) {
	t.Helper()
	done := make(chan struct{})
	opened = &atomic.Int64{}
	var wg sync.WaitGroup
	limit := time.Now().Add(90 * time.Second)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(sources[i%len(sources)])}}
			buf := make([]byte, 1)
			for time.Now().Before(limit) {
				select {
				case <-done:
					return
				default:
				}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					select {
					case <-done:
						return
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				opened.Add(1)
				go func() { <-done; c.Close() }()
				c.SetReadDeadline(limit)
				c.Read(buf) // until the daemon closes it
				c.Close()
				select { // spare the shared test machine; a slot freed is retaken within 100 ms
				case <-done:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop, opened
}

// streamsWithin waits until cond holds, at most bound, and returns how
// long it took; past bound it fails the test naming what.
func streamsWithin(t *testing.T, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %s", what, bound)
		}
		<-poll.C
	}
	return time.Since(start)
}

// streamsMemberBound is how long members' push-pulls, a join and a reset
// may take to get through while a stranger holds streams open. Unhindered
// they take about a push-pull interval (1 s); a stranger holding every slot
// (as before the slots were shared out) delayed them by up to 10 s per
// attempt, indefinitely while it kept dialling.
const streamsMemberBound = 10 * time.Second

// streamsSlotsMemoryBoundMiB bounds the victim's peak RSS growth while
// strangers hold streams: 32 silent streams hold a 512-byte buffer each.
const streamsSlotsMemoryBoundMiB = 32

// A stranger keeps 200 silent streams open to a member of an encrypted
// cluster, dialling again whenever one is closed: first all from one
// address (127.0.0.2), then spread over 50 addresses. Meanwhile the
// members' push-pulls are accepted, a new node joins, and a reset made on
// another member reaches the victim, each within streamsMemberBound; the
// daemon stays up and its peak RSS grows by less than
// streamsSlotsMemoryBoundMiB. One address holds at most 4 streams (the
// rest refused as "source"); strangers together hold at most 24, the last
// 8 kept for members' addresses.
func TestStreamsStrangerHoldingStreamsCannotStarveMembers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial("tcp", l.Addr().String())
	l.Close()
	if err != nil {
		t.Skipf("cannot dial from the loopback address 127.0.0.2 here: %v", err)
	}
	c.Close()
	dir := tempDir(t)
	key := secureKeyFile(t, dir, secureKey)
	portA := freePort(t)
	gossipA := "127.0.0.1:" + portA
	node := func(name string, join bool) *adminNode {
		args := []string{"--bind", "127.0.0.1:" + freePort(t), "--gossip-key-file", key, "--push-pull-interval", "1s", "--gossip-interval", "20ms"}
		if !join {
			args[1] = gossipA
		} else {
			args = append(args, "--join", gossipA)
		}
		return startAdminNode(t, dir, name, adminRules, args...)
	}
	a := node("a", false)
	b := node("b", true)
	members := func(n *adminNode) int {
		var m adminapi.MembersView
		adminJSON(t, n.admin, "/v1/members", &m)
		alive := 0
		for _, x := range m.Members {
			if x.State == "alive" {
				alive++
			}
		}
		return alive
	}
	eventually(t, "a and b see each other", func() bool { return members(a) == 2 && members(b) == 2 })
	pid := a.p.cmd.Process.Pid
	base := max(procKiB(t, pid, "VmHWM"), procKiB(t, pid, "VmRSS"))
	metric := func(sample string) float64 { return transportMetric(t, a.admin, sample) }
	victimKey := 0

	for _, phase := range []struct {
		name    string
		sources []string
		joiner  string
	}{
		{"200 streams from 127.0.0.2", []string{"127.0.0.2"}, "c"},
		{"200 streams from 50 addresses", func() []string {
			var s []string
			for i := 2; i < 52; i++ {
				s = append(s, fmt.Sprintf("127.0.0.%d", i))
			}
			return s
		}(), "d"},
	} {
		t.Run(phase.name, func(t *testing.T) {
			refusedBefore := metric(`sluice_gossip_streams_refused_total{reason="source"}`) + metric(`sluice_gossip_streams_refused_total{reason="busy"}`)
			stop, opened := streamsStranger(t, gossipA, 200, phase.sources)
			eventually(t, "the stranger holds streams and is refused more", func() bool {
				return opened.Load() >= 200 && metric(`sluice_gossip_streams_refused_total{reason="source"}`)+
					metric(`sluice_gossip_streams_refused_total{reason="busy"}`) >= refusedBefore+100
			})
			open := metric("sluice_gossip_streams_open")
			t.Logf("under attack: %v streams open on a, %d opened by the stranger", open, opened.Load())

			accepted := metric("sluice_gossip_streams_accepted_total")
			took := streamsWithin(t, streamsMemberBound, "three members' streams accepted by a", func() bool {
				return metric("sluice_gossip_streams_accepted_total") >= accepted+3
			})
			t.Logf("three members' streams (push-pulls) accepted by a in %s", took.Round(time.Millisecond))

			start := time.Now()
			want := members(a) + 1
			c := node(phase.joiner, true)
			took = streamsWithin(t, streamsMemberBound, phase.joiner+" joins a", func() bool {
				return members(a) == want && members(c) == want
			})
			t.Logf("%s joined (a sees %d members) in %s after it started", phase.joiner, want, time.Since(start).Round(time.Millisecond))

			victimKey++
			k := fmt.Sprintf("victim-%d", victimKey)
			spent := 0 // held to a's share for one propagation delay (bucket/firstshare.go)
			eventually(t, "a spends 5 on a fresh key", func() bool {
				spent += a.spend("r", k, 5-spent)
				return spent == 5
			})
			eventually(t, "b holds the key spent", func() bool { return near(b.balance(t, "r", k), 0) })
			if code, body := adminRequest(t, "DELETE", "http://"+b.admin+"/v1/keys/r/"+k, "", map[string]string{adminapi.Header: "1"}, ""); code != 200 {
				t.Fatalf("reset on b: %d %s", code, body)
			}
			took = streamsWithin(t, streamsMemberBound, "the reset made on b reaches a", func() bool { return near(a.balance(t, "r", k), 5) })
			t.Logf("a reset made on b reached a in %s", took.Round(time.Millisecond))

			if d := a.c.Allow(t.Context(), "r", "probe-"+phase.joiner); !d.Allowed || d.FailedOpen {
				t.Fatalf("a no longer decides under attack: %+v", d)
			}
			for _, r := range []string{"source", "busy", "timeout"} {
				t.Logf("a refused for %s: %v", r, metric(`sluice_gossip_streams_refused_total{reason="`+r+`"}`))
			}
			stop()
		})
	}
	grew := (procKiB(t, pid, "VmHWM") - base) >> 10
	t.Logf("a's peak RSS grew by %d MiB (bound %d MiB)", grew, streamsSlotsMemoryBoundMiB)
	if grew > streamsSlotsMemoryBoundMiB {
		t.Fatalf("a's peak RSS grew by %d MiB, bound %d MiB", grew, streamsSlotsMemoryBoundMiB)
	}
}

// streamsDialFrom dials addr from the loopback address 127.0.0.(2 + i%50),
// so that a flood comes from fifty sources, as from several hosts: one
// source alone is held to its share of the stream slots. Where loopback
// aliases do not work, it dials from the default address.
func streamsDialFrom(addr string, i int) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%50))}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return net.DialTimeout("tcp", addr, 5*time.Second)
	}
	return c, nil
}
