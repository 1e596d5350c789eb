package gossip

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-metrics"
)

// CensusSink is a go-metrics sink that keeps, for each syncer given it in
// Config.Census, the member census memberlist reports through go-metrics:
// the memberlist.node.instances gauge, set at every push-pull exchange,
// by node state. It is the only source of a suspect count (memberlist tells
// suspicion to no one else), so a syncer with one reports
// MemberStates.Suspect.
//
// memberlist writes to go-metrics' process-wide sink only, so the sink must
// be installed there, and only a program may do that (metrics.NewGlobal,
// once, with runtime metrics and the hostname prefix off); this package
// never touches go-metrics' global. Every other metric is ignored. One sink
// serves every syncer in the process: each tags its metrics with a label of
// its own (censusLabel) and reads back only its own census.
type CensusSink struct {
	mu sync.Mutex
	by map[string]map[string]int // censusLabel value → memberlist's state name (alive, suspect, dead, left) → count
}

// censusLabel names the label each syncer tags memberlist's metrics with,
// so that syncers sharing a process and a sink are told apart.
const censusLabel = "sluice_syncer"

// censusIDs numbers the syncers of the process for censusLabel.
var censusIDs atomic.Uint64

var _ metrics.MetricSink = (*CensusSink)(nil)

// NewCensusSink returns an empty sink.
func NewCensusSink() *CensusSink { return &CensusSink{by: map[string]map[string]int{}} }

// SetGaugeWithLabels keeps memberlist.node.instances; it ignores the rest.
func (c *CensusSink) SetGaugeWithLabels(key []string, val float32, labels []metrics.Label) {
	if len(key) != 3 || key[0] != "memberlist" || key[1] != "node" || key[2] != "instances" {
		return
	}
	var id, state string
	for _, l := range labels {
		switch l.Name {
		case censusLabel:
			id = l.Value
		case "node_state":
			state = l.Value
		}
	}
	if id == "" || state == "" {
		return // a syncer that was not given this sink
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.by[id]
	if r == nil {
		r = map[string]int{}
		c.by[id] = r
	}
	r[state] = int(val)
}

// suspect is the count of suspected members in the syncer id's latest
// report, and whether there is one.
func (c *CensusSink) suspect(id string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.by[id]
	return r["suspect"], ok
}

// forget drops a syncer's census, at its Shutdown.
func (c *CensusSink) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.by, id)
}

// newCensusID is a value of censusLabel no other syncer of the process has.
func newCensusID() string { return strconv.FormatUint(censusIDs.Add(1), 10) }

// SetGauge is ignored (memberlist's census gauge carries labels).
func (c *CensusSink) SetGauge([]string, float32) {}

// EmitKey is ignored.
func (c *CensusSink) EmitKey([]string, float32) {}

// IncrCounter is ignored.
func (c *CensusSink) IncrCounter([]string, float32) {}

// IncrCounterWithLabels is ignored.
func (c *CensusSink) IncrCounterWithLabels([]string, float32, []metrics.Label) {}

// AddSample is ignored.
func (c *CensusSink) AddSample([]string, float32) {}

// AddSampleWithLabels is ignored.
func (c *CensusSink) AddSampleWithLabels([]string, float32, []metrics.Label) {}
