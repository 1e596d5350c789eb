// Package testcluster runs an N-node Sluice cluster in one process: every node
// is a real daemon with its own Unix socket, its own client and its own
// memberlist on 127.0.0.1. A Cluster drives load through the sockets, stops,
// crashes and restarts nodes, partitions them and injects packet loss,
// duplication and reordering through a wrapping transport, and reads every
// node's balance for a key. Tests use it, and so does cmd/testcluster, which
// lets an operator watch convergence.
package testcluster
