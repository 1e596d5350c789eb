package gossip

import (
	"sync"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
)

// MemberStates counts the members memberlist knows in each state, this node
// included.
type MemberStates struct {
	Alive   int `json:"alive"`
	Suspect int `json:"suspect"`
	Dead    int `json:"dead"`
	Left    int `json:"left"`
	// At is when memberlist last took the census (at a push-pull exchange).
	At time.Time `json:"at"`
}

// memberlist keeps each member's state (alive, suspect, dead, left) to
// itself: its event callbacks report joins and departures but not
// suspicion. It does publish a census, the gauge memberlist.node.instances
// labelled node_state, through go-metrics at every push-pull exchange. The
// census sink below is a go-metrics sink, installed once per process, that
// keeps that gauge for each syncer (memberlist labels its metrics with the
// syncer's node name) and passes every metric on to the sink installed
// before it, so a program that embeds Sluice keeps its own go-metrics.

// censusLabel is the metric label memberlist is told to put on its metrics.
const censusLabel = "sluice_node"

type censusSink struct {
	next *metrics.Metrics // the global before ours

	mu     sync.Mutex
	byNode map[string]*MemberStates
}

var (
	censusOnce sync.Once
	census     *censusSink
)

// installCensus installs the census sink as go-metrics' global, once.
func installCensus() *censusSink {
	censusOnce.Do(func() {
		census = &censusSink{next: metrics.Default(), byNode: map[string]*MemberStates{}}
		conf := metrics.DefaultConfig("")
		conf.EnableHostname, conf.EnableRuntimeMetrics = false, false
		if _, err := metrics.NewGlobal(conf, census); err != nil {
			census = nil
		}
	})
	return census
}

// states returns the last census of node, if there was one.
func (c *censusSink) states(node string) (MemberStates, bool) {
	if c == nil {
		return MemberStates{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.byNode[node]
	if !ok {
		return MemberStates{}, false
	}
	return *s, true
}

func (c *censusSink) forget(node string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.byNode, node)
	c.mu.Unlock()
}

func (c *censusSink) SetGaugeWithLabels(key []string, val float32, labels []metrics.Label) {
	c.next.SetGaugeWithLabels(key, val, labels)
	if len(key) != 3 || key[0] != "memberlist" || key[1] != "node" || key[2] != "instances" {
		return
	}
	var node, state string
	for _, l := range labels {
		switch l.Name {
		case censusLabel:
			node = l.Value
		case "node_state":
			state = l.Value
		}
	}
	if node == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.byNode[node]
	if s == nil {
		s = &MemberStates{}
		c.byNode[node] = s
	}
	s.At = time.Now()
	switch state {
	case "alive":
		s.Alive = int(val)
	case "suspect":
		s.Suspect = int(val)
	case "dead":
		s.Dead = int(val)
	case "left":
		s.Left = int(val)
	}
}

func (c *censusSink) SetGauge(key []string, val float32)    { c.next.SetGauge(key, val) }
func (c *censusSink) EmitKey(key []string, val float32)     { c.next.EmitKey(key, val) }
func (c *censusSink) IncrCounter(key []string, val float32) { c.next.IncrCounter(key, val) }
func (c *censusSink) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	c.next.IncrCounterWithLabels(key, val, labels)
}
func (c *censusSink) AddSample(key []string, val float32) { c.next.AddSample(key, val) }
func (c *censusSink) AddSampleWithLabels(key []string, val float32, labels []metrics.Label) {
	c.next.AddSampleWithLabels(key, val, labels)
}

// MemberStates returns memberlist's last census of member states as this
// node sees them, and false before the first push-pull exchange.
func (s *Syncer) MemberStates() (MemberStates, bool) { return s.census.states(s.self) }
