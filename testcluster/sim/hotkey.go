package sim

import (
	"slices"
	"sort"
	"time"
)

// The hot key's own measurements, for owner mode (where the convergence
// probes, on keys only their prober holds, reach nobody): how stale each
// node's view of the hot key is, and what the key's owner sends and
// receives.
//
// Staleness: at every fifth gossip round of a node after hotLagFrom, the
// age of the oldest admission elsewhere (since hotLagFrom) that the node's
// ledger has not been charged for yet, counting what it was charged since
// hotLagFrom against the admissions of the other nodes since then, in
// order. 0 when it is up to date. A node charged twice for one admission
// looks fresher than it is; one never charged for one looks staler and
// staler.

// hotLagFrom is when staleness starts to be measured: after the first
// second (or tenth of the run), when every node uses the hot key.
func hotLagFrom(d time.Duration) int64 { return int64(min(time.Second, d/10)) }

// hotTrack is one node's part of the staleness measure.
type hotTrack struct {
	charged, base uint64  // charged for the hot key, in all and at hotLagFrom
	based         bool    // base was taken
	own           []int64 // its admissions since hotLagFrom
	rounds        int
}

// hotLag is the run's staleness measure.
type hotLag struct {
	adm   []int64 // admissions since hotLagFrom, in order
	track map[*node]*hotTrack
	lags  []float64 // milliseconds
}

func (h *hotLag) of(n *node) *hotTrack {
	if h.track == nil {
		h.track = map[*node]*hotTrack{}
	}
	t := h.track[n]
	if t == nil {
		t = &hotTrack{}
		h.track[n] = t
	}
	return t
}

// hotAdmitted records an admission of the hot key at n.
func (s *Sim) hotAdmitted(n *node) {
	if s.now < hotLagFrom(s.cfg.Duration) {
		return
	}
	s.m.hot.adm = append(s.m.hot.adm, s.now)
	t := s.m.hot.of(n)
	t.own = append(t.own, s.now)
}

// hotCharged records that n's ledger was charged tokens of the hot key.
func (s *Sim) hotCharged(n *node, tokens uint64) {
	t := s.m.hot.of(n)
	t.charged += tokens
}

// hotSample measures n's staleness at one of its rounds.
func (s *Sim) hotSample(n *node) {
	from := hotLagFrom(s.cfg.Duration)
	if s.now < from || s.cfg.Scenario != Hot {
		return
	}
	t := s.m.hot.of(n)
	if !t.based {
		t.base, t.based = t.charged, true
		return
	}
	if t.rounds++; t.rounds%5 != 0 {
		return
	}
	got := t.charged - t.base
	adm := s.m.hot.adm
	// The first admission elsewhere not yet charged: the smallest i whose
	// admissions elsewhere up to it exceed what was charged.
	i := sort.Search(len(adm), func(i int) bool {
		own, _ := slices.BinarySearch(t.own, adm[i]+1) // own admissions at or before adm[i]
		return uint64(i+1-own) > got
	})
	lag := 0.0
	if i < len(adm) {
		lag = float64(s.now-adm[i]) / float64(time.Millisecond)
	}
	s.m.hot.lags = append(s.m.hot.lags, lag)
}

// hotReport fills the report's hot key fields: staleness and the owner's
// traffic.
func (s *Sim) hotReport(r *Report) {
	if lags := s.m.hot.lags; len(lags) > 0 {
		slices.Sort(lags)
		r.HotLag = Lags{Probes: len(lags), Converged: len(lags), P50: quantile(lags, 0.5), P99: quantile(lags, 0.99), Max: lags[len(lags)-1]}
	}
	s.chargeGap(r)
	owner, _ := s.nodes[0].syncer.OwnerOf(ruleHot, string(s.hot))
	secs := s.cfg.Duration.Seconds()
	for _, n := range s.nodes {
		if n.name == owner {
			r.HotOwner = Traffic{float64(n.bytesSent) / secs, float64(n.bytesRcv) / secs, float64(n.pktSent) / secs, float64(n.pktRecv) / secs, float64(n.stateBytes) / secs}
		}
	}
}

// Gap is, over the nodes that lasted the whole run (the first generation,
// alive at its end), what each node's ledger was charged for the hot key
// less what every other node admitted of it (the retired included): 0 when
// every admission elsewhere reached it once, below 0 when some never did
// (the node admits them again), above 0 when some were charged twice. The
// last interval's admissions are still on their way at the end.
type Gap struct {
	Nodes         int
	P50, Min, Max float64
}

// chargeGap fills r.ChargeGap (Hot only).
func (s *Sim) chargeGap(r *Report) {
	if s.cfg.Scenario != Hot {
		return
	}
	var gaps []float64
	for _, n := range s.nodes {
		if !n.alive || n.gen != 0 {
			continue
		}
		gaps = append(gaps, float64(s.m.hot.of(n).charged)-float64(r.Admitted-n.admitted))
	}
	if len(gaps) == 0 {
		return
	}
	slices.Sort(gaps)
	r.ChargeGap = Gap{Nodes: len(gaps), P50: quantile(gaps, 0.5), Min: gaps[0], Max: gaps[len(gaps)-1]}
}
