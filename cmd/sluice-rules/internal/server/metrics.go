package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice/internal/rulesapi"
)

// metrics are the service's Prometheus series, looked up once at start.
type metrics struct {
	changes            *prometheus.CounterVec
	validationFailures prometheus.Counter
	confirmRefusals    prometheus.Counter
	staleRefusals      prometheus.Counter
	served200          prometheus.Counter
	served304          prometheus.Counter
	version            prometheus.Gauge
	waiting            prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	serves := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_rules_serves_total",
		Help: "Requests for the served rules document by answer: 200 (a document) or 304 (not modified). The 304 ratio is rate(code=\"304\") / rate(all).",
	}, []string{"code"})
	m := &metrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rules_changes_total",
			Help: "Stored changes (each a new version, or a team/token operation) by action.",
		}, []string{"action"}),
		validationFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rules_validation_failures_total",
			Help: "Changes refused because the daemon's parser found the rules invalid.",
		}),
		confirmRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rules_confirm_refusals_total",
			Help: "Changes refused because they remove or loosen limits beyond the factor without confirm=true.",
		}),
		staleRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rules_stale_refusals_total",
			Help: "Changes refused because their If-Match no longer matched (412).",
		}),
		served200: serves.WithLabelValues("200"),
		served304: serves.WithLabelValues("304"),
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rules_version",
			Help: "The version of the served rules document.",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rules_longpoll_waiting",
			Help: "Long-poll requests for the served document being held now.",
		}),
	}
	for _, a := range []string{rulesapi.ActionCreate, rulesapi.ActionUpdate, rulesapi.ActionDelete, rulesapi.ActionReplace,
		rulesapi.ActionRollback, rulesapi.ActionTeamCreate, rulesapi.ActionTeamDelete, rulesapi.ActionTokenCreate, rulesapi.ActionTokenRevoke} {
		m.changes.WithLabelValues(a) // every series present from the start
	}
	reg.MustRegister(m.changes, m.validationFailures, m.confirmRefusals, m.staleRefusals, serves, m.version, m.waiting)
	return m
}
