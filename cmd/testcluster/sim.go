package main

import (
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/testcluster/sim"
)

// simCommand runs the simulator (testcluster/sim): thousands of nodes of
// the real gossip code and stores in this process on a virtual clock.
func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "simulate a cluster of the real gossip code on a virtual clock (deterministic with --seed)",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nodes", Value: 10, Usage: "cluster size"},
			&cli.Float64Flag{Name: "seconds", Value: 10, Usage: "simulated seconds of load"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random seed: the same seed repeats the run"},
			&cli.StringFlag{Name: "scenario", Value: "hot", Usage: "hot (every node on one key) or spread (--per-host requests/s per node over --keys keys)"},
			&cli.Float64Flag{Name: "rate", Value: 100, Usage: "the limit's rate per second"},
			&cli.Int64Flag{Name: "burst", Usage: "the limit's burst (0: the rate)"},
			&cli.Float64Flag{Name: "offered", Usage: "hot: requests per second offered by all nodes together (0: 5 × rate)"},
			&cli.Float64Flag{Name: "min-per-node", Usage: "hot: at least this many requests per second per node"},
			&cli.Float64Flag{Name: "per-host", Value: 50, Usage: "spread: requests per second per node"},
			&cli.IntFlag{Name: "keys", Usage: "spread: keys (0: one per node)"},
			&cli.DurationFlag{Name: "gossip-interval", Value: 20 * time.Millisecond, Usage: "gossip interval"},
			&cli.IntFlag{Name: "fanout-limit", Value: 64, Usage: "largest cluster gossiping to every member"},
			&cli.IntFlag{Name: "gossip-nodes", Value: 4, Usage: "peers per relayed round"},
			&cli.DurationFlag{Name: "push-pull-interval", Value: 10 * time.Second, Usage: "push-pull interval (memberlist stretches it above 32 members)"},
			&cli.Float64Flag{Name: "loss", Usage: "fraction of packets lost"},
			&cli.DurationFlag{Name: "latency", Value: 100 * time.Microsecond, Usage: "one-way latency, fixed part"},
			&cli.DurationFlag{Name: "jitter", Value: 100 * time.Microsecond, Usage: "mean exponential extra delay (reorders)"},
			&cli.Float64Flag{Name: "churn", Usage: "fraction of nodes replaced per minute"},
			&cli.DurationFlag{Name: "partition-from", Usage: "partition: start"},
			&cli.DurationFlag{Name: "partition-to", Usage: "partition: end (none unless after the start)"},
			&cli.IntFlag{Name: "partition-split", Usage: "partition: nodes below this index on one side"},
			&cli.BoolFlag{Name: "report", Usage: "regenerate docs/SCALING.md's measured tables (the runs of scripts/scaling.sh); --nodes etc. are ignored"},
			&cli.StringFlag{Name: "max-nodes", Value: "10000", Usage: "with --report: the largest cluster size to run"},
			&cli.StringFlag{Name: "doc", Value: "../../docs/SCALING.md", Usage: "with --report: the document to rewrite between its markers"},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("report") {
				return simReport(c)
			}
			cfg := sim.Config{
				Nodes: c.Int("nodes"), Duration: time.Duration(c.Float64("seconds") * float64(time.Second)), Seed: c.Uint64("seed"),
				Scenario: sim.Scenario(c.String("scenario")), Rate: c.Float64("rate"), Burst: c.Int64("burst"),
				Offered: c.Float64("offered"), MinPerNode: c.Float64("min-per-node"), PerHost: c.Float64("per-host"), Keys: c.Int("keys"),
				GossipInterval: c.Duration("gossip-interval"), FanoutLimit: c.Int("fanout-limit"), GossipNodes: c.Int("gossip-nodes"),
				PushPullInterval: c.Duration("push-pull-interval"), Loss: c.Float64("loss"), Latency: c.Duration("latency"),
				Jitter: c.Duration("jitter"), ChurnPerMinute: c.Float64("churn"),
				Partition: sim.Partition{From: c.Duration("partition-from"), To: c.Duration("partition-to"), Split: c.Int("partition-split")},
			}
			s, err := sim.New(cfg)
			if err != nil {
				return err
			}
			s.Run().Write(os.Stdout)
			return nil
		},
	}
}

func simReport(c *cli.Context) error {
	return fmt.Errorf("--report: not yet")
}
