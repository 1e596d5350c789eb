package daemon

import "github.com/prometheus/client_golang/prometheus"

// MetricsRegisterer is the registry the admin endpoint's /metrics serves:
// code running beside the daemon in its process (the built-in HTTP proxy)
// registers its series there.
func (d *Daemon) MetricsRegisterer() prometheus.Registerer { return d.metrics.reg }
