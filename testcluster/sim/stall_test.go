package sim

import (
	"testing"
	"time"
)

// A stalled node (Config.Stall) does nothing while it stalls: no request
// of its load is decided, no round sent; it runs on when the stall ends.
// The others are not held up.
func TestStalledNodesWaitForTheStallsEnd(t *testing.T) {
	const nodes, stalled = 10, 2
	for _, tt := range []struct {
		name  string
		stall Partition
		// whether the stalled nodes make requests in the run's 2 s
		runAfter bool
	}{
		{"stalled past the run's end", Partition{From: 0, To: 3 * time.Second, Split: stalled}, false},
		{"stalled for the first second", Partition{From: 0, To: time.Second, Split: stalled}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Nodes: nodes, Duration: 2 * time.Second, Seed: 1, GossipMode: "direct", Stall: tt.stall})
			if err != nil {
				t.Fatal(err)
			}
			s.Run()
			least := s.nodes[stalled].requests
			for _, n := range s.nodes[stalled:] {
				least = min(least, n.requests)
			}
			if least == 0 {
				t.Fatalf("a node that did not stall made no request")
			}
			for _, n := range s.nodes[:stalled] {
				switch {
				case !tt.runAfter && (n.requests != 0 || n.pktSent != 0):
					t.Errorf("node %d, stalled all run: %d requests, %d packets sent, want none", n.i, n.requests, n.pktSent)
				case tt.runAfter && (n.requests == 0 || n.requests >= least):
					t.Errorf("node %d, stalled half the run: %d requests, want some, fewer than the others' %d", n.i, n.requests, least)
				}
			}
		})
	}
}
