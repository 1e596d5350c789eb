package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice/ipc"
)

// registerIPC adds the socket server's defences to the metrics: what was
// done to keep a client from locking others out or poisoning the counts.
// Labels: none; a per-client label would let clients grow the series.
func (m *metrics) registerIPC(s *ipc.Server) {
	st := s.Stats()
	for _, c := range []struct {
		name, help string
		f          func() float64
	}{
		{"sluice_ipc_connections_refused_total", "Socket connections refused at --max-conns because no open connection had been idle long enough to close for them.",
			func() float64 { return float64(st.Rejected.Load()) }},
		{"sluice_ipc_connections_reaped_total", "Idle socket connections closed at --max-conns to admit a new client.",
			func() float64 { return float64(st.Reaped.Load()) }},
		{"sluice_ipc_slow_frames_total", "Socket connections closed because a frame, once begun, did not arrive whole in time (slow loris).",
			func() float64 { return float64(st.SlowFrames.Load()) }},
		{"sluice_ipc_protocol_errors_total", "Socket connections closed for malformed input.",
			func() float64 { return float64(st.ProtocolErrors.Load()) }},
		{"sluice_client_reports_clamped_total", "Calls clients reported deciding without the daemon that were not counted in sluice_client_failed_open_total or _closed_total, because they exceeded the report budget (at most 10M at once and 1M/s over all clients).",
			func() float64 { return float64(st.ReportClamped.Load()) }},
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help}, c.f))
	}
}
