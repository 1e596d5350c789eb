package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice/gossip"
)

// suspiciousCollector exports the gossip reports this node clamped or
// refused, by origin (a member's name, or gossip.OriginUnknown: at most the
// cluster's size plus one series).
type suspiciousCollector struct {
	s    *gossip.Syncer
	desc *prometheus.Desc
}

func newSuspiciousCollector(s *gossip.Syncer) suspiciousCollector {
	return suspiciousCollector{s: s, desc: prometheus.NewDesc("sluice_gossip_suspicious_reports_total",
		"Peers' reports clamped or refused because they claimed more than the origin could have admitted, an epoch far ahead of this node's clock, or a push-pull balance deeper than one burst, by origin.",
		[]string{"origin"}, nil)}
}

func (c suspiciousCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c suspiciousCollector) Collect(ch chan<- prometheus.Metric) {
	for origin, n := range c.s.Suspicious() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), origin)
	}
}

// registerPeerMetrics adds the series of peers' bounded reports.
func (m *metrics) registerPeerMetrics(s *gossip.Syncer) {
	st := s.Stats()
	m.reg.MustRegister(newSuspiciousCollector(s))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_gossip_unknown_counters_total",
		Help: "Peers' counters of rules this node does not have, or of keys longer than it accepts: neither charged nor remembered."},
		func() float64 { return float64(st.UnknownCounters.Load()) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_gossip_deferred_reports_total",
		Help: "Reports of origins not (yet) members here that the allowance all non-members share for a key could not pay, though the origin's own could: the rest is charged once the origin is a member and reports it again or a push-pull lists it."},
		func() float64 { return float64(st.DeferredReports.Load()) }))
}
