package gossip

import (
	"slices"
	"strings"
	"time"
)

// What operators see of the syncer: its members and what each origin has
// reported of a key. None of it is on the request path.

// Member is one node as this node sees it.
type Member struct {
	Name string
	Addr string
	// State is "alive" for a member in the cluster (memberlist counts a
	// suspected member as alive until it is declared dead) and "gone" for one
	// that died or left within the last hour and has not come back.
	State string
	Since time.Time // when it went away, for a gone member
	Meta  Meta      // what it advertises; zero for a gone member
}

// Members lists the members as this node sees them, itself included, alive
// ones first, each group by name.
func (s *Syncer) Members() []Member {
	s.mu.Lock()
	out := make([]Member, 0, len(s.peers)+len(s.failed))
	for _, n := range s.peers {
		m := Member{Name: n.Name, Addr: n.Address(), State: "alive"}
		m.Meta, _ = decodeMeta(n.Meta)
		out = append(out, m)
	}
	for name, f := range s.failed {
		out = append(out, Member{Name: name, Addr: f.addr, State: "gone", Since: f.since})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int {
		if a.State != b.State {
			return strings.Compare(a.State, b.State) // "alive" < "gone"
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// OriginCount is how much of one key's consumption an origin has reported
// here, in the origin's current bucket epoch and window.
type OriginCount struct {
	Origin string
	Epoch  uint64
	Window uint64 // 0 for bucket algorithms
	Used   uint64 // the highest cumulative count heard
}

// Origins lists what every other node has reported of rule/key, by origin.
// It scans the table of counters heard, so it is for operators, not for
// the request path.
func (s *Syncer) Origins(rule, key string) []OriginCount {
	s.mu.Lock()
	var out []OriginCount
	for k, sr := range s.seen {
		if k.rule == rule && k.key == key {
			out = append(out, OriginCount{Origin: k.origin, Epoch: sr.cur.epoch, Window: sr.cur.window, Used: sr.cur.hi})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b OriginCount) int { return strings.Compare(a.Origin, b.Origin) })
	return out
}
