package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/testcluster/sim"
)

// The simulator's traffic against BenchmarkGossipCost's, as recorded in
// docs/benchmarks/raw/cluster.txt: the same cluster-wide 2,000 requests/s
// spread evenly over the nodes, each on one of K hot keys under a limit
// nothing reaches, and the bytes and packets of counters each node sends.

// gossipCostCase is one recorded BenchmarkGossipCost result.
type gossipCostCase struct {
	name                string
	nodes, keys         int
	rate                float64
	interval            time.Duration
	relay               bool
	bytesPerS, pktsPerS float64
}

// readGossipCost parses the recorded results in path.
func readGossipCost(path string) ([]gossipCostCase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the recorded gossip cost: %w", err)
	}
	defer f.Close()
	var out []gossipCostCase
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || !strings.HasPrefix(fields[0], "BenchmarkGossipCost/") {
			continue
		}
		c := gossipCostCase{name: strings.TrimSuffix(strings.TrimPrefix(fields[0], "BenchmarkGossipCost/"), "-2")}
		for _, part := range strings.Split(c.name, "/") {
			k, v, _ := strings.Cut(part, "=")
			switch k {
			case "nodes":
				c.nodes, _ = strconv.Atoi(v)
			case "hotkeys":
				c.keys, _ = strconv.Atoi(v)
			case "rate":
				c.rate, _ = strconv.ParseFloat(v, 64)
			case "interval":
				c.interval, _ = time.ParseDuration(v)
			case "mode":
				c.relay = v == "relay"
			}
		}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			switch fields[i+1] {
			case "bytes/s/node":
				c.bytesPerS = v
			case "packets/s/node":
				c.pktsPerS = v
			}
		}
		if c.keys > 0 && c.nodes > 0 {
			out = append(out, c)
		}
	}
	return out, sc.Err()
}

// trafficTable simulates each recorded case and tabulates both.
func trafficTable(path string) (string, error) {
	cases, err := readGossipCost(path)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| case | recorded: bytes/s sent per node | simulated | ratio | recorded: packets/s sent per node | simulated | ratio |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, c := range cases {
		cfg := sim.Config{Nodes: c.nodes, Duration: 5 * time.Second, Seed: 1, Scenario: sim.Spread, PerHost: c.rate / float64(c.nodes),
			Keys: c.keys, Rate: 1_000_000, GossipInterval: c.interval}
		if c.relay {
			cfg.GossipMode = "relay" // FanoutLimit 1 alone is owner mode since owner mode came (auto)
		}
		s, err := sim.New(cfg)
		if err != nil {
			return "", err
		}
		r := s.Run()
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |\n", c.name, c.bytesPerS, r.PerNode.BytesSent,
			r.PerNode.BytesSent/c.bytesPerS, c.pktsPerS, r.PerNode.PacketsSent, r.PerNode.PacketsSent/c.pktsPerS)
	}
	return b.String(), nil
}
