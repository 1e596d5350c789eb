package sim

import (
	"strings"
	"testing"
	"time"
)

// A configuration that cannot run as asked is refused with what is wrong,
// before anything runs, rather than run as something else.
func TestNewRefusesABadConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		want string // in the error
	}{
		{"one node", Config{Nodes: 1}, "at least 2 nodes"},
		{"too many nodes", Config{Nodes: 70000}, "at most 65535"},
		{"unknown gossip mode", Config{Nodes: 3, GossipMode: "mesh"}, "gossip mode"},
		{"unknown scenario", Config{Nodes: 3, Scenario: "cold"}, "unknown scenario"},
		{"loss of 1", Config{Nodes: 3, Loss: 1}, "loss"},
		{"negative loss", Config{Nodes: 3, Loss: -0.1}, "loss"},
		{"silence ending before it starts", Config{Nodes: 3, SilenceOwner: Partition{From: 3 * time.Second, To: time.Second}}, "owner silence"},
		{"silence from a negative time", Config{Nodes: 3, SilenceOwner: Partition{From: -time.Second, To: time.Second}}, "owner silence"},
		{"partition without a split", Config{Nodes: 3, Partition: Partition{From: time.Second, To: 2 * time.Second}}, "split 0 of 3"},
		{"partition leaving one side empty", Config{Nodes: 3, Partition: Partition{From: time.Second, To: 2 * time.Second, Split: 3}}, "split 3 of 3"},
		{"owner kill at a negative time", Config{Nodes: 3, KillOwnerAt: -time.Second}, "owner kill"},
		{"replica kill at a negative time", Config{Nodes: 3, KillReplicaAt: -time.Second}, "replica kill"},
		{"replica kill after the run", Config{Nodes: 3, Duration: 5 * time.Second, KillReplicaAt: 5 * time.Second}, "replica kill"},
		{"third kill at a negative time", Config{Nodes: 3, KillThirdAt: -time.Second}, "third kill"},
		{"third kill after the run", Config{Nodes: 3, Duration: 5 * time.Second, KillThirdAt: 6 * time.Second}, "third kill"},
		{"hot key too long", Config{Nodes: 3, HotKey: strings.Repeat("k", maxHotKey+1)}, "hot key of"},
		{"hot key named and searched", Config{Nodes: 10, HotKey: "k", HotKeyThirdAggregates: true}, "not with a hot key named"},
		{"hot key searched on too few nodes", Config{Nodes: 7, HotKeyThirdAggregates: true}, "at least 8 nodes"},
		{"stall without a node", Config{Nodes: 3, Stall: Partition{From: 0, To: time.Second}}, "stall split 0 of 3"},
		{"stall of more nodes than the cluster's", Config{Nodes: 3, Stall: Partition{From: 0, To: time.Second, Split: 4}}, "stall split 4 of 3"},
		{"stall ending before it starts", Config{Nodes: 3, Stall: Partition{From: 2 * time.Second, To: time.Second, Split: 1}}, "stall from"},
		{"partition ending at its start", Config{Nodes: 3, Partition: Partition{From: time.Second, To: time.Second, Split: 1}}, "partition"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error naming %q", err, tt.want)
			}
		})
	}
	for _, ok := range []Config{
		{Nodes: 3},
		{Nodes: 3, SilenceOwner: Partition{From: time.Second, To: 2 * time.Second}},
		{Nodes: 3, Partition: Partition{From: 0, To: time.Second, Split: 1}},
		{Nodes: 3, KillOwnerAt: time.Second, KillReplicaAt: 2 * time.Second},
		{Nodes: 3, KillOwnerAt: time.Second, KillReplicaAt: 2 * time.Second, KillThirdAt: 3 * time.Second},
		{Nodes: 3, HotKey: "k"},
		{Nodes: 8, HotKeyThirdAggregates: true},
		{Nodes: 3, Stall: Partition{From: 0, To: time.Second, Split: 3}},
	} {
		if _, err := New(ok); err != nil {
			t.Errorf("New(%+v): %v, want it accepted", ok, err)
		}
	}
}
