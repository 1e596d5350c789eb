package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelabs/sluice/config"
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
			&cli.StringFlag{Name: "gossip-mode", Usage: "auto (default), direct, relay or owner"},
			&cli.IntFlag{Name: "aggregate-above", Usage: "owner mode: users of one key before they go through aggregators (default 64, as sluiced; -1: never)"},
			&cli.BoolFlag{Name: "first-share", Usage: "hold new buckets to burst/nodes for one propagation delay, keep the fair floor and, in owner mode, shares of the owner's view, as sluiced does"},
			&cli.StringFlag{Name: "first-contact", Value: "auto", Usage: "with --first-share: auto (burst / the crowd the owners said of the rule's keys at first contact, sluiced's default), token (at least one token per node at first contact) or share (burst / members rounded at random)"},
			&cli.DurationFlag{Name: "push-pull-interval", Value: 10 * time.Second, Usage: "push-pull interval (memberlist stretches it above 32 members)"},
			&cli.Float64Flag{Name: "loss", Usage: "fraction of packets lost"},
			&cli.DurationFlag{Name: "latency", Value: 100 * time.Microsecond, Usage: "one-way latency, fixed part"},
			&cli.DurationFlag{Name: "jitter", Value: 100 * time.Microsecond, Usage: "mean exponential extra delay (reorders)"},
			&cli.DurationFlag{Name: "join-spread", Usage: "the membership forms over this long at the start (0: formed before the load)"},
			&cli.DurationFlag{Name: "quiet", Usage: "the run's last part without load (gossip goes on): balances and charges settle before they are read"},
			&cli.IntFlag{Name: "isolated", Usage: "nodes whose inputs are replayed after the run into a syncer of their own, for the syncer's CPU in the estimate (0: 8; negative: none, the CPU timed in the run instead)"},
			&cli.Float64Flag{Name: "churn", Usage: "fraction of nodes replaced per minute"},
			&cli.DurationFlag{Name: "kill-owner-at", Usage: "crash the hot key's owner then (no replacement; 0: never)"},
			&cli.DurationFlag{Name: "kill-third-at", Usage: "crash the hot key's third member then (no replacement; 0: never): with --kill-owner-at and --kill-replica-at, the whole failover chain crashes before any is declared dead"},
			&cli.DurationFlag{Name: "kill-replica-at", Usage: "crash the hot key's replica then (no replacement; 0: never): with --kill-owner-at, both crash before either is declared dead"},
			&cli.StringFlag{Name: "hot-key", Usage: "hot: the key's name (default hot-key)"},
			&cli.BoolFlag{Name: "hot-key-third-aggregates", Usage: "hot: name the key the first hot-key-N whose third member on the ring (where counters go when its owner and replica are both silent) is one of its aggregators as older members name them; not with --hot-key"},
			&cli.DurationFlag{Name: "silence-owner-from", Usage: "the hot key's owner sends nothing (a stalled owner: it still hears) from then"},
			&cli.DurationFlag{Name: "silence-owner-to", Usage: "... until then (after the start; both unset: never)"},
			&cli.DurationFlag{Name: "stall-from", Usage: "nodes 0 to --stall-nodes−1 stall (a daemon starved of CPU: no round, requests and packets wait) from then"},
			&cli.DurationFlag{Name: "stall-to", Usage: "... until then (after the start; both unset: never)"},
			&cli.IntFlag{Name: "stall-nodes", Value: 1, Usage: "how many nodes stall"},
			&cli.DurationFlag{Name: "partition-from", Usage: "partition: start"},
			&cli.DurationFlag{Name: "partition-to", Usage: "partition: end (after the start; unset: no partition)"},
			&cli.IntFlag{Name: "partition-split", Usage: "partition: nodes below this index on one side (1 to nodes-1)"},
			&cli.BoolFlag{Name: "report", Usage: "regenerate docs/SCALING.md's simulated tables and its goals at a glance, both designs as sluiced runs them, N = 3 to --max-nodes (scripts/scaling.sh); --nodes etc. are ignored"},
			&cli.BoolFlag{Name: "validate", Usage: "run the simulator against real sluiced processes (3, 10, 50) and rewrite docs/SCALING.md's validation table"},
			&cli.StringFlag{Name: "recorded", Value: "../../docs/benchmarks/raw/cluster.txt", Usage: "with --validate: BenchmarkGossipCost's recorded results, to compare traffic with"},
			&cli.IntSliceFlag{Name: "validate-nodes", Usage: "with --validate: the cluster sizes (default 3, 10, 50)"},
			&cli.BoolFlag{Name: "traffic-only", Usage: "with --validate: only the traffic comparison (no processes)"},
			&cli.StringFlag{Name: "sluiced", Usage: "with --validate: a sluiced binary to use instead of building one"},
			&cli.StringSliceFlag{Name: "tables", Usage: "with --report: only these tables (sim-hot, sim-loss, sim-churn, sim-fair, sim-spread)"},
			&cli.BoolFlag{Name: "resume", Usage: "with --report: keep the rows the stopped regeneration (the newest named in the document) already wrote (same runs) and run the rest"},
			&cli.StringFlag{Name: "design", Usage: "with --report: run only this design's rows (owner or broadcast) and keep the other's from the document"},
			&cli.StringFlag{Name: "max-nodes", Value: "10000", Usage: "with --report: the largest cluster size to run"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the run (pprof) to this file"},
			&cli.StringFlag{Name: "memprofile", Usage: "write a heap profile at the run's end (pprof) to this file"},
			&cli.StringFlag{Name: "doc", Value: "../../docs/SCALING.md", Usage: "with --report: the document to rewrite between its markers"},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("report") {
				return simReport(c)
			}
			if c.Bool("validate") {
				return simValidate(c)
			}
			contact, err := config.ParseFirstContact(c.String("first-contact"))
			if err != nil {
				return fmt.Errorf("--first-contact: %w", err)
			}
			cfg := sim.Config{
				Nodes: c.Int("nodes"), Duration: time.Duration(c.Float64("seconds") * float64(time.Second)), Seed: c.Uint64("seed"),
				Scenario: sim.Scenario(c.String("scenario")), HotKey: c.String("hot-key"), HotKeyThirdAggregates: c.Bool("hot-key-third-aggregates"), Rate: c.Float64("rate"), Burst: c.Int64("burst"),
				Offered: c.Float64("offered"), MinPerNode: c.Float64("min-per-node"), PerHost: c.Float64("per-host"), Keys: c.Int("keys"),
				GossipInterval: c.Duration("gossip-interval"), FanoutLimit: c.Int("fanout-limit"), GossipNodes: c.Int("gossip-nodes"), GossipMode: c.String("gossip-mode"), AggregateAbove: c.Int("aggregate-above"), FirstShare: c.Bool("first-share"), FirstContact: contact,
				PushPullInterval: c.Duration("push-pull-interval"), Loss: c.Float64("loss"), Latency: c.Duration("latency"),
				Jitter: c.Duration("jitter"), ChurnPerMinute: c.Float64("churn"), KillOwnerAt: c.Duration("kill-owner-at"), KillReplicaAt: c.Duration("kill-replica-at"), KillThirdAt: c.Duration("kill-third-at"), JoinSpread: c.Duration("join-spread"), Quiet: c.Duration("quiet"), Isolated: c.Int("isolated"),
				Partition:    sim.Partition{From: c.Duration("partition-from"), To: c.Duration("partition-to"), Split: c.Int("partition-split")},
				SilenceOwner: sim.Partition{From: c.Duration("silence-owner-from"), To: c.Duration("silence-owner-to")},
				Stall:        stall(c),
			}
			stop, err := startProfiles(c.String("cpuprofile"))
			if err != nil {
				return err
			}
			s, err := sim.New(cfg)
			if err != nil {
				stop()
				return err
			}
			s.Run().Write(os.Stdout)
			stop()
			err = writeHeapProfile(c.String("memprofile"))
			runtime.KeepAlive(s) // the nodes are the heap profiled
			return err
		},
	}
}

// rewriteBetweenMarkers replaces, in the file at path, what lies between
// each "<!-- NAME -->" and "<!-- /NAME -->" line with tables[NAME].
func rewriteBetweenMarkers(path string, tables map[string]string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("rewrite the tables: %w", err)
	}
	text := string(doc)
	for name, table := range tables {
		open, end := "<!-- "+name+" -->\n", "<!-- /"+name+" -->"
		i, j := strings.Index(text, open), strings.Index(text, end)
		if i < 0 || j < i {
			return fmt.Errorf("rewrite the tables: %s has no %q ... %q markers", path, open, end)
		}
		text = text[:i+len(open)] + table + text[j:]
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

// stall is the --stall-* flags' stall (none unless --stall-to is set).
func stall(c *cli.Context) sim.Partition {
	if c.Duration("stall-to") == 0 {
		return sim.Partition{}
	}
	return sim.Partition{From: c.Duration("stall-from"), To: c.Duration("stall-to"), Split: c.Int("stall-nodes")}
}
