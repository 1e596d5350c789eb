package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicelabs/sluice/clientlib"
)

// undecidedCauses are the causes a proxy's undecided calls are counted by.
var undecidedCauses = []clientlib.Cause{
	clientlib.CauseDaemonDown, clientlib.CauseTimeout, clientlib.CauseProtocol,
	clientlib.CauseClosed, clientlib.CauseCanceled, clientlib.CauseInternal,
}

// RegisterMetrics adds the proxy's series to reg; up says whether the proxy
// has its daemon. They read counters the proxy keeps anyway; nothing is
// looked up per request.
func (p *Server) RegisterMetrics(reg prometheus.Registerer, up func() bool) {
	ev := p.cfg.Events
	for _, c := range undecidedCauses {
		labels := prometheus.Labels{"cause": c.String()}
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_proxy_failed_open_total", ConstLabels: labels,
				Help: "Requests the proxy let through unlimited because the daemon did not decide, by cause."},
				func() float64 { return float64(ev.FailOpen.Total(c)) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_proxy_failed_closed_total", ConstLabels: labels,
				Help: "Requests the proxy answered 503 because the daemon did not decide and it fails closed, by cause."},
				func() float64 { return float64(ev.FailClosed.Total(c)) }),
		)
	}
	gauge := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_proxy_invalid_total",
			Help: "Requests answered 500 because the limiter refused them as invalid: a misconfigured route (cost above the burst, unknown rule under unknown_rule: deny)."},
			func() float64 { return float64(ev.Invalid()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_proxy_unknown_rule_total",
			Help: "Requests passed unlimited because the daemon does not know their rule and admits unknown rules."},
			func() float64 { return float64(ev.UnknownRule()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_proxy_daemon_up", Help: "1 while the proxy has a connection to its daemon, else 0."},
			func() float64 { return gauge(up()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_proxy_routes_unchecked", Help: "1 while the routes in force have not been checked against the daemon's rules (it could not be asked)."},
			func() float64 { return gauge(p.unchecked.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_proxy_routes_invalid", Help: "1 when the routes in force failed their last check against the daemon's rules (an unknown rule, or a cost above a burst)."},
			func() float64 { return gauge(p.invalid.Load()) }),
	)
}

// ServeMetrics serves reg's /metrics on addr until the returned function is called.
func ServeMetrics(addr string, reg *prometheus.Registry, log hclog.Logger) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("proxy metrics listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("proxy metrics endpoint stopped", "error", err)
		}
	}()
	log.Info("proxy metrics serving", "addr", l.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}
