package testcluster

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkGossipCostPerHost drives a fixed load per host (perHost
// requests a second on each node, on keys drawn at random from a shared
// set) and compares, in the same run, what each gossip mode costs a node:
// counter packets and bytes sent, bytes received, every UDP byte on the
// wire (memberlist's own included), and the busiest node's packets sent
// (in owner mode, the owner of a hot key). At a fixed load per host, owner
// mode's cost per node should not grow with N; direct fan-out's grows
// with N (every member hears every update), and so does relaying's (every
// member still hears every update, a few times). Direct fan-out is run up
// to 50 nodes only: beyond, its N² packets swamp this machine.
//
//	go test -run '^$' -bench GossipCostPerHost -benchtime 1x ./testcluster
func BenchmarkGossipCostPerHost(b *testing.B) {
	const perHost = 20
	dur := 5 * time.Second
	nodes := []int{10, 50, 100}
	if testing.Short() {
		dur, nodes = 3*time.Second, []int{10, 50}
	}
	for _, n := range nodes {
		for _, keys := range []int{1000, 1} {
			for _, mode := range []string{"direct", "relay", "owner"} {
				if mode == "direct" && n > 50 {
					continue
				}
				b.Run(fmt.Sprintf("nodes=%d/keys=%d/mode=%s", n, keys, mode), func(b *testing.B) {
					for b.Loop() {
						c, err := Start(Options{N: n, Rules: probeRules, GossipMode: mode})
						if err != nil {
							b.Fatal(err)
						}
						before := trafficOf(c)
						sent0 := perNodeSent(c)
						cpu0, t0 := cpuSeconds(), time.Now()
						stop := make(chan struct{})
						minAlive := make(chan int)
						go func() { minAlive <- watchMembers(c, stop) }()
						done := driveKeys(c, keys, perHost*n, dur)
						el := time.Since(t0).Seconds()
						d := trafficOf(c).minus(before)
						sent1 := perNodeSent(c)
						cpu := cpuSeconds() - cpu0
						close(stop)
						alive := <-minAlive
						c.Close()
						busiest := uint64(0)
						for i := range sent1 {
							busiest = max(busiest, sent1[i]-sent0[i])
						}
						perNodeSec := func(v uint64) float64 { return float64(v) / el / float64(n) }
						b.ReportMetric(perNodeSec(d.packets), "packets/s/node")
						b.ReportMetric(float64(busiest)/el, "busiest-packets/s")
						b.ReportMetric(perNodeSec(d.bytes), "bytes/s/node")
						// Normalised by the requests driven: on a loaded machine the
						// driver reaches different rates in different modes.
						b.ReportMetric(float64(d.packets)/float64(max(1, done)), "packets/req")
						b.ReportMetric(float64(d.bytes)/float64(max(1, done)), "bytes/req")
						b.ReportMetric(perNodeSec(d.recvBytes), "recv-bytes/s/node")
						b.ReportMetric(perNodeSec(d.wireBytes), "wire-bytes/s/node")
						b.ReportMetric(100*cpu/el/float64(n), "cpu%/node")
						b.ReportMetric(float64(done)/el/float64(n), "achieved-req/s/node")
						b.ReportMetric(float64(alive), "min-alive")
					}
				})
			}
		}
	}
}

// perNodeSent is each node's counter packets sent so far.
func perNodeSent(c *Cluster) []uint64 {
	out := make([]uint64, len(c.nodes))
	for i, n := range c.nodes {
		if d := n.Daemon(); d != nil {
			out[i] = d.Syncer().Stats().PacketsSent.Load()
		}
	}
	return out
}
