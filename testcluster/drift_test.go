package testcluster

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// pollFor checks cond every few milliseconds until it holds, failing the
// test after timeout with what() as the reason.
func pollFor(t *testing.T, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	if err := poll(timeout, cond, what); err != nil {
		t.Fatal(err)
	}
}

// One node reloading other rules is flagged as drift by every node, in
// /v1/members' view, and the flag clears when the rules agree again.
func TestRulesDriftIsFlaggedAcrossTheCluster(t *testing.T) {
	c := start(t, Options{N: 3, Rules: fourPerSecond, GossipInterval: 20 * time.Millisecond, PushPullInterval: 200 * time.Millisecond})
	if err := c.WaitMembers(3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	views := func() []adminapi.MembersView {
		out := make([]adminapi.MembersView, 3)
		for i := range 3 {
			out[i] = c.Node(i).Daemon().MembersView()
		}
		return out
	}
	drifting := func(v adminapi.MembersView) []string {
		var names []string
		for _, m := range v.Members {
			if m.Drift {
				names = append(names, m.Name)
			}
		}
		return names
	}
	agreed := func() bool {
		for _, v := range views() {
			if v.Drift || len(v.Members) != 3 {
				return false
			}
		}
		return true
	}
	pollFor(t, 20*time.Second, agreed, func() string { return fmt.Sprintf("nodes agree at start: %+v", views()) })

	if err := c.SetRules(2, "rules:\n  four:\n    rate: 8/1s\n"); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 20*time.Second, func() bool {
		v := views()
		// Nodes 0 and 1 see node 2 differ; node 2 sees both others differ.
		return fmt.Sprint(drifting(v[0])) == "[node-2]" && fmt.Sprint(drifting(v[1])) == "[node-2]" &&
			fmt.Sprint(drifting(v[2])) == "[node-0 node-1]" && v[0].Drift && v[2].Drift
	}, func() string { return fmt.Sprintf("drift flagged: %+v", views()) })

	if err := c.SetRules(2, fourPerSecond); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 20*time.Second, agreed, func() string { return fmt.Sprintf("drift cleared: %+v", views()) })
}

// memberlist's census of member states reaches the daemon: all alive, then
// a crashed node counted suspect or dead, and listed as gone.
func TestMemberCensusSeesACrash(t *testing.T) {
	c := start(t, Options{N: 3, Rules: fourPerSecond, GossipInterval: 20 * time.Millisecond, PushPullInterval: 200 * time.Millisecond})
	if err := c.WaitMembers(3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	census := func() string { return fmt.Sprintf("%+v", c.Node(0).Daemon().MembersView()) }
	pollFor(t, 20*time.Second, func() bool {
		s, ok := c.Node(0).Daemon().Syncer().MemberStates()
		return ok && s.Alive == 3 && s.Suspect == 0
	}, census)
	if err := c.Crash(2); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 30*time.Second, func() bool {
		s, _ := c.Node(0).Daemon().Syncer().MemberStates()
		v := c.Node(0).Daemon().MembersView()
		gone := false
		for _, m := range v.Members {
			gone = gone || (m.Name == "node-2" && m.State == "gone")
		}
		return s.Suspect+s.Dead >= 1 && s.Alive == 2 && gone
	}, census)
}

// Gossip keys rotate while the cluster runs: add the new key everywhere,
// make it primary everywhere, drop the old one everywhere. After every step
// the three nodes are still members and an admission on one still reaches
// the others; at the end a node holding only the old key can no longer talk
// to them.
func TestGossipKeyRotationWithoutDowntime(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	logs := &syncBuffer{}
	c := start(t, Options{N: 3, Rules: "rules:\n  slow:\n    rate: 4/1h\n", GossipInterval: 10 * time.Millisecond, PushPullInterval: 200 * time.Millisecond,
		Keyring: [][]byte{oldKey}, Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace})})
	if err := c.WaitMembers(3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	gossipFlows := func(step string, key string) {
		t.Helper()
		if d := c.Allow(0, "slow", key, 1); !d.Allowed || d.FailedOpen {
			t.Fatalf("%s: node 0 did not admit: %+v", step, d)
		}
		if err := c.WaitBalances("slow", key, 20*time.Second, func(_ int, b float64) bool { return b < 3.01 }); err != nil {
			t.Fatalf("%s: the admission did not reach every node: %v", step, err)
		}
		for i := range 3 {
			if n := c.Node(i).Daemon().Syncer().NumAlive(); n != 3 {
				t.Fatalf("%s: node %d sees %d members", step, i, n)
			}
		}
	}
	gossipFlows("before", "k0")
	for step, keys := range [][][]byte{{oldKey, newKey}, {newKey, oldKey}, {newKey}} {
		for i := range 3 { // one node at a time, as a rollout would
			if err := c.SetKeyring(i, keys); err != nil {
				t.Fatalf("step %d, node %d: %v", step, i, err)
			}
		}
		gossipFlows(fmt.Sprint("after step ", step+1), fmt.Sprint("k", step+1))
	}
	for i := range 3 {
		if got := c.Node(i).Daemon().Syncer().Keys(); len(got) != 1 || !bytes.Equal(got[0], newKey) {
			t.Fatalf("node %d keyring after rotation: %d keys", i, len(got))
		}
	}
	for _, k := range [][]byte{oldKey, newKey} {
		for _, secret := range []string{base64.StdEncoding.EncodeToString(k), string(k), fmt.Sprintf("%x", k), fmt.Sprint(k)} {
			if strings.Contains(logs.String(), secret) {
				t.Fatalf("a gossip key appears in the logs")
			}
		}
	}
	if !strings.Contains(logs.String(), "gossip keyring reloaded") {
		t.Fatal("the keyring reloads were not logged")
	}
	stale := start(t, Options{N: 1, Rules: "rules:\n  slow:\n    rate: 4/1h\n", Keyring: [][]byte{oldKey}})
	if n, err := stale.Node(0).Daemon().Syncer().Join([]string{c.Node(0).Addr()}); n != 0 || err == nil {
		t.Fatalf("a node with only the retired key joined: %d answered, err %v", n, err)
	}
}

// syncBuffer is a bytes.Buffer several goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
