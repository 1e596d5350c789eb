package sim

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

func TestDbgFair(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DBG_NODES"))
	if n == 0 {
		t.Skip()
	}
	s, _ := New(Config{Nodes: n, Duration: 10 * time.Second, Seed: 1, GossipMode: "owner", FirstShare: true})
	r := s.Run()
	r.Write(os.Stdout)
	owner, _ := s.nodes[0].syncer.OwnerOf("hot", "hot-key")
	for _, nd := range s.nodes {
		fmt.Println(nd.name, nd.name == owner, nd.admitted, nd.requests)
	}
}
