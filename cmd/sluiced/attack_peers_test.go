package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/gossip"
	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// peersRules: burst 100 at 10/s, so one allowance (what an origin's
// allowance for a key starts with: burst + 1 s of rate + 1) is 111 tokens,
// and a key's balance is 100 when nothing consumed it.
const peersRules = "rules:\n  r:\n    rate: 10/1s\n    burst: 100\n"

// peersCounter is one entry of a counters packet, written by hand as an
// attacker would (gossip's writer is not exported).
type peersCounter struct {
	key               string
	epoch, prev, used uint64
}

// peersPacket is a raw memberlist UDP packet (label "sluice", user message)
// carrying a counters packet from sender about its own counters, stamped
// at sentAt unless it is 0.
func peersPacket(sender string, sentAt uint64, cs ...peersCounter) []byte {
	fields := 4
	if sentAt != 0 {
		fields = 5
	}
	b := []byte{8} // memberlist's userMsg
	b = mp.AppendArrayHeader(b, fields)
	b = mp.AppendUint(b, 1)
	b = mp.AppendStr(b, sender)
	b = mp.AppendArrayHeader(b, 1)
	b = mp.AppendStr(b, sender)
	b = mp.AppendArrayHeader(b, len(cs))
	for _, c := range cs {
		b = mp.AppendArrayHeader(b, 6)
		b = mp.AppendUint(b, 0)
		b = mp.AppendStr(b, "r")
		b = mp.AppendStr(b, c.key)
		b = mp.AppendUint(b, c.epoch)
		b = mp.AppendUint(b, c.prev)
		b = mp.AppendUint(b, c.used)
	}
	if sentAt != 0 {
		b = mp.AppendUint(b, sentAt)
	}
	p, err := memberlist.AddLabelHeaderToPacket(b, gossip.DefaultLabel)
	if err != nil {
		panic(err)
	}
	return p
}

// peersKey reads one key's view from a daemon's admin endpoint.
func peersKey(t *testing.T, admin, key string) (balance float64, held bool) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/v1/keys/r/" + key)
	if err != nil {
		return math.NaN(), false
	}
	defer resp.Body.Close()
	var v struct {
		Balance float64 `json:"balance"`
		Held    bool    `json:"held"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return math.NaN(), false
	}
	return v.Balance, v.Held
}

// peersMetric returns the /metrics text of a daemon.
func peersMetric(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// The attacks of issue 15 on a real daemon whose gossip is plain: raw UDP
// packets from a host that is no member. One packet naming an absurd
// counter costs the key one allowance (it put the key 13 years into debt
// before); an unstamped packet, one stamped two minutes ago (a capture
// replayed after the seen table's prune, or to a restarted daemon) and one
// naming an epoch far ahead of the daemon's clock charge nothing. Each
// "charges nothing" is proven by a later good packet being charged first
// (one goroutine handles the packets in order).
func TestPeersForgedAndReplayedPacketsAreBounded(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	rules := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte(peersRules), 0o600)
	port, admin := freePort(t), "127.0.0.1:"+freePort(t)
	p := startDaemon(t, "--socket", filepath.Join(dir, "d.sock"), "--rules", rules, "--bind", "127.0.0.1:"+port,
		"--admin-addr", admin, "--node-name", "honest")
	eventually(t, "the daemon serves its admin endpoint", func() bool {
		b, _ := peersKey(t, admin, "probe")
		return b == 100
	})
	conn, err := net.Dial("udp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	now := uint64(time.Now().UnixNano())
	send := func(pkt []byte) {
		if _, err := conn.Write(pkt); err != nil {
			t.Fatal(err)
		}
	}
	// The 13-years packet, now stamped as a new member would send it.
	absurd := peersPacket("x", now, peersCounter{"victim", now - 1, 0, math.MaxUint64})
	t.Logf("absurd packet: %d bytes", len(absurd))
	send(absurd)
	var balance float64
	defer func() {
		if t.Failed() {
			t.Logf("daemon stderr:\n%s\n%s", p.stderr.String(), grepLines(peersMetric(t, admin), "sluice_gossip"))
		}
	}()
	eventually(t, "the absurd counter is applied", func() bool {
		var held bool
		balance, held = peersKey(t, admin, "victim")
		return held
	})
	if balance < 100-111-1 {
		t.Fatalf("one absurd packet left the victim at %.1f, more than one allowance (111) below its 100", balance)
	}
	t.Logf("victim balance after the absurd packet: %.1f (100 untouched; one allowance is 111)", balance)

	refused := []struct {
		name string
		pkt  []byte
	}{
		{"unstamped", peersPacket("x", 0, peersCounter{"unstamped", now - 1, 0, 50})},
		{"stamped two minutes ago", peersPacket("x", now-uint64(2*time.Minute), peersCounter{"replayed", now - 1, 0, 50})},
		{"epoch two hours ahead", peersPacket("x", now, peersCounter{"ahead", now + uint64(2*time.Hour), 0, 50})},
	}
	for i, r := range refused {
		send(r.pkt)
		marker := fmt.Sprintf("marker-%d", i)
		send(peersPacket("x", uint64(time.Now().UnixNano()), peersCounter{marker, now - 1, 0, 1}))
		eventually(t, "the marker after the "+r.name+" packet is applied", func() bool { _, held := peersKey(t, admin, marker); return held })
		for _, key := range []string{"unstamped", "replayed", "ahead"} {
			if _, held := peersKey(t, admin, key); held {
				t.Fatalf("the %s packet charged key %q", r.name, key)
			}
		}
	}
	m := peersMetric(t, admin)
	if !strings.Contains(m, `sluice_gossip_suspicious_reports_total{origin="(not a member)"}`) {
		t.Fatalf("no suspicious reports counted under the non-member origin:\n%s", grepLines(m, "suspicious"))
	}
	t.Logf("%s", grepLines(m, "sluice_gossip_suspicious|sluice_gossip_bad_packets"))
	if strings.Contains(p.stderr.String(), "panic") {
		t.Fatalf("daemon panicked:\n%s", p.stderr.String())
	}
}

// grepLines returns the lines of s containing any of the |-separated words.
func grepLines(s, words string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range strings.Split(words, "|") {
			if strings.Contains(l, w) && !strings.HasPrefix(l, "#") {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// rogueLedger is the ledger of a keyed rogue member: every round it
// reports another trillion tokens admitted for each victim key, and at
// push-pull it claims the victims a trillion tokens in debt.
type rogueLedger struct {
	mu      sync.Mutex
	victims []string
	used    uint64
	epoch   uint64
	debt    float64 // the balance claimed at push-pull
}

func (l *rogueLedger) Drain(fn func(gossip.Counter)) {
	l.mu.Lock()
	prev := l.used
	l.used += 1e12
	used := l.used
	l.mu.Unlock()
	for _, v := range l.victims {
		fn(gossip.Counter{Rule: "r", Key: v, Epoch: l.epoch, Prev: prev, Used: used})
	}
}
func (l *rogueLedger) Charge(string, string, uint64, uint64) {}
func (l *rogueLedger) Snapshot(fn func(gossip.Counter, float64) bool) {
	l.mu.Lock()
	used := l.used
	l.mu.Unlock()
	for _, v := range l.victims {
		if !fn(gossip.Counter{Rule: "r", Key: v, Epoch: l.epoch, Prev: used, Used: used}, l.debt) {
			return
		}
	}
}
func (l *rogueLedger) Adopt(string, string, uint64, float64) bool { return false }

// A keyed rogue member drains victim keys: it joins a cluster of two real
// daemons with the gossip key and, for 3 seconds, reports a trillion
// tokens per victim per 20 ms round, and at push-pull claims the victims
// in debt: a trillion tokens, or 99 (within one burst). A push-pull
// balance is taken no lower than the counters it lists could have
// admitted, paid from the same allowance as the rogue's packets, so on
// both honest daemons every victim's balance stays within one allowance
// of the truth (100: nobody consumed anything) in both cases: burst 100 +
// 1 s of rate + 1 = 111 tokens, and the rate the rogue could really admit
// is offset by the bucket's refill. Each victim was trillions in debt
// before issue 15; the claimed 99 of debt took a victim to −120 before
// push-pull adoption was bounded by its counters.
func TestPeersKeyedRogueCannotDrainKeys(t *testing.T) {
	tests := []struct {
		name  string
		debt  float64
		floor float64
	}{
		// One allowance below the truth, and 0.3 s of rate for the two clocks
		// the rogue's allowance and the victim's bucket fill on.
		{"absurd debt", -1e12, 100 - 111 - 3},
		{"debt within a burst", -99, 100 - 111 - 3}, // the same: the claim is paid from that allowance
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { peersRogue(t, tt.debt, tt.floor) })
	}
}

func peersRogue(t *testing.T, debt, floor float64) {
	dir := tempDir(t)
	rules := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte(peersRules), 0o600)
	key := "c2x1aWNlLXRlc3Qta2V5LQ==" // 16 bytes
	portA, portB := freePort(t), freePort(t)
	adminA, adminB := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	keyFile := secureKeyFile(t, dir, key) // never on the command line
	pa := startDaemon(t, "--socket", filepath.Join(dir, "a.sock"), "--rules", rules, "--bind", "127.0.0.1:"+portA,
		"--admin-addr", adminA, "--gossip-key-file", keyFile, "--node-name", "a", "--gossip-interval", "20ms")
	startDaemon(t, "--socket", filepath.Join(dir, "b.sock"), "--rules", rules, "--bind", "127.0.0.1:"+portB,
		"--admin-addr", adminB, "--gossip-key-file", keyFile, "--node-name", "b", "--gossip-interval", "20ms", "--join", "127.0.0.1:"+portA)
	eventually(t, "b joins a", func() bool { return strings.Contains(pa.stderr.String(), "member joined: name=b") })

	secret, _ := base64.StdEncoding.DecodeString(key)
	victims := []string{"victim-1", "victim-2", "victim-3"}
	rogue, err := gossip.New(gossip.Config{NodeName: "rogue", BindAddr: "127.0.0.1", BindPort: 0, SecretKey: secret,
		GossipInterval: 20 * time.Millisecond, PushPullInterval: 200 * time.Millisecond, Join: []string{"127.0.0.1:" + portA}},
		&rogueLedger{victims: victims, epoch: uint64(time.Now().UnixNano()), debt: debt})
	if err != nil {
		t.Fatal(err)
	}
	if err := rogue.Start(); err != nil {
		t.Fatal(err)
	}
	defer rogue.Shutdown()
	eventually(t, "the rogue joins", func() bool { return strings.Contains(pa.stderr.String(), "member joined: name=rogue") })
	start := time.Now()
	eventually(t, "the rogue's reports reach both daemons", func() bool {
		_, ha := peersKey(t, adminA, victims[0])
		_, hb := peersKey(t, adminB, victims[0])
		return ha && hb
	})
	// Three seconds of the attack (push-pull every 200 ms), sampled every 50 ms.
	worst := 100.0
	pace := time.NewTicker(50 * time.Millisecond)
	defer pace.Stop()
	for time.Since(start) < 3*time.Second {
		for _, admin := range []string{adminA, adminB} {
			for _, v := range victims {
				b, _ := peersKey(t, admin, v)
				if math.IsNaN(b) {
					continue
				}
				worst = min(worst, b)
				if b < floor {
					t.Fatalf("%s: victim %s at %.1f after %s of the attack, below the bound %.0f (truth: 100)",
						admin, v, b, time.Since(start).Round(time.Millisecond), floor)
				}
			}
		}
		<-pace.C // sampling period, not waiting for an outcome
	}
	t.Logf("claimed debt %g: lowest victim balance over 3s of a keyed rogue's attack: %.1f (truth: 100; bound: %.0f)", debt, worst, floor)
	m := peersMetric(t, adminA)
	if !strings.Contains(m, `sluice_gossip_suspicious_reports_total{origin="rogue"}`) {
		t.Fatalf("the rogue is not named in the suspicious reports:\n%s", grepLines(m, "suspicious"))
	}
	t.Logf("%s", grepLines(m, "sluice_gossip_suspicious"))
}
