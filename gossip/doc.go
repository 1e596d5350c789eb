// Package gossip makes Sluice's limits cluster-wide. It wires
// hashicorp/memberlist for membership (join, leave, failure detection,
// encryption) and uses its packets to spread what each daemon admitted, so
// every daemon's buckets reflect the whole cluster's consumption.
//
// # What travels
//
// Each daemon reports, per key, the cumulative number of tokens it admitted
// in the current epoch of that key's bucket (a new epoch begins whenever the
// bucket is created, so one evicted and created again never re-applies old
// counts). A receiver keeps, per (origin, rule, key), the range of that
// counter it has already charged, and charges only what lies outside it:
// duplicated, reordered and lost packets never double-count, and a later
// packet repairs a lost one. A receiver that first hears of a counter midway
// charges only the latest increment the packet names, never the whole
// history. Messages are coalesced: one pending entry per (origin, key), so the
// queue grows with hot keys, not with the request rate.
//
// Windowed algorithms (fixed window, sliding window counter, sliding log)
// count per window: their counters also name a window, and a counter's
// generation is (epoch, window), compared epoch first. A newer generation
// starts the count over as a new epoch does; an older one is ignored, so a
// window's counter that arrives after the next window's is lost, which errs
// toward admitting more. Such keys have one pending entry per (origin, key,
// window), so a window's last counter is not replaced by the next window's
// first, and a round sends them in window order.
//
// # How it travels
//
// Every GossipInterval the syncer sends its pending counters, batched into
// UDP packets that fit memberlist's limit. While the cluster has at most
// FanoutLimit members it sends them to every member (one hop, lowest lag);
// beyond that it sends each to GossipNodes random members for a few rounds,
// and receivers relay what was news to them (constant cost per node, about
// log N rounds). Push-pull (memberlist's periodic TCP state exchange) carries
// each node's counters and balances, repairing losses and teaching a daemon
// that restarted or joined late the debts already owed.
//
// Above FanoutLimit, once every member speaks it, the syncer gossips in
// owner mode instead (Config.GossipMode; owner.go): each key's counters go
// only to the key's owner on a consistent-hash ring over the members,
// which answers every node using the key with the cumulative consumption
// of the others. A node then hears only of the keys it uses, and its cost
// is set by its own traffic, not by the cluster's size.
//
// A counters packet names its sender. memberlist does not say where a
// message came from, so the transport checks it before memberlist sees the
// packet: the sender must be the member at the packet's source address
// (senderguard.go); and while the cluster is small enough for direct
// fan-out, a sender's counters must all be its own. In a relayed cluster
// the sender is checked and the origins it relays are not (their
// allowances bound them).
//
// Packets and streams go through the package's own memberlist transport
// (UDP and TCP on one port, as memberlist's NetTransport), because
// NetTransport allocates 64 KiB for every packet it reads, and under fan-out
// that allocation was most of a busy daemon's CPU (see transport.go).
//
// # Resets
//
// An operator can clear a key's debt cluster-wide (Syncer.Reset). The reset
// carries an instant; every node that applies it refills the key, drops the
// key's pending counters and what it heard of them, and raises its bucket
// epochs above the instant, so buckets created after the reset are told
// apart. For an hour, counters and push-pull balances of the key from an
// epoch at or below the instant are refused, so nothing counted before the
// reset is charged again. Resets go over TCP to every member, again to a
// member that missed one while it is alive, and to one that (re)joins (see
// resetwire.go).
//
// # Life of a Syncer
//
// As serf's agent: New validates the configuration and binds nothing, starts
// no goroutine and talks to no one; Start binds the gossip port (UDP and TCP),
// creates memberlist on it and starts the syncer's loops and, with peers
// given, joining; Leave tells the cluster this node is going (it first says
// so in its metadata, so peers count it left rather than dead); Shutdown
// stops everything Start began, is idempotent and is safe before Start or
// after a Start that failed. A syncer runs once: make a new one to run again.
// The package installs nothing process-wide: each syncer's member census
// (MemberStates) is its own, counted from memberlist's member list and
// events, and, for the suspected members, from memberlist's census gauge
// through a CensusSink the program installs as go-metrics' global and
// passes in Config.Census (one sink serves every syncer of the process).
//
// # Where things are
//
// lifecycle.go (New, Start, Leave, Shutdown, joining), members.go (membership
// bookkeeping: the event delegate, reconnecting), census.go (members by
// state) and censussink.go (memberlist's census gauge), keyring.go (key rotation), counters.go (sending counters: the
// pending queue and rounds), apply.go, seen.go, allowance.go, stamp.go and
// suspect.go (receiving them), pushpull.go (the push-pull state and its
// merge), reset.go and resetwire.go (resets), views.go (what operators see),
// owner.go, ownerring.go and ownerwire.go (owner mode: aggregation and
// answers, the ring, its two messages), meta.go and metasecurity.go (node metadata), delegate.go (memberlist's
// Delegate), wire.go (the counters format), transport.go, streamguard.go,
// packetguard.go, senderguard.go and sourceaddr.go (the network, screened:
// a counters packet's sender must be the member at its source address).
//
// The package never decides a request and never blocks one: it talks to the
// daemon's buckets only through the Ledger interface.
package gossip
