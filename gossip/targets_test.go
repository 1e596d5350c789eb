package gossip

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

// A round's targets: with fan-out every member but this node, in the order
// they joined; relayed, GossipNodes distinct members, never this node, and
// over many rounds every member; members that left are never picked.
func TestRoundTargets(t *testing.T) {
	s := &Syncer{cfg: Config{GossipNodes: 4}, self: "n0", peers: map[string]memberlist.Node{}, failed: map[string]failedMember{},
		log: hclog.NewNullLogger(), rnd: rand.New(rand.NewPCG(1, 2)), simulated: true}
	ev := (*events)(s)
	for i := range 50 {
		ev.NotifyJoin(&memberlist.Node{Name: fmt.Sprint("n", i)})
	}
	for i := 40; i < 50; i++ {
		ev.NotifyLeave(&memberlist.Node{Name: fmt.Sprint("n", i)})
	}
	names := func(ns []*memberlist.Node) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Name)
		}
		return out
	}
	all := names(s.targetsLocked(true))
	if len(all) != 39 || slices.Contains(all, "n0") || all[0] != "n1" {
		t.Fatalf("fan-out targets %v: want the 39 live members but this one, in join order", all)
	}
	hit := map[string]bool{}
	for range 500 {
		got := names(s.targetsLocked(false))
		if len(got) != 4 {
			t.Fatalf("relayed targets %v: want 4", got)
		}
		for i, name := range got {
			if name == "n0" || slices.Contains(got[i+1:], name) {
				t.Fatalf("relayed targets %v: this node, or one twice", got)
			}
			var n int
			fmt.Sscan(name[1:], &n)
			if n >= 40 {
				t.Fatalf("relayed targets %v: a member that left", got)
			}
			hit[name] = true
		}
	}
	if len(hit) != 39 {
		t.Fatalf("500 relayed rounds reached %d of 39 members", len(hit))
	}
}
