package sim

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A replayed node is the node of the run: given the same inputs at the
// same virtual times in the run's map order, its syncer sends exactly the
// packets it sent in the run, in owner mode, direct fan-out and relaying,
// through loss, churn (a recorded node replaced midway) and a forming
// membership; in production's map order too, but when relaying (where the
// order decides which counters share a packet). The report carries the
// replays' CPU.
func TestIsolatedReplaySendsWhatTheRunSent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		heavy    bool
		mapOrder bool // the same packets in production's map order too
	}{
		{"owner, spread, shares", Config{Nodes: 80, GossipMode: "owner", Scenario: Spread, FirstShare: true}, false, true},
		{"owner, hot, loss, churn", Config{Nodes: 60, GossipMode: "owner", MinPerNode: 5, Loss: 0.1, ChurnPerMinute: 20}, false, true},
		{"direct, hot, forming", Config{Nodes: 12, JoinSpread: 300 * time.Millisecond, Loss: 0.05}, false, true},
		{"relayed, spread, churn", Config{Nodes: 24, FanoutLimit: 8, GossipMode: "relay", Scenario: Spread, ChurnPerMinute: 20}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.heavy {
				skipHeavyUnderRace(t)
			}
			cfg := tc.cfg
			cfg.Duration, cfg.Seed = 2*time.Second, 3
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := s.Run()
			if r.IsolatedCPU <= 0 || r.EstimatedCPU <= r.IsolatedCPU {
				t.Fatalf("isolated CPU %v, estimated %v: want both measured, the estimate above", r.IsolatedCPU, r.EstimatedCPU)
			}
			if len(s.traces) != isolatedNodes {
				t.Fatalf("%d nodes recorded, want %d", len(s.traces), isolatedNodes)
			}
			ran := map[int]uint64{} // the first generation of each slot
			for _, n := range append(append([]*node(nil), s.m.retired...), s.nodes...) {
				if _, ok := ran[n.i]; !ok && n.gen == 0 {
					ran[n.i] = n.pktSent
				}
			}
			for _, tr := range s.traces {
				if got := s.replay(tr, false).sent; got != ran[tr.slot] {
					t.Errorf("slot %d: the replay sent %d packets, the run %d", tr.slot, got, ran[tr.slot])
				}
				if got := s.replay(tr, true).sent; tc.mapOrder && got != ran[tr.slot] {
					t.Errorf("slot %d: the replay in map order sent %d packets, the run %d", tr.slot, got, ran[tr.slot])
				}
			}
		})
	}
}

// Without recorded nodes (Config.Isolated negative) the estimate falls
// back on the syncer's CPU timed in the run.
func TestNoIsolationEstimatesFromTheRun(t *testing.T) {
	s, err := New(Config{Nodes: 5, Duration: time.Second, Seed: 1, Isolated: -1})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Run()
	if len(s.traces) != 0 || r.IsolatedCPU != 0 || r.EstimatedCPU < r.SyncerCPU || r.EstimatedCPU == 0 {
		t.Fatalf("%d traces, isolated %v, syncer %v, estimated %v", len(s.traces), r.IsolatedCPU, r.SyncerCPU, r.EstimatedCPU)
	}
}

// BenchmarkIsolatedSyncer measures one syncer's CPU per node at a fixed
// per-host load (SCALING.md's spread table: 50 requests/s per node over N
// keys, owner mode, sluiced's first-share settings) as the cluster grows:
// each size is simulated once (not timed), then every iteration replays the
// recorded nodes of every size in turn, each into a syncer of its own
// (isolate.go), so the sizes share the machine's state and are compared in
// the same run. Reported per size: %core/node (the syncer's CPU per
// simulated second, per node), B/pkt (allocated per packet received),
// pkt/s/node (received), µs/pkt (the syncer's CPU per packet received),
// and x<first size> (the CPU against the first size's; x<first size>/pkt:
// per packet received). Sizes: SLUICE_SIM_BENCH_NODES (default
// 50,300,1000), simulated seconds SLUICE_SIM_BENCH_SECONDS (default 2, as
// the spread table's runs from 100 nodes). SLUICE_SIM_BENCH_RUNS names a
// directory where the runs are saved and, when saved before, loaded from
// instead of simulated (isolatesave_test.go): 10,000 nodes take about half
// an hour to simulate here, their replays seconds.
//
//	go test -run '^$' -bench BenchmarkIsolatedSyncer -benchtime 20x ./testcluster/sim
//	SLUICE_SIM_BENCH_RUNS=/tmp/runs SLUICE_SIM_BENCH_NODES=50,10000 go test -run '^$' -bench BenchmarkIsolatedSyncer -benchtime 10x -timeout 0 ./testcluster/sim
func BenchmarkIsolatedSyncer(b *testing.B) {
	sizes := []int{50, 300, 1000}
	if v := os.Getenv("SLUICE_SIM_BENCH_NODES"); v != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				b.Fatalf("SLUICE_SIM_BENCH_NODES: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	secs := 2.0
	if v := os.Getenv("SLUICE_SIM_BENCH_SECONDS"); v != "" {
		var err error
		if secs, err = strconv.ParseFloat(v, 64); err != nil {
			b.Fatalf("SLUICE_SIM_BENCH_SECONDS: %v", err)
		}
	}
	runtime.LockOSThread() // threadCPU is this thread's
	defer runtime.UnlockOSThread()
	type size struct {
		s                *Sim
		cpu, alloc, pkts float64 // summed over the iterations
	}
	runs := make([]*size, len(sizes))
	for i, n := range sizes {
		s := recordedRun(b, os.Getenv("SLUICE_SIM_BENCH_RUNS"), Config{Nodes: n, Duration: time.Duration(secs * float64(time.Second)), Seed: 1, Scenario: Spread,
			GossipMode: "owner", FirstShare: true})
		runs[i] = &size{s: s}
	}
	for b.Loop() {
		for _, z := range runs {
			for _, tr := range z.s.traces {
				p := z.s.replay(tr, true)
				z.cpu += p.cpu.Seconds() / secs
				z.alloc += float64(p.alloc)
				for _, e := range tr.events {
					if e.kind == trPacket {
						z.pkts++
					}
				}
			}
		}
	}
	base, basePkt := 0.0, 0.0
	for i, z := range runs {
		k := float64(b.N * len(z.s.traces))
		cpu := z.cpu / k
		perPkt := z.cpu * secs / max(z.pkts, 1) // CPU seconds per packet received
		if i == 0 {
			base, basePkt = cpu, perPkt
		}
		b.ReportMetric(100*cpu, fmt.Sprintf("%%core/node@%d", sizes[i]))
		b.ReportMetric(z.alloc/max(z.pkts, 1), fmt.Sprintf("B/pkt@%d", sizes[i]))
		b.ReportMetric(z.pkts/k/secs, fmt.Sprintf("pkt/s/node@%d", sizes[i]))
		b.ReportMetric(perPkt*1e6, fmt.Sprintf("µs/pkt@%d", sizes[i]))
		if i > 0 && base > 0 {
			b.ReportMetric(cpu/base, fmt.Sprintf("x%d@%d", sizes[0], sizes[i]))
			b.ReportMetric(perPkt/basePkt, fmt.Sprintf("x%d/pkt@%d", sizes[0], sizes[i]))
		}
	}
}
