package daemon

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicelabs/sluice/gossip"
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
}

// ruleCounters are one rule's pre-resolved decision counters.
type ruleCounters struct {
	admitted, throttled, shadow, soft prometheus.Counter
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
	m.reloadAt.SetToCurrentTime()
	m.reg.MustRegister(m.decisions, m.reloads, m.reloadAt,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_active_keys", Help: "Buckets held in memory."},
			func() float64 { return float64(d.store.Len()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_evictions_total", Help: "Buckets evicted (idle and full, or to make room at the cap)."},
			func() float64 { return float64(d.store.Evictions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_ipc_requests_total", Help: "Requests received over the socket."},
			func() float64 { return float64(d.server.Stats().Requests.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_ipc_connections", Help: "Client connections open."},
			func() float64 { return float64(d.server.Stats().Active.Load()) }),
	)
	return m
}

// registerGossip adds the cluster's series once the syncer exists.
func (m *metrics) registerGossip(s *gossip.Syncer) {
	st := s.Stats()
	for name, f := range map[string]func() float64{
		"sluice_gossip_packets_sent_total":     func() float64 { return float64(st.PacketsSent.Load()) },
		"sluice_gossip_bytes_sent_total":       func() float64 { return float64(st.BytesSent.Load()) },
		"sluice_gossip_packets_received_total": func() float64 { return float64(st.PacketsReceived.Load()) },
		"sluice_gossip_bytes_received_total":   func() float64 { return float64(st.BytesReceived.Load()) },
		"sluice_gossip_bad_packets_total":      func() float64 { return float64(st.BadPackets.Load()) },
		"sluice_gossip_tokens_charged_total":   func() float64 { return float64(st.TokensCharged.Load()) },
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: "Gossip traffic: " + name + "."}, f))
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_members_alive", Help: "Cluster members believed alive, this node included."},
		func() float64 { return float64(s.NumAlive()) }))
}

func (m *metrics) forRule(name string) ruleCounters {
	return ruleCounters{
		admitted:  m.decisions.WithLabelValues(name, "admitted"),
		throttled: m.decisions.WithLabelValues(name, "throttled"),
		shadow:    m.decisions.WithLabelValues(name, "shadow_throttled"),
		soft:      m.decisions.WithLabelValues(name, "soft"),
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

// AdminHandler serves the daemon's operator endpoints: /healthz, /readyz,
// /metrics (Prometheus), /v1/rules and /v1/keys/{rule}/{key}.
func (d *Daemon) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ready := false
		select {
		case <-d.ready:
			ready = true
		default:
		}
		ok, failed := d.ReloadCounts()
		body := map[string]any{"ready": ready, "rules_source": d.Rules().Source, "rules_hash": d.Rules().Hash,
			"reloads_ok": ok, "reloads_failed": failed}
		if e := d.lastReloadError.Load(); e != nil {
			body["last_reload_error"] = *e
		}
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		writeJSON(w, body)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/rules", func(w http.ResponseWriter, r *http.Request) {
		rs := d.Rules()
		type rule struct {
			Name      string `json:"name"`
			Limit     int64  `json:"limit"`
			Period    string `json:"period"`
			Burst     int64  `json:"burst"`
			Overrides int    `json:"overrides"`
		}
		out := struct {
			Source      string `json:"source"`
			Hash        string `json:"hash"`
			UnknownRule string `json:"unknown_rule"`
			Rules       []rule `json:"rules"`
		}{Source: rs.Source, Hash: rs.Hash, UnknownRule: rs.UnknownRule.String()}
		for _, n := range rs.Names() {
			r := rs.ByName[n]
			out.Rules = append(out.Rules, rule{n, r.Limit.Count(), r.Limit.Period().String(), r.Limit.Burst(), len(r.Overrides)})
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /v1/keys/{rule}/{key}", func(w http.ResponseWriter, r *http.Request) {
		in := d.Inspect([]byte(r.PathValue("rule")), []byte(r.PathValue("key")))
		if !in.Known {
			http.Error(w, "no such rule", http.StatusNotFound)
			return
		}
		writeJSON(w, map[string]any{"rule": r.PathValue("rule"), "key": r.PathValue("key"),
			"balance": in.Balance, "debt": max(-in.Balance, 0), "limit": in.Limit, "burst": in.Burst})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// adminReadTimeout bounds a scrape's request headers.
const adminReadTimeout = 10 * time.Second
