package main

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/gossip"
	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// sendersRules: burst 100, refilling 100 an hour (0.03 a second), so a
// balance read during the test is what was charged, and one allowance (an
// origin's first report of a key may be charged: burst + 1 s of rate + 1)
// is about 101 tokens.
const sendersRules = "rules:\n  r:\n    rate: 100/1h\n    burst: 100\n"

// sendersCounters is a stamped counters message (gossip's wire format,
// written by hand as an attacker would) from sender about one counter of
// origin's.
func sendersCounters(sender, origin, key string, epoch, used uint64) []byte {
	b := mp.AppendArrayHeader(nil, 5)
	b = mp.AppendUint(b, 1)
	b = mp.AppendStr(b, sender)
	b = mp.AppendArrayHeader(b, 1)
	b = mp.AppendStr(b, origin)
	b = mp.AppendArrayHeader(b, 1)
	b = mp.AppendArrayHeader(b, 6)
	b = mp.AppendUint(b, 0)
	b = mp.AppendStr(b, "r")
	b = mp.AppendStr(b, key)
	b = mp.AppendUint(b, epoch)
	b = mp.AppendUint(b, 0)
	b = mp.AppendUint(b, used)
	return mp.AppendUint(b, uint64(time.Now().UnixNano()))
}

// sendersForgery is one kind of forged report the rogue sends a daemon.
type sendersForgery struct {
	key     string
	senders func(other string) [][2]string // (sender, origin) pairs
}

var sendersForgeries = []sendersForgery{
	// In the other honest member's name: sender and origin.
	{"in-a-members-name", func(other string) [][2]string { return [][2]string{{other, other}} }},
	// In the rogue's own name, about the other honest member's counter.
	{"of-a-members-origin", func(other string) [][2]string { return [][2]string{{"rogue", other}} }},
	// In five made-up names.
	{"in-made-up-names", func(string) [][2]string { return sendersGhosts() }},
	// All of it on one key.
	{"all-of-it", func(other string) [][2]string {
		return append([][2]string{{other, other}, {"rogue", other}}, sendersGhosts()...)
	}},
}

func sendersGhosts() [][2]string {
	var p [][2]string
	for i := range 5 {
		n := fmt.Sprintf("ghost-%d", i)
		p = append(p, [2]string{n, n})
	}
	return p
}

// A keyed member of a real two-daemon cluster (a bare memberlist node in
// the test with the cluster's key and label) sends counters in the names of
// the honest members, of made-up names, and about the honest members'
// counters in its own name. Each daemon refuses them: the packet's sender is
// not the member at the address it came from (or, in a cluster small enough
// that every node sends its own counters, its origins are not its sender).
// The victims' balances stay at the truth; the refusals are counted by
// reason and logged with the address and the name claimed. Honest traffic
// after the attack is charged in full and nothing of it is refused.
func TestSendersKeyedRogueCannotSendInOthersNames(t *testing.T) {
	dir := tempDir(t)
	key := secureKeyFile(t, dir, secureKey)
	portA, portB := freePort(t), freePort(t)
	a := secureNode(t, dir, "a", sendersRules, nil, "--bind", "127.0.0.1:"+portA, "--gossip-key-file", key,
		"--gossip-interval", "20ms")
	b := secureNode(t, dir, "b", sendersRules, nil, "--bind", "127.0.0.1:"+portB, "--gossip-key-file", key,
		"--gossip-interval", "20ms", "--join", "127.0.0.1:"+portA)
	rogue := secureRogue(t, "rogue", gossip.DefaultLabel)
	if _, err := rogue.Join([]string{"127.0.0.1:" + portA}); err != nil {
		t.Fatalf("the keyed rogue could not join: %v", err)
	}
	for _, n := range []*adminNode{a, b} {
		eventually(t, "both daemons list the rogue and each other", func() bool {
			s := n.p.stderr.String()
			return strings.Contains(s, "member joined: name=rogue") &&
				strings.Contains(a.p.stderr.String(), "member joined: name=b") && strings.Contains(b.p.stderr.String(), "member joined: name=a")
		})
	}

	targets := []struct {
		n            *adminNode
		name, other  string
		port         string
		sentToTarget int
	}{{n: a, name: "a", other: "b", port: portA}, {n: b, name: "b", other: "a", port: portB}}
	epoch := uint64(time.Now().UnixNano())
	// Two seconds of the attack: every 50 ms each forged counter grows by a
	// million, so each report asks for more than any allowance.
	start := time.Now()
	worst := map[string]float64{}
	pace := time.NewTicker(50 * time.Millisecond)
	defer pace.Stop()
	for round := uint64(1); time.Since(start) < 2*time.Second; round++ {
		for i := range targets {
			tg := &targets[i]
			addr := memberlist.Address{Addr: "127.0.0.1:" + tg.port, Name: tg.name}
			for _, f := range sendersForgeries {
				for _, so := range f.senders(tg.other) {
					if err := rogue.SendToAddress(addr, sendersCounters(so[0], so[1], f.key, epoch, round*1_000_000)); err != nil {
						t.Fatalf("send: %v", err)
					}
					tg.sentToTarget++
				}
			}
		}
		<-pace.C // the attack's pace, not waiting for an outcome
		for _, tg := range targets {
			for _, f := range sendersForgeries {
				k := tg.name + "/" + f.key
				if v, ok := worst[k]; !ok || tg.n.balance(t, "r", f.key) < v {
					worst[k] = tg.n.balance(t, "r", f.key)
				}
			}
		}
	}
	for _, tg := range targets {
		for _, f := range sendersForgeries {
			t.Logf("%s: key %-20s lowest balance %7.1f (truth 100; one allowance about 101)", tg.name, f.key, worst[tg.name+"/"+f.key])
		}
	}
	const (
		bySender    = `sluice_gossip_packets_refused_total{reason="sender"}`
		byOrigin    = `sluice_gossip_packets_refused_total{reason="origin"}`
		byUnchecked = `sluice_gossip_packets_refused_total{reason="unchecked"}`
	)
	for _, tg := range targets {
		eventually(t, tg.name+" counts the forged packets as refused", func() bool {
			return ipcMetric(t, tg.n.admin, bySender) >= 2 && ipcMetric(t, tg.n.admin, byOrigin) >= 1
		})
		s, o := ipcMetric(t, tg.n.admin, bySender), ipcMetric(t, tg.n.admin, byOrigin)
		t.Logf("%s: %d forged packets sent, refused: %v for their sender, %v for their origin", tg.name, tg.sentToTarget, s, o)
		if int(s+o) > tg.sentToTarget {
			t.Errorf("%s refused %v packets, more than the %d forged: honest ones were refused", tg.name, s+o, tg.sentToTarget)
		}
		for _, f := range sendersForgeries {
			if w := worst[tg.name+"/"+f.key]; w < 99 {
				t.Errorf("%s: forged reports charged key %s down to %.1f (truth 100)", tg.name, f.key, w)
			}
		}
		log := tg.n.p.stderr.String()
		if !strings.Contains(log, "refused a gossip packet: sender") || !strings.Contains(log, `it claims to be from "`+tg.other+`"`) &&
			!strings.Contains(log, `it claims to be from "ghost-`) {
			t.Errorf("%s's log does not name the refused packet's address and claimed sender:\n%s", tg.name, grepLines(log, "refused"))
		}
	}

	// Honest traffic afterwards: b's 30 admissions reach a in full.
	if got := b.spend("r", "honest", 30); got != 30 {
		t.Fatalf("b admitted %d of 30", got)
	}
	eventually(t, "a charges b's 30 admissions", func() bool { return near(a.balance(t, "r", "honest"), 70) })
	for _, tg := range targets {
		if u := ipcMetric(t, tg.n.admin, byUnchecked); u != 0 {
			t.Errorf("%s refused %v unchecked counters; none were sent", tg.name, u)
		}
	}
}

// sendersAdvertised is a daemon bound to every interface, advertising a
// loopback address it is not reached at by default (127.0.0.2): its packets
// must come from the address it advertises, or its counters are refused.
func TestSendersAdvertisedAddressStillCounts(t *testing.T) {
	t.Parallel()
	if ln, err := net.ListenPacket("udp", "127.0.0.2:0"); err != nil {
		t.Skipf("127.0.0.2 is not usable here: %v", err)
	} else {
		ln.Close()
	}
	dir := tempDir(t)
	key := secureKeyFile(t, dir, secureKey)
	portA, portC := freePort(t), freePort(t)
	a := secureNode(t, dir, "a", sendersRules, nil, "--bind", "127.0.0.1:"+portA, "--gossip-key-file", key,
		"--gossip-interval", "20ms")
	c := secureNode(t, dir, "c", sendersRules, nil, "--bind", "0.0.0.0:"+portC, "--advertise", "127.0.0.2:"+portC,
		"--gossip-key-file", key, "--gossip-interval", "20ms", "--join", "127.0.0.1:"+portA)
	eventually(t, "a lists c at its advertised address", func() bool {
		return strings.Contains(a.p.stderr.String(), "member joined: name=c addr=127.0.0.2:"+portC)
	})
	if got := c.spend("r", "advertised", 30); got != 30 {
		t.Fatalf("c admitted %d of 30", got)
	}
	if got := a.spend("r", "back", 20); got != 20 {
		t.Fatalf("a admitted %d of 20", got)
	}
	eventually(t, "a charges c's 30 admissions and c a's 20", func() bool {
		return near(a.balance(t, "r", "advertised"), 70) && near(c.balance(t, "r", "back"), 80)
	})
	for _, n := range []*adminNode{a, c} {
		if s := ipcMetric(t, n.admin, `sluice_gossip_packets_refused_total{reason="sender"}`); s != 0 {
			t.Errorf("honest packets refused for their sender: %v\n%s", s, grepLines(n.p.stderr.String(), "refused"))
		}
	}
}

// sendersSealV0 encrypts msg as memberlist's encryption version 0 (a
// version byte, a 12-byte nonce, AES-GCM with ad as additional data, the
// plaintext PKCS#7-padded), but with a pad byte of 200: longer than the
// message, which memberlist's unpadding does not check.
func sendersSealV0(t *testing.T, msg, ad []byte) []byte {
	t.Helper()
	key, _ := base64.StdEncoding.DecodeString(secureKey)
	blk, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, _ := cipher.NewGCM(blk)
	nonce := make([]byte, 12)
	rand.Read(nonce)
	for len(msg)%aes.BlockSize != 0 || len(msg) == 0 {
		msg = append(msg, 200)
	}
	msg[len(msg)-1] = 200
	return gcm.Seal(append([]byte{0}, nonce...), nonce, msg, ad)
}

// A keyed peer's packet or stream in memberlist's encryption version 0
// whose pad is longer than the message: memberlist slices out of range and
// panics, which ended the daemon. Now the packet guard checks the pad after
// decrypting (refused as malformed) and the stream guard refuses version 0
// (Sluice writes version 1); the daemon stays up and still counts.
func TestSendersBadPaddingCannotCrashTheDaemon(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"packet", "stream"} {
		t.Run(path, func(t *testing.T) {
			dir := tempDir(t)
			key := secureKeyFile(t, dir, secureKey)
			port := freePort(t)
			a := secureNode(t, dir, "a", sendersRules, nil, "--bind", "127.0.0.1:"+port, "--gossip-key-file", key)
			label := []byte(gossip.DefaultLabel)
			var metric string
			switch path {
			case "packet":
				p := append([]byte{244, byte(len(label))}, label...)
				p = append(p, sendersSealV0(t, []byte{8, 0x90}, label)...)
				conn, err := net.Dial("udp", "127.0.0.1:"+port)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := conn.Write(p); err != nil {
					t.Fatal(err)
				}
				metric = `sluice_gossip_packets_refused_total{reason="malformed"}`
			case "stream":
				frame := sendersSealV0(t, []byte{8, 0x90}, nil)
				head := []byte{10, byte(len(frame) >> 24), byte(len(frame) >> 16), byte(len(frame) >> 8), byte(len(frame))} // encryptMsg, length
				frame = sendersSealV0(t, []byte{8, 0x90}, append(append([]byte(nil), head...), label...))
				s := append([]byte{244, byte(len(label))}, label...)
				s = append(append(s, head...), frame...)
				conn, err := net.Dial("tcp", "127.0.0.1:"+port)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := conn.Write(s); err != nil {
					t.Fatal(err)
				}
				metric = `sluice_gossip_streams_refused_total{reason="header"}`
			}
			eventually(t, "the daemon refuses it, or exits", func() bool {
				if resp, err := http.Get("http://" + a.admin + "/metrics"); err != nil {
					select {
					case err := <-a.p.exited:
						a.p.exited <- err // for the cleanup
						t.Fatalf("the daemon exited: %v\n%s", err, grepLines(a.p.stderr.String(), "panic|security.go|goroutine "))
					case <-time.After(5 * time.Second):
						t.Fatalf("scrape: %v", err)
					}
				} else {
					resp.Body.Close()
				}
				return ipcMetric(t, a.admin, metric) >= 1
			})
			if got := a.spend("r", "after", 3); got != 3 {
				t.Fatalf("the daemon admitted %d of 3 after the attack", got)
			}
			t.Logf("refused, counted in %s; the daemon is up", metric)
		})
	}
}
