package testcluster

import (
	"fmt"
	"testing"
	"time"

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
