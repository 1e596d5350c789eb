// Package sim runs a Sluice cluster of thousands of nodes in one process on
// a virtual clock, with the real gossip code: each node is a gossip.Syncer
// (its counters, coalescing, direct fan-out or relaying, seen table,
// allowances and push-pull adoption) over a real bucket.Store, and the
// simulator plays memberlist and the network around them (gossip.Syncer's
// Simulate hooks): latency, loss, reordering, partitions, crashes and
// replacements, failure detection and push-pull, as discrete events in one
// goroutine. A run with the same Config and seed repeats itself exactly.
//
// When the membership is formed before the load (no JoinSpread), every
// node reads one shared member table (gossip.SharedMembers) instead of
// keeping its own copy of every member, and the cluster is formed at once
// instead of by N² join calls: what lets 10,000 nodes run in owner mode in
// a few seconds and a few hundred MB. Convergence is measured on probes:
// with direct fan-out or relaying, until every other node reflects a
// token; in owner mode, where a node hears only of the keys it uses, until
// every other node holding the probe's key does (holders.go).
//
// What the simulator does not run: memberlist itself (probes, suspicion,
// its own gossip of membership), encryption and the kernel's UDP. Their cost
// is estimated from a measured per-packet figure (PerPacketCPU); the
// syncer's own CPU is measured by replaying a few nodes' inputs into a
// syncer of their own after the run (isolate.go), as timing it among every
// other node's state would count the simulation's costs as the syncer's
// (Report.EstimatedCPU). Failure detection is a fixed delay (memberlist's
// suspicion timeout for the size).
//
// Files: config.go (what a run is), queue.go (the event queue), network.go
// (the simulated membership and network), node.go (a node: store, ledger,
// syncer), run.go (the run: load, rounds, push-pull, churn), holders.go
// (owner mode's probes), report.go (what a run measured), isolate.go (the
// syncer's CPU replayed in isolation).
package sim
