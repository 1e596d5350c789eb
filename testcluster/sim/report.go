package sim

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"time"
)

// PerPacketCPU is the CPU a packet costs beyond the syncer's own code
// (memberlist's packet handling and the kernel's UDP, each way), used to
// estimate a node's CPU: SCALING.md's measured c ≈ 5 µs per packet covers
// both; the syncer's part is measured in the run itself.
const PerPacketCPU = 5 * time.Microsecond

// Report is what a run measured. Every field but Wall and SyncerCPU
// repeats exactly with the same Config.
type Report struct {
	Nodes    int
	Seconds  float64
	Scenario Scenario
	Loss     float64
	Churn    float64 // fraction of the nodes replaced per minute
	Replaced int     // nodes replaced during the run
	Mode     string  // "direct" (fan-out), "relayed" or "owner": what the syncers did (mode.go)

	// Accuracy (the hot key; Spread: all keys together).
	Requests    uint64 // requests offered
	Admitted    uint64
	Allowed     float64  // burst + rate × T (Spread: over every key)
	Accuracy    float64  // Admitted / Allowed
	FirstSecond uint64   // admitted in the first second
	WorstWindow float64  // most admitted in any 1 s window beyond burst + rate × 1 s
	WorstBursts float64  // WorstWindow in bursts
	PerSecond   []uint64 // admitted in each second of the run (hot load)
	// Balances: the hot key's balance on the live nodes at the end, lowest
	// and highest, and what the limit leaves after the cluster's admitted
	// total (burst + rate × T − Admitted, at most burst).
	BalanceLow, BalanceHigh, BalanceIdeal float64
	Convergence                           Lags
	Fairness                              Fairness
	PerNode                               Traffic // per node per second, means
	PerNodeMax                            Traffic // per node per second, the busiest node
	HotOwner                              Traffic // per second, the hot key's owner (hotkey.go)
	HotLag                                Lags    // staleness of the hot key's view (hotkey.go)
	ChargeGap                             Gap     // the hot key: charged against the others' admissions (hotkey.go)
	// Suspicious is the reports the nodes (every one that ran) clamped or
	// refused as suspicious, by the check that did: every simulated node
	// is honest, so any is a bound too tight.
	Suspicious map[string]uint64
	// Measured on this machine, not repeatable.
	//
	// EstimatedCPU is the fraction of a core per node: IsolatedCPU (or,
	// where no node was replayed, SyncerCPU) + PerPacketCPU × packets sent
	// and received.
	EstimatedCPU float64
	// IsolatedCPU is the fraction of a core per node spent in the syncer's
	// code, measured by replaying a few nodes' inputs into a syncer of their
	// own after the run (isolate.go): the syncer's own cost, without the
	// simulation's (every node's state in one process, sorted map order).
	// IsolatedAlloc is what those replays allocated, bytes per node per
	// second.
	IsolatedCPU, IsolatedAlloc float64
	// SyncerCPU is the fraction of a core per node spent in the syncer's
	// code as timed inside the simulation (every node's calls).
	SyncerCPU float64
	Wall      time.Duration // the run's wall time
	CPU       time.Duration // the run's CPU time (its thread's; Wall where not measured)
	Heap      uint64        // bytes of heap in use at the end, after a GC (every node's state)
}

// Lags is the convergence of probes: from one consumption to every other
// live node's ledger reflecting it, or in owner mode every other node
// holding the probe's key (holders.go).
type Lags struct {
	Probes, Converged int
	P50, P99, Max     float64 // milliseconds, of the converged
	// Holders is the nodes holding an owner-mode probe's key (0: every
	// node). Bound is issue 20's goal, two gossip intervals and one round
	// trip (twice the latency and the jitter's mean), in milliseconds;
	// WithinBound the probes that converged within it.
	Holders     int
	Bound       float64
	WithinBound int
}

// Fairness is each node's share of what the cluster admitted of the hot
// key over 2 s windows, against 1/N.
type Fairness struct {
	Windows int
	// Within25 is the fraction of (node, window) shares within ±25% of 1/N;
	// WorstLow and WorstHigh the lowest and highest share × N seen.
	Within25            float64
	WorstLow, WorstHigh float64
}

// Traffic is gossip traffic per node per second.
type Traffic struct {
	BytesSent, BytesReceived     float64 // counters packets (UDP)
	PacketsSent, PacketsReceived float64
	StateBytes                   float64 // push-pull states sent and received (TCP), membership not counted
}

// measure accumulates a run's measurements.
type measure struct {
	bins    []uint64 // hot admitted per binWidth
	hot     hotLag   // hotkey.go
	probes  []*probe
	byKey   map[string]*probe
	retired []*node // nodes replaced during the run, for traffic
	fair    Fairness
	fairN   int
}

type probe struct {
	start   int64
	from    int
	need    int
	seen    []uint64 // bitset of slots that reflected it
	got     int
	lag     int64
	settled bool
	// Owner mode's probes (holders.go): the slots holding the key (the
	// prober first) and their generations, the tokens charged at each, and
	// how many make the measured one reflected there.
	holders   []int32
	gens      []uint32
	charged   map[int32]uint64
	want      uint64
	measuring bool // the measured token was taken (at start)
}

func (m *measure) init(s *Sim) {
	m.bins = make([]uint64, int(s.cfg.Duration/binWidth)+1)
	m.byKey = map[string]*probe{}
}

func (s *Sim) bin() int { return int(time.Duration(s.now) / binWidth) }

func (m *measure) retire(n *node) { m.retired = append(m.retired, n) }

// probe consumes one token of a fresh probe key at the next node in turn.
func (s *Sim) probe() {
	if s.cfg.mode() == "owner" {
		s.holderProbe()
		return
	}
	// A probe needs time to reach everyone: none starts in the run's last
	// probeTail, where it could only be counted as not converged.
	if s.now > int64(s.cfg.Duration)-int64(probeTail(s.cfg.Duration)) {
		return
	}
	k := len(s.m.probes)
	from := k % len(s.nodes)
	n := s.nodes[from]
	if !n.alive {
		return
	}
	key := "p" + strconv.Itoa(k)
	if r, err := s.take(n, 1, []byte(key), s.lim.probe); err != nil || !r.Allowed {
		return
	}
	// Every other live node: crashed members not yet declared dead are
	// counted in alive, and will never hear.
	p := &probe{start: s.now, from: from, need: s.alive - 1 - s.crashed, seen: make([]uint64, (len(s.nodes)+63)/64)}
	s.m.probes = append(s.m.probes, p)
	s.m.byKey[key] = p
}

// probeTail is the end of a run in which no probe starts: a second, or a
// tenth of a shorter run.
func probeTail(d time.Duration) time.Duration { return min(time.Second, d/10) }

// probeSeen records that node n's ledger was charged tokens of probe key,
// or adopted a balance of it.
func (s *Sim) probeSeen(n *node, key string, tokens uint64, adopted bool) {
	p := s.m.byKey[key]
	if p == nil || p.settled {
		return
	}
	if p.holders != nil {
		if !adopted { // push-pull is not owner mode's path
			s.holderCharged(p, n, tokens, key)
		}
		return
	}
	if n.i != p.from && p.mark(n.i, s.now-p.start) {
		delete(s.m.byKey, key)
	}
}

// sample takes the fairness of the last 2 s window (Hot only).
func (m *measure) sample(s *Sim) {
	if s.cfg.Scenario != Hot {
		return
	}
	var total uint64
	live := 0
	for _, n := range s.nodes {
		if n.alive {
			total += n.windowAdmitted
			live++
		}
	}
	if total == 0 || live == 0 {
		return
	}
	if m.fair.Windows == 0 {
		m.fair.WorstLow, m.fair.WorstHigh = math.Inf(1), math.Inf(-1)
	}
	m.fair.Windows++
	within := 0
	for _, n := range s.nodes {
		if !n.alive {
			continue
		}
		share := float64(n.windowAdmitted) / float64(total) * float64(live)
		n.windowAdmitted = 0
		if share >= 0.75 && share <= 1.25 {
			within++
		}
		m.fair.WorstLow, m.fair.WorstHigh = min(m.fair.WorstLow, share), max(m.fair.WorstHigh, share)
	}
	m.fair.Within25 += float64(within) / float64(live)
	m.fairN++
}

// report sums up a run that took wall time and cpu of its thread: the
// syncers' share of cpu is their share of the wall time (timed around each
// call), so that time other programs held the cores counts for nothing.
func (m *measure) report(s *Sim, wall, cpu time.Duration) *Report {
	c := s.cfg
	secs := c.Duration.Seconds()
	r := &Report{Nodes: c.Nodes, Seconds: secs, Scenario: c.Scenario, Loss: c.Loss, Churn: c.ChurnPerMinute, Replaced: len(m.retired),
		Wall: wall}
	var ms runtime.MemStats
	runtime.GC() // what the nodes hold, not what is left over
	runtime.ReadMemStats(&ms)
	r.Heap = ms.HeapInuse
	nodes := append(slices.Clone(s.nodes), m.retired...)
	r.Mode = chosenMode(c, nodes)
	defer runtime.KeepAlive(s) // the nodes were in the heap measured
	var busy time.Duration
	for _, n := range nodes {
		for why, k := range n.syncer.SuspiciousChecks() {
			if r.Suspicious == nil {
				r.Suspicious = map[string]uint64{}
			}
			r.Suspicious[why] += k
		}
		r.Admitted += n.admitted
		r.Requests += n.requests
		busy += n.busy
		t := Traffic{float64(n.bytesSent) / secs, float64(n.bytesRcv) / secs, float64(n.pktSent) / secs, float64(n.pktRecv) / secs, float64(n.stateBytes) / secs}
		r.PerNode.add(t)
		r.PerNodeMax.max(t)
	}
	r.PerNode.scale(1 / float64(c.Nodes)) // slots: a replaced node's traffic adds to its slot's
	burst := float64(c.Burst)
	if c.Scenario == Hot {
		r.Allowed = burst + c.Rate*secs
	} else {
		r.Allowed = float64(len(s.keys)) * (burst + c.Rate*secs)
	}
	r.Accuracy = float64(r.Admitted) / r.Allowed
	r.BalanceLow, r.BalanceHigh = math.Inf(1), math.Inf(-1)
	for _, n := range s.nodes {
		if n.alive {
			b, _ := n.store.Balance(0, s.hot, s.lim.hot, s.clock())
			r.BalanceLow, r.BalanceHigh = min(r.BalanceLow, b), max(r.BalanceHigh, b)
		}
	}
	r.BalanceIdeal = min(burst, burst+c.Rate*secs-float64(r.Admitted))
	for i := 0; i < len(m.bins) && i < int(time.Second/binWidth); i++ {
		r.FirstSecond += m.bins[i]
	}
	w := int(time.Second / binWidth)
	var window uint64
	for i, b := range m.bins {
		window += b
		if i >= w {
			window -= m.bins[i-w]
		}
		r.WorstWindow = max(r.WorstWindow, float64(window)-(burst+c.Rate))
	}
	r.WorstBursts = r.WorstWindow / burst
	for i, b := range m.bins {
		if sec := i * int(binWidth) / int(time.Second); sec < int(math.Ceil(secs)) {
			r.PerSecond = append(r.PerSecond, make([]uint64, sec+1-len(r.PerSecond))...)
			r.PerSecond[sec] += b
		}
	}
	var lags []float64
	r.Convergence.Bound = float64(2*c.GossipInterval+2*(c.Latency+c.Jitter)) / float64(time.Millisecond)
	if c.mode() == "owner" {
		r.Convergence.Holders = min(c.ProbeHolders, c.Nodes)
	}
	for _, p := range m.probes {
		r.Convergence.Probes++
		if p.settled {
			r.Convergence.Converged++
			lags = append(lags, float64(p.lag)/float64(time.Millisecond))
			if lags[len(lags)-1] <= r.Convergence.Bound {
				r.Convergence.WithinBound++
			}
		}
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		r.Convergence.P50, r.Convergence.P99, r.Convergence.Max = quantile(lags, 0.5), quantile(lags, 0.99), lags[len(lags)-1]
	}
	r.Fairness = m.fair
	if m.fairN > 0 {
		r.Fairness.Within25 /= float64(m.fairN)
	}
	s.hotReport(r) // hotkey.go
	r.CPU = cpu
	r.SyncerCPU = busy.Seconds() * (cpu.Seconds() / max(wall.Seconds(), 1e-9)) / secs / float64(c.Nodes)
	own := r.SyncerCPU
	if iso, alloc, ok := s.isolated(); ok { // isolate.go
		r.IsolatedCPU, r.IsolatedAlloc, own = iso, alloc, iso
	}
	r.EstimatedCPU = own + (r.PerNode.PacketsSent+r.PerNode.PacketsReceived)*PerPacketCPU.Seconds()
	return r
}

func (t *Traffic) add(o Traffic) {
	t.BytesSent += o.BytesSent
	t.BytesReceived += o.BytesReceived
	t.PacketsSent += o.PacketsSent
	t.PacketsReceived += o.PacketsReceived
	t.StateBytes += o.StateBytes
}

func (t *Traffic) max(o Traffic) {
	t.BytesSent = max(t.BytesSent, o.BytesSent)
	t.BytesReceived = max(t.BytesReceived, o.BytesReceived)
	t.PacketsSent = max(t.PacketsSent, o.PacketsSent)
	t.PacketsReceived = max(t.PacketsReceived, o.PacketsReceived)
	t.StateBytes = max(t.StateBytes, o.StateBytes)
}

func (t *Traffic) scale(f float64) {
	t.BytesSent *= f
	t.BytesReceived *= f
	t.PacketsSent *= f
	t.PacketsReceived *= f
	t.StateBytes *= f
}

func quantile(sorted []float64, q float64) float64 {
	return sorted[int(q*float64(len(sorted)-1))]
}

// Repeatable returns the report without what depends on this machine's
// speed and memory (SyncerCPU, IsolatedCPU, IsolatedAlloc, EstimatedCPU,
// Wall, CPU and Heap): what a seed must repeat.
func (r *Report) Repeatable() Report {
	c := *r
	c.SyncerCPU, c.IsolatedCPU, c.IsolatedAlloc, c.EstimatedCPU, c.Wall, c.CPU, c.Heap = 0, 0, 0, 0, 0, 0, 0
	return c
}

// Write prints the report as text.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "%d nodes (%s), %s load, loss %.0f%%, %.0f s simulated in %s, %s of CPU (%.2f CPU s per simulated second)\n",
		r.Nodes, r.Mode, r.Scenario, 100*r.Loss, r.Seconds, r.Wall.Round(time.Millisecond), r.CPU.Round(time.Millisecond), r.CPU.Seconds()/r.Seconds)
	fmt.Fprintf(w, "  admitted %d of %d requests and %.0f allowed: %.1f%%; first second %d; worst 1 s window %+.0f over (%.2f bursts)\n",
		r.Admitted, r.Requests, r.Allowed, 100*r.Accuracy, r.FirstSecond, r.WorstWindow, r.WorstBursts)
	if len(r.PerSecond) > 0 {
		fmt.Fprintf(w, "  admitted per second: %v\n", r.PerSecond)
	}
	if r.Churn > 0 {
		fmt.Fprintf(w, "  churn %g%% of the nodes per minute: %d replaced\n", 100*r.Churn, r.Replaced)
	}
	cv := r.Convergence
	on := "every other node"
	if cv.Holders > 0 {
		on = fmt.Sprintf("the other %d holders of its key", cv.Holders-1)
	}
	fmt.Fprintf(w, "  convergence (a consumption reflected on %s): %d/%d probes, p50 %.1f ms, p99 %.1f ms, max %.1f ms; %d within 2 intervals + a round trip (%.1f ms)\n",
		on, cv.Converged, cv.Probes, cv.P50, cv.P99, cv.Max, cv.WithinBound, cv.Bound)
	if f := r.Fairness; f.Windows > 0 {
		fmt.Fprintf(w, "  fairness over %d 2 s windows: %.0f%% of shares within ±25%% of 1/N; share×N from %.2f to %.2f\n",
			f.Windows, 100*f.Within25, f.WorstLow, f.WorstHigh)
	}
	p, x := r.PerNode, r.PerNodeMax
	fmt.Fprintf(w, "  per node per second: sent %.0f B in %.0f packets, received %.0f B in %.0f packets, push-pull %.0f B (busiest: %.0f B, %.0f packets sent)\n",
		p.BytesSent, p.PacketsSent, p.BytesReceived, p.PacketsReceived, p.StateBytes, x.BytesSent, x.PacketsSent)
	if h := r.HotOwner; h.PacketsSent+h.PacketsReceived > 0 {
		fmt.Fprintf(w, "  the hot key's owner per second: received %.0f packets (%.0f B), sent %.0f packets (%.0f B)\n",
			h.PacketsReceived, h.BytesReceived, h.PacketsSent, h.BytesSent)
	}
	if l := r.HotLag; l.Probes > 0 {
		fmt.Fprintf(w, "  hot key staleness (%d samples): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", l.Probes, l.P50, l.P99, l.Max)
	}
	if g := r.ChargeGap; g.Nodes > 0 {
		fmt.Fprintf(w, "  hot key charged − admitted elsewhere, per node that lasted the run (%d): p50 %+.0f, min %+.0f, max %+.0f tokens\n", g.Nodes, g.P50, g.Min, g.Max)
	}
	if len(r.Suspicious) > 0 { // honest nodes: none, and no line
		fmt.Fprintf(w, "  honest reports clamped as suspicious, by check: %v\n", r.Suspicious)
	}
	fmt.Fprintf(w, "  heap in use at the end: %.0f MB\n", float64(r.Heap)/(1<<20))
	if r.IsolatedCPU > 0 {
		fmt.Fprintf(w, "  CPU per node: syncer %.2f%% of a core replayed in isolation (%.0f kB allocated per second), %.2f%% timed in the simulation; %.2f%% estimated with %s per packet\n",
			100*r.IsolatedCPU, r.IsolatedAlloc/1e3, 100*r.SyncerCPU, 100*r.EstimatedCPU, PerPacketCPU)
	} else {
		fmt.Fprintf(w, "  CPU per node: syncer %.2f%% of a core measured, %.2f%% estimated with %s per packet\n",
			100*r.SyncerCPU, 100*r.EstimatedCPU, PerPacketCPU)
	}
}
