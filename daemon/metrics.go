package daemon

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicelabs/sluice/gossip"
	"github.com/sluicelabs/sluice/internal/buildinfo"
	"github.com/sluicelabs/sluice/ipc"
)

// metrics are the daemon's Prometheus series. Series are looked up once
// (per rule, when rules are applied), never per request, and no label ever
// carries a client key, so cardinality is bounded by the rules.
type metrics struct {
	reg       *prometheus.Registry
	decisions *prometheus.CounterVec // rule, outcome
	reloads   *prometheus.CounterVec // result
	reloadAt  prometheus.Gauge
	// fetchErrors counts failures to reach the rules service.
	fetchErrors                          prometheus.Counter
	clockSteps                           prometheus.Counter     // wall-clock steps followed (clock.go)
	overshoot                            *prometheus.CounterVec // rule
	latency                              prometheus.Histogram
	clientFailedOpen, clientFailedClosed prometheus.Counter
}

// ruleCounters are one rule's pre-resolved decision counters.
type ruleCounters struct {
	admitted, throttled, shadow, soft prometheus.Counter
	overshoot                         prometheus.Counter
}

func newMetrics(d *Daemon) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total", Help: "Checks decided, by rule and outcome (admitted, throttled, shadow_throttled, soft).",
		}, []string{"rule", "outcome"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rules_reloads_total", Help: "Rules reloads, by result (ok, error).",
		}, []string{"result"}),
		reloadAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rules_last_reload_timestamp_seconds", Help: "When the rules in force were loaded.",
		}),
	}
	m.fetchErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_rules_fetch_errors_total", Help: "Polls of the rules service (--rules-url) that got no rules document: unreachable, timeout, or a status other than 200 and 304.",
	})
	m.clockSteps = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_clock_steps_total", Help: "Wall-clock steps the daemon followed (more than 0.5 s between its monotonic-paced clock and the wall): windows realigned with the wall, bucket balances carried over.",
	})
	m.overshoot = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_cluster_overshoot_tokens_total",
		Help: "Estimated tokens the cluster admitted beyond a rule's limit: the part of peers' consumption that reached this node's buckets below zero. " +
			"Each node estimates the same cluster-wide figure: compare nodes, do not sum them.",
	}, []string{"rule"})
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_decision_duration_seconds",
		Help:    "Time to decide one request (one or more checks) inside the daemon, from the decoded request to the result; sampled, one request in 64.",
		Buckets: prometheus.ExponentialBuckets(100e-9, 2.5, 10), // 100 ns to 380 µs
	})
	m.clientFailedOpen = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_client_failed_open_total",
		Help: "Calls clients allowed without a decision (daemon down, slow or unreachable), as they report on reconnecting. Reports lost with a client are not counted.",
	})
	m.clientFailedClosed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_client_failed_closed_total",
		Help: "Calls clients configured to fail closed denied without a decision, as they report on reconnecting.",
	})
	m.reloadAt.SetToCurrentTime()
	m.reg.MustRegister(buildInfoGauge())
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.decisions, m.reloads, m.reloadAt, m.fetchErrors, m.clockSteps, m.overshoot, m.latency, m.clientFailedOpen, m.clientFailedClosed,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_active_keys", Help: "Buckets held in memory."},
			func() float64 { return float64(d.store.Len()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_evictions_total", Help: "Buckets evicted (idle and full, or to make room at the cap)."},
			func() float64 { return float64(d.store.Evictions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_ipc_requests_total", Help: "Requests received over the socket."},
			func() float64 { return float64(d.server.Stats().Requests.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_ipc_connections", Help: "Client connections open."},
			func() float64 { return float64(d.server.Stats().Active.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_ipc_peers_refused_total", Help: "Socket connections refused because the peer's uid and gid are not allowed."},
			func() float64 { return float64(d.server.Stats().PeersRefused.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_log_bytes", Help: "Bytes sliding logs hold beyond each log's first entry, counted against --max-log-bytes."},
			func() float64 { used, _, _ := d.store.LogStats(); return float64(used) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_log_budget_bytes", Help: "The sliding logs' byte budget (--max-log-bytes)."},
			func() float64 { _, budget, _ := d.store.LogStats(); return float64(budget) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_log_growth_refused_total", Help: "Times a sliding log could not grow because the budget was spent (the request was admitted and counted in its newest entry)."},
			func() float64 { _, _, refused := d.store.LogStats(); return float64(refused) }),
	)
	return m
}

// buildInfoGauge is sluice_build_info: always 1, labelled with the build
// (the usual Prometheus idiom for joining the version onto other series).
func buildInfoGauge() prometheus.Collector {
	in := buildinfo.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_build_info", Help: "Always 1; the labels say which build of sluiced is running (version, VCS revision with +dirty, Go version).",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.RevisionString(), "goversion": in.GoVersion},
	})
	g.Set(1)
	return g
}

// registerGossip adds the cluster's series once the syncer exists.
func (m *metrics) registerGossip(s *gossip.Syncer) {
	st := s.Stats()
	m.registerPeerMetrics(s)
	for name, f := range map[string]func() float64{
		"sluice_gossip_packets_sent_total":     func() float64 { return float64(st.PacketsSent.Load()) },
		"sluice_gossip_bytes_sent_total":       func() float64 { return float64(st.BytesSent.Load()) },
		"sluice_gossip_packets_received_total": func() float64 { return float64(st.PacketsReceived.Load()) },
		"sluice_gossip_bytes_received_total":   func() float64 { return float64(st.BytesReceived.Load()) },
		"sluice_gossip_bad_packets_total":      func() float64 { return float64(st.BadPackets.Load()) },
		"sluice_gossip_tokens_charged_total":   func() float64 { return float64(st.TokensCharged.Load()) },
		"sluice_gossip_relays_dropped_total":   func() float64 { return float64(st.RelaysDropped.Load()) },
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: "Gossip traffic: " + name + "."}, f))
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_gossip_owner_answers_refused_total",
		Help: "Owner-mode answers (and aggregation notices) refused: from a member that is neither the key's owner nor its replica here, nor the third this node's failover chain names, nor its aggregator; or about a key this node holds nothing of (never used, counted or aggregated here)."},
		func() float64 { return float64(s.OwnerStats().AnswersRefused) }))
	m.registerTransport(s.Transport())
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_members_alive", Help: "Cluster members believed alive, this node included."},
		func() float64 { return float64(s.NumAlive()) }))
	for _, state := range []string{"alive", "suspect", "dead", "left"} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_members", ConstLabels: prometheus.Labels{"state": state},
			Help: "Members in each state as this node sees them, this node included: alive as memberlist counts them now, less the suspected; suspect as of memberlist's last push-pull census (0 unless the program installed gossip's census sink, as sluiced does); dead and left for memberlist's GossipToTheDeadTime after they went.",
		}, func() float64 {
			c, _ := s.MemberStates()
			switch state {
			case "alive":
				return float64(c.Alive)
			case "suspect":
				return float64(c.Suspect)
			case "dead":
				return float64(c.Dead)
			}
			return float64(c.Left)
		}))
	}
}

// registerTransport adds what the gossip transport refused before memberlist.
func (m *metrics) registerTransport(ts *gossip.TransportStats) {
	for _, reason := range gossip.StreamRefusals {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_gossip_streams_refused_total", ConstLabels: prometheus.Labels{"reason": reason},
			Help: "Inbound gossip streams refused before memberlist read them, by reason.",
		}, func() float64 { return float64(ts.StreamsRefused(reason)) }))
	}
	for _, reason := range gossip.StreamRefusals {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_gossip_replies_refused_total", ConstLabels: prometheus.Labels{"reason": reason},
			Help: "Replies on gossip streams this node opened (push-pull, join, TCP ping) refused before memberlist read them, by reason.",
		}, func() float64 { return float64(ts.RepliesRefused(reason)) }))
	}
	for _, reason := range gossip.PacketRefusals {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_gossip_packets_refused_total", ConstLabels: prometheus.Labels{"reason": reason},
			Help: "Gossip packets refused before memberlist read them, by reason.",
		}, func() float64 { return float64(ts.PacketsRefused(reason)) }))
	}
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_gossip_stream_bytes_refused_total",
			Help: "Bytes refused gossip streams declared they would send."},
			func() float64 { return float64(ts.BytesRefused.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_gossip_streams_accepted_total",
			Help: "Inbound gossip streams handed to memberlist."},
			func() float64 { return float64(ts.StreamsAccepted.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_gossip_streams_open",
			Help: "Inbound gossip streams open now (at most 32)."},
			func() float64 { return float64(ts.StreamsOpen.Load()) }),
	)
}

func (m *metrics) forRule(name string) ruleCounters {
	return ruleCounters{
		admitted:  m.decisions.WithLabelValues(name, "admitted"),
		throttled: m.decisions.WithLabelValues(name, "throttled"),
		shadow:    m.decisions.WithLabelValues(name, "shadow_throttled"),
		soft:      m.decisions.WithLabelValues(name, "soft"),
		overshoot: m.overshoot.WithLabelValues(name),
	}
}

func (c ruleCounters) count(status ipc.Status) {
	if c.admitted == nil {
		return
	}
	switch {
	case status == ipc.StatusShadowDenied:
		c.shadow.Inc()
	case status == ipc.StatusSoft:
		c.soft.Inc()
	case status.Admits():
		c.admitted.Inc()
	default:
		c.throttled.Inc()
	}
}

func counterValue(c prometheus.Counter) uint64 {
	var m dto.Metric
	if c == nil || c.Write(&m) != nil {
		return 0
	}
	return uint64(m.GetCounter().GetValue())
}
