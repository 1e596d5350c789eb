package main

import (
	"fmt"

	"github.com/hashicorp/go-metrics"

	"github.com/sluicelabs/sluice/gossip"
)

// installCensusSink makes a gossip.CensusSink go-metrics' process-wide sink,
// where memberlist reports its member census (the only place it reports
// suspected members), and returns it for the daemon's configuration. The
// program does this, once: no library of Sluice touches go-metrics' global.
// go-metrics' own runtime collector (a goroutine) and hostname prefix are
// off; every metric but the census is dropped by the sink.
func installCensusSink() (*gossip.CensusSink, error) {
	sink := gossip.NewCensusSink()
	conf := metrics.DefaultConfig("")
	conf.EnableHostname = false
	conf.EnableRuntimeMetrics = false
	if _, err := metrics.NewGlobal(conf, sink); err != nil {
		return nil, fmt.Errorf("install the member census sink: %w", err)
	}
	return sink, nil
}
