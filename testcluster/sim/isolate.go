package sim

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/bucket"
)

// The syncer's CPU measured in isolation. Timed inside the simulation, a
// syncer's calls run beside every other node's state in one process (at
// 10,000 nodes a heap of over a gigabyte, garbage-collected during the
// nodes' calls, and caches shared by every node) and iterate their maps in
// sorted order so that a run repeats with its seed (gossip.SimulateMapOrder):
// costs a daemon does not pay. So a run records everything a few nodes'
// syncers and stores are given (their requests, packets, push-pull states,
// rounds and membership changes, each at its virtual time) and, once the
// run is over, replays each node's record into a store and syncer of their
// own, made as the run made them but iterating in map order, with their own
// copy of the membership (as a daemon's memberlist gives it), nothing else
// of the simulation's state in use, and what they send dropped (its cost is
// PerPacketCPU's). The replay's CPU time is Report.IsolatedCPU, and
// Report.EstimatedCPU is built on it. In the run's sorted map order the
// replayed node sends exactly the packets it sent in the run; in map order
// too in owner mode and with direct fan-out, not when relaying, where the
// order decides how counters share packets
// (TestIsolatedReplaySendsWhatTheRunSent).

// isolatedNodes is how many nodes are recorded and replayed by default
// (Config.Isolated), spread over the slots.
const isolatedNodes = 8

// isolatedReplays is how many times each record is replayed; the median
// counts (the machine is shared).
const isolatedReplays = 3

// traceKind is what a recorded input is.
type traceKind uint8

const (
	trTake   traceKind = iota // a request or a probe's token taken from the store (a decision: in the replay's CPU, a negligible part)
	trPacket                  // a best-effort packet delivered (NotifyMsg)
	trRound                   // a gossip round (Flush)
	trGive                    // a push-pull started: the node's state given (LocalState)
	trState                   // a push-pull state merged, with a reply given unless join
	trPrune                   // PruneSeen
	trJoin                    // NotifyJoin
	trLeave                   // NotifyLeave
)

// traceEvent is one input of a recorded node.
type traceEvent struct {
	at     int64
	kind   traceKind
	ns     bucket.Namespace // trTake
	join   bool             // trState: merge only
	msg    []byte           // trTake: the key; trPacket, trState: the bytes
	member memberlist.Node  // trJoin, trLeave
}

// trace is one node's recorded inputs, until end (virtual nanoseconds: the
// run's end, or when the node crashed).
type trace struct {
	slot    int
	members []memberlist.Node // the members it knew at the start (a shared table's)
	events  []traceEvent
	end     int64
}

func (t *trace) add(e traceEvent) {
	if t != nil {
		t.events = append(t.events, e)
	}
}

// isolatedSlots is which slots a run of n nodes records: up to want, spread
// evenly.
func isolatedSlots(n, want int) []int {
	want = min(want, n)
	slots := make([]int, 0, max(want, 0))
	for k := range want {
		slots = append(slots, k*n/want)
	}
	return slots
}

// startTraces marks the nodes to record. Called by New once the nodes are
// made.
func (s *Sim) startTraces() {
	for _, i := range isolatedSlots(len(s.nodes), s.cfg.Isolated) {
		t := &trace{slot: i, end: int64(s.cfg.Duration)}
		if s.table != nil { // it starts knowing every first-generation node
			for _, m := range s.nodes {
				t.members = append(t.members, m.self)
			}
		}
		s.nodes[i].trace = t
		s.traces = append(s.traces, t)
	}
}

// take takes one token of key at n (a request, or a probe's token),
// recorded for n's replay.
func (s *Sim) take(n *node, ns bucket.Namespace, key []byte, lim bucket.Limit) (bucket.Result, error) {
	n.trace.add(traceEvent{at: s.now, kind: trTake, ns: ns, msg: key})
	return n.store.Take(ns, key, lim, 1, s.clock())
}

// notifyJoin tells n that member m joined, recorded for n's replay.
func (s *Sim) notifyJoin(n *node, m *memberlist.Node) {
	n.trace.add(traceEvent{at: s.now, kind: trJoin, member: *m})
	n.ev.NotifyJoin(m)
}

// notifyLeave tells n that member m left, recorded for n's replay.
func (s *Sim) notifyLeave(n *node, m *memberlist.Node) {
	n.trace.add(traceEvent{at: s.now, kind: trLeave, member: *m})
	n.ev.NotifyLeave(m)
}

// endTrace stops recording n (it crashed).
func (s *Sim) endTrace(n *node) {
	if n.trace != nil {
		n.trace.end = s.now
		n.trace = nil
	}
}

// isolated replays every recorded node and returns the mean fraction of a
// core their syncers' calls took, each the median of its replays; and the
// bytes they allocated per node per second (the median replay's). ok is
// false when nothing was recorded.
func (s *Sim) isolated() (cpu, alloc float64, ok bool) {
	var sumCPU, sumAlloc float64
	n := 0
	for _, t := range s.traces {
		secs := time.Duration(t.end).Seconds()
		if secs <= 0 {
			continue
		}
		type result struct{ cpu, alloc float64 }
		rs := make([]result, 0, isolatedReplays)
		for range isolatedReplays {
			p := s.replay(t, true)
			rs = append(rs, result{p.cpu.Seconds() / secs, float64(p.alloc) / secs})
		}
		slices.SortFunc(rs, func(a, b result) int {
			switch {
			case a.cpu < b.cpu:
				return -1
			case a.cpu > b.cpu:
				return 1
			}
			return 0
		})
		sumCPU += rs[len(rs)/2].cpu
		sumAlloc += rs[len(rs)/2].alloc
		n++
	}
	if n == 0 {
		return 0, 0, false
	}
	return sumCPU / float64(n), sumAlloc / float64(n), true
}

// replayed is what one replay measured.
type replayed struct {
	cpu   time.Duration // the thread's CPU time over the replay
	alloc uint64        // bytes allocated
	sent  uint64        // packets the replayed node sent
}

// replay runs one record into a node of its own (iterating its maps as
// production does if mapOrder, else in the run's sorted order) and returns
// the CPU time
// its thread spent on it (the syncer's calls, and the store's Takes of the
// load, a negligible part: no time other programs held the cores), the
// bytes the replay allocated and the packets it sent. No garbage
// collection runs during a replay (the run's heap is far larger than what
// a replay allocates): the allocations are reported instead.
func (s *Sim) replay(t *trace, mapOrder bool) replayed {
	r := &Sim{cfg: s.cfg, rnd: rand.New(rand.NewPCG(s.cfg.Seed, uint64(t.slot))), base: s.base, lim: s.lim, keys: s.keys, hot: s.hot, isolating: true}
	r.cfg.copyMembers = true // its own member table, as a daemon's
	n, err := r.newNode(t.slot, 0)
	if err != nil {
		panic(err) // the run made the same node
	}
	if mapOrder {
		n.syncer.SimulateMapOrder()
	}
	r.nodes = make([]*node, t.slot+1)
	r.nodes[t.slot] = n
	for i := range t.members {
		n.ev.NotifyJoin(&t.members[i])
	}
	r.alive = len(t.members)
	n.syncer.OwnerOf("", "") // its owner ring, built before the load as a daemon's is (once per membership change)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	alloc0 := ms.TotalAlloc
	cpu0, measured := threadCPU()
	wall := time.Now()
	for _, e := range t.events {
		r.now = e.at
		switch e.kind {
		case trTake:
			lim := r.lim.hot
			if e.ns == 1 {
				lim = r.lim.probe
			}
			_, _ = n.store.Take(e.ns, e.msg, lim, 1, r.clock())
		case trPacket:
			n.dg.NotifyMsg(e.msg)
		case trRound:
			n.syncer.Flush()
		case trGive:
			n.dg.LocalState(false)
		case trState:
			if !e.join {
				n.dg.LocalState(false)
			}
			n.dg.MergeRemoteState(e.msg, false)
		case trPrune:
			n.syncer.PruneSeen()
		case trJoin:
			n.ev.NotifyJoin(&e.member)
			r.alive++
		case trLeave:
			n.ev.NotifyLeave(&e.member)
			r.alive--
		}
	}
	busy := time.Since(wall)
	if cpu1, ok := threadCPU(); ok && measured {
		busy = cpu1 - cpu0
	}
	runtime.ReadMemStats(&ms)
	return replayed{cpu: busy, alloc: ms.TotalAlloc - alloc0, sent: n.pktSent}
}
