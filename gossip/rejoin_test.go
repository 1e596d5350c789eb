package gossip

import (
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestResolvePeer(t *testing.T) {
	s := &Syncer{log: hclog.NewNullLogger()}
	for _, tt := range []struct {
		peer string
		want []string
	}{
		{"10.0.0.7:7000", []string{"10.0.0.7:7000"}},
		{"10.0.0.7", []string{"10.0.0.7:7946"}},
		{"[fd00::1]:7000", []string{"[fd00::1]:7000"}},
		{"localhost:7000", []string{"127.0.0.1:7000"}},
		{"no-such-name.invalid:7000", nil},
	} {
		got := s.resolvePeer(tt.peer, "7946")
		if tt.peer == "localhost:7000" {
			got = slices.DeleteFunc(got, func(a string) bool { return a == "[::1]:7000" })
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("resolvePeer(%q) = %q, want %q", tt.peer, got, tt.want)
		}
	}
}

// An address in the join list that accepts a connection and never answers
// (a pod gone, its address still listed) holds up the first join for
// memberlist's TCP timeout (10 s), but not the rejoin loop's: the member
// listed after it is joined at once.
func TestRejoinIsNotHeldUpByAnAddressThatDoesNotAnswer(t *testing.T) {
	a := newTestSyncer(t, "a", nil, newMemLedger())
	stall, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := stall.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	b, err := New(Config{
		NodeName: "b", BindAddr: "127.0.0.1", GossipInterval: 5 * time.Millisecond, Label: "test",
		Join: []string{stall.Addr().String(), a.Addr()}, RejoinInterval: 50 * time.Millisecond,
	}, newMemLedger())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown() })
	t.Cleanup(func() { // first: the stalled joins fail, then b shuts down
		stall.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	start := time.Now()
	deadline := time.Now().Add(8 * time.Second) // under memberlist's TCP timeout (10 s), for a loaded machine
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for b.NumAlive() != 2 || a.NumAlive() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("b has not joined a %s after starting: held up by the address that does not answer", time.Since(start).Round(time.Millisecond))
		}
		<-tick.C
	}
	t.Logf("b joined a %s after starting", time.Since(start).Round(time.Millisecond))
}
