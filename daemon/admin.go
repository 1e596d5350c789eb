package daemon

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/daemon/adminapi"
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
	// fetchErrors counts failures to reach the rules service.
	fetchErrors                          prometheus.Counter
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
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.decisions, m.reloads, m.reloadAt, m.fetchErrors, m.overshoot, m.latency, m.clientFailedOpen, m.clientFailedClosed,
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
	m.registerTransport(s.Transport())
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_members_alive", Help: "Cluster members believed alive, this node included."},
		func() float64 { return float64(s.NumAlive()) }))
	for _, state := range []string{"alive", "suspect", "dead", "left"} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_members", ConstLabels: prometheus.Labels{"state": state},
			Help: "Members memberlist knows in each state, this node included, as of its last census (taken at every push-pull exchange; dead and left members are forgotten after a while).",
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

// AdminHandler serves the daemon's operator endpoints:
//
//	GET  /                     the status page (members, rules, busiest keys, live decision rates)
//	GET  /static/{file}        the status page's script and stylesheet
//	GET  /healthz              liveness
//	GET  /readyz               readiness, with the rules in force and reload results
//	GET  /metrics              Prometheus
//	GET  /v1/rules             the rules in force
//	GET  /v1/members           the cluster as this node sees it, rules drift flagged
//	GET  /v1/keys/{rule}/{key} one key: balance, debt, per-origin counters
//	GET  /v1/top?n=N           the N keys deepest into their burst (keys redacted
//	                           unless Settings.AdminShowKeys)
//	GET  /v1/stats             decisions so far, per rule and outcome
//	POST /v1/reload            re-read the rules (file or URL) now
//	DELETE /v1/keys/{rule}/{key} clear the key's debt, cluster-wide (see ResetKey)
//	/debug/pprof/              Go profiles, only with Settings.Pprof
//
// Requests that change state (POST, DELETE) must carry the AdminHeader
// header or a JSON body (see requireNonSimple). The handler does not check
// the Host header: Run serves it behind a check for its bound address.
func (d *Daemon) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", statusPage())
	mux.Handle("GET /static/{file}", statusAssets())
	d.probes(mux)
	mux.HandleFunc("GET /v1/rules", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.RulesView()) })
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.MembersView()) })
	mux.HandleFunc("GET /v1/keys/{rule}/{key}", func(w http.ResponseWriter, r *http.Request) {
		kv, ok := d.KeyView(r.PathValue("rule"), r.PathValue("key"))
		if !ok {
			writeJSONStatus(w, http.StatusNotFound, map[string]string{"error": "no such rule: " + r.PathValue("rule")})
			return
		}
		writeJSON(w, kv)
	})
	mux.HandleFunc("DELETE /v1/keys/{rule}/{key}", d.serveReset)
	mux.HandleFunc("GET /v1/top", func(w http.ResponseWriter, r *http.Request) {
		n := 10
		if q := r.URL.Query().Get("n"); q != "" {
			v, err := strconv.Atoi(q)
			if err != nil || v < 1 || v > maxTop {
				writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("n must be a number in [1, %d]", maxTop)})
				return
			}
			n = v
		}
		writeJSON(w, map[string]any{"keys": d.busiestShown(n)})
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.StatsView()) })
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		err := d.Reload()
		out := map[string]any{"ok": err == nil, "rules_hash": d.Rules().Hash, "rules_source": d.Rules().Source}
		if err != nil {
			out["error"] = err.Error()
			writeJSONStatus(w, http.StatusUnprocessableEntity, out)
			return
		}
		writeJSON(w, out)
	})
	if d.settings.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return requireNonSimple(mux)
}

// MetricsHandler serves what may be scraped from a wider network than the
// admin API: /metrics, /healthz and /readyz, nothing else (no keys, no rules,
// no mutation).
func (d *Daemon) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	d.probes(mux)
	return mux
}

// probes mounts /healthz, /readyz and /metrics.
func (d *Daemon) probes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", d.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{}))
}

// serveReset is DELETE /v1/keys/{rule}/{key}.
func (d *Daemon) serveReset(w http.ResponseWriter, r *http.Request) {
	v, err := d.ResetKey(r.PathValue("rule"), r.PathValue("key"))
	switch {
	case errors.Is(err, ErrUnknownRule):
		writeJSONStatus(w, http.StatusNotFound, map[string]string{"error": "no such rule: " + r.PathValue("rule")})
	case errors.Is(err, ErrBadKey):
		writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	case err != nil:
		writeJSONStatus(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		writeJSON(w, v)
	}
}

// busiestShown is Busiest with keys redacted unless Settings.AdminShowKeys.
func (d *Daemon) busiestShown(n int) []adminapi.BusyKey {
	top := d.Busiest(n)
	if !d.settings.AdminShowKeys {
		for i := range top {
			top[i].Key, top[i].Redacted = redactKey(top[i].Key), true
		}
	}
	return top
}

func (d *Daemon) serveReady(w http.ResponseWriter, r *http.Request) {
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
	if d.fetcher != nil {
		body["rules_url"] = d.settings.RulesURL
		body["rules_url_reachable"] = !d.fetchFailing.Load()
		if at := d.lastFetchOK.Load(); at != 0 {
			body["rules_url_last_answer"] = time.Unix(at, 0).UTC().Format(time.RFC3339)
		}
		if e := d.lastFetchError.Load(); e != nil {
			body["rules_url_error"] = *e
		}
		d.fallbackView(body)
	}
	d.gossipSecurityView(body)
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	writeJSON(w, body)
}

// adminapi.RulesView describes the rules in force.
func (d *Daemon) RulesView() adminapi.RulesView {
	rs := d.Rules()
	out := adminapi.RulesView{Source: rs.Source, Hash: rs.Hash, UnknownRule: rs.UnknownRule.String(), Rules: []adminapi.RuleView{}}
	for _, n := range rs.Names() {
		r := rs.ByName[n]
		first := r.Limits[0]
		v := adminapi.RuleView{Name: n, Limit: first.Count(), Period: first.Period().String(), Burst: first.Burst(),
			Algorithm: first.Algorithm().String(), Overrides: len(r.Overrides), Shadow: r.Shadow, SoftPercent: r.SoftPercent}
		if len(r.Limits) > 1 {
			for _, l := range r.Limits {
				v.Limits = append(v.Limits, limitView(l))
			}
		}
		out.Rules = append(out.Rules, v)
	}
	return out
}

// adminapi.MembersView lists the cluster's members as this node sees them and flags
// those whose rules hash differs from this node's: they decide the same
// keys under other limits.
func (d *Daemon) MembersView() adminapi.MembersView {
	hash := d.Rules().Hash
	out := adminapi.MembersView{Self: d.settings.NodeName, RulesHash: hash, Clustered: d.syncer != nil}
	if d.syncer == nil {
		out.Members = []adminapi.MemberView{{Name: d.settings.NodeName, State: "alive", Version: Version, RulesHash: hash, Self: true}}
		return out
	}
	if c, ok := d.syncer.MemberStates(); ok {
		out.Census = &adminapi.MemberStates{Alive: c.Alive, Suspect: c.Suspect, Dead: c.Dead, Left: c.Left, At: c.At}
	}
	for _, m := range d.syncer.Members() {
		v := adminapi.MemberView{Name: m.Name, Addr: m.Addr, State: m.State, Version: m.Meta.Version, RulesHash: m.Meta.RulesHash,
			Self: m.Name == d.settings.NodeName}
		if m.State == "alive" {
			v.Drift = m.Meta.RulesHash != hash
			out.Drift = out.Drift || v.Drift
			if m.Meta.SecurityKnown {
				v.Encrypted, v.Labelled = &m.Meta.Encrypted, &m.Meta.Labelled
				if !m.Meta.Encrypted {
					out.Unencrypted++
				}
			}
		} else {
			v.Since = m.Since.UTC().Format(time.RFC3339)
		}
		out.Members = append(out.Members, v)
	}
	return out
}

// adminapi.KeyView reads one key's bucket without charging it.
func (d *Daemon) KeyView(rule, key string) (adminapi.KeyView, bool) {
	ar, ok := d.rules.Load().byName[rule]
	if !ok {
		return adminapi.KeyView{}, false
	}
	k := []byte(key)
	now := d.now()
	lims := ar.LimitsFor(k)
	b, held := d.store.Balance(ar.ns[0], k, lims[0], now)
	v := adminapi.KeyView{Rule: rule, Key: key, Balance: b, Debt: max(-b, 0), Limit: lims[0].Count(), Period: lims[0].Period().String(),
		Burst: lims[0].Burst(), Algorithm: lims[0].Algorithm().String(), Held: held, Origins: []adminapi.OriginView{}}
	if len(lims) > 1 {
		for i, l := range lims {
			lv := limitView(l)
			lv.Balance, lv.Held = d.store.Balance(ar.ns[i], k, l, now)
			v.Limits = append(v.Limits, lv)
		}
	}
	if c, ok := d.store.Local(ar.ns[0], k); ok {
		v.Origins = append(v.Origins, adminapi.OriginView{Origin: d.settings.NodeName, Epoch: c.Epoch, Used: c.Used})
	}
	if d.syncer != nil {
		for _, o := range d.syncer.Origins(rule, key) {
			v.Origins = append(v.Origins, adminapi.OriginView{Origin: o.Origin, Epoch: o.Epoch, Used: o.Used})
		}
	}
	return v, true
}

// maxTop caps /v1/top's n.
const maxTop = 1000

// Busiest returns up to n keys with the largest share of their burst
// spent, most spent first. It visits every bucket that is not full (shard by
// shard, as push-pull does), so it is for operators, not the request path.
func (d *Daemon) Busiest(n int) []adminapi.BusyKey {
	top := make([]adminapi.BusyKey, 0, n+1)
	d.eachHeld(func(rule string, lim bucket.Limit, c bucket.Consumption, balance float64) bool {
		used := 1 - balance/float64(lim.Burst())
		if len(top) == n && used <= top[n-1].Used {
			return true
		}
		i, _ := slices.BinarySearchFunc(top, used, func(k adminapi.BusyKey, u float64) int { return cmp.Compare(u, k.Used) })
		top = slices.Insert(top, i, adminapi.BusyKey{Rule: rule, Key: strings.Clone(c.Key), Balance: balance, Burst: lim.Burst(), Used: used})
		if len(top) > n {
			top = top[:n]
		}
		return true
	})
	return top
}

// StatsView reads the decision counters of the rules in force.
func (d *Daemon) StatsView() adminapi.StatsView {
	out := adminapi.StatsView{Node: d.settings.NodeName, Time: time.Now(), Rules: map[string]adminapi.RuleStats{}}
	for name, ar := range d.rules.Load().byName {
		c := ar.counted
		out.Rules[name] = adminapi.RuleStats{Admitted: counterValue(c.admitted), Throttled: counterValue(c.throttled),
			ShadowThrottled: counterValue(c.shadow), Soft: counterValue(c.soft)}
	}
	return out
}

func counterValue(c prometheus.Counter) uint64 {
	var m dto.Metric
	if c == nil || c.Write(&m) != nil {
		return 0
	}
	return uint64(m.GetCounter().GetValue())
}

func writeJSON(w http.ResponseWriter, v any) { writeJSONStatus(w, http.StatusOK, v) }

func writeJSONStatus(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func limitView(l bucket.Limit) adminapi.LimitView {
	return adminapi.LimitView{Algorithm: l.Algorithm().String(), Limit: l.Count(), Period: l.Period().String(), Burst: l.Burst()}
}
