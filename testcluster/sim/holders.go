package sim

import (
	"strconv"
	"time"
)

// Owner-mode probes. In owner mode a node hears of a key only while it
// uses it, so convergence is measured as issue 20 defines it: a consumption
// is reflected on every node that holds the key. A probe first has
// Config.ProbeHolders nodes, spread over the cluster, each consume one
// token of a fresh key (they now hold it and the key's owner answers them);
// probeSettle later the first of them consumes one more, and the probe's
// lag runs from then until every other holder's ledger has been charged
// both that token and the other holders' first ones.

// probeSettle is the wait between a probe's holders taking their first
// tokens and the measured one: ten gossip intervals, at least 100 ms,
// for the holders to have heard each other.
func probeSettle(c Config) time.Duration { return max(10*c.GossipInterval, 100*time.Millisecond) }

// holderProbe starts an owner-mode probe: its holders take their first
// tokens now and the measured consumption is scheduled.
func (s *Sim) holderProbe() {
	if s.now > int64(s.cfg.Duration)-int64(probeTail(s.cfg.Duration))-int64(probeSettle(s.cfg)) {
		return
	}
	k := len(s.m.probes)
	key := "p" + strconv.Itoa(k)
	h := min(s.cfg.ProbeHolders, len(s.nodes))
	p := &probe{from: k % len(s.nodes), charged: map[int32]uint64{}, seen: make([]uint64, (len(s.nodes)+63)/64)}
	for j := range h {
		i := (p.from + j*len(s.nodes)/h) % len(s.nodes)
		n := s.nodes[i]
		if !n.alive {
			continue
		}
		if r, err := s.take(n, 1, []byte(key), s.lim.probe); err != nil || !r.Allowed {
			continue
		}
		p.holders = append(p.holders, int32(i))
		p.gens = append(p.gens, n.gen)
	}
	if len(p.holders) < 2 || p.holders[0] != int32(p.from) {
		return // no two holders, or the prober is not one of them
	}
	s.m.probes = append(s.m.probes, p)
	s.m.byKey[key] = p
	s.push(event{at: s.now + int64(probeSettle(s.cfg)), kind: evProbeMeasure, from: int32(k)})
}

// measureProbe is a holder probe's measured consumption at its first
// holder; the holders that must reflect it are the others still up.
func (s *Sim) measureProbe(k int) {
	p := s.m.probes[k]
	n := s.nodes[p.from]
	key := "p" + strconv.Itoa(k)
	if !n.alive || n.gen != p.gens[0] {
		delete(s.m.byKey, key)
		return
	}
	if r, err := s.take(n, 1, []byte(key), s.lim.probe); err != nil || !r.Allowed {
		delete(s.m.byKey, key)
		return
	}
	p.start, p.measuring = s.now, true
	p.want = uint64(len(p.holders)) // the other holders' first tokens and this one
	for j, i := range p.holders[1:] {
		if m := s.nodes[i]; m.alive && m.gen == p.gens[j+1] {
			p.need++ // reflected at its first charge from now that makes want
		}
	}
	if p.need == 0 {
		delete(s.m.byKey, key)
	}
}

// holderCharged records tokens of probe p charged at node n.
func (s *Sim) holderCharged(p *probe, n *node, tokens uint64, key string) {
	j := -1
	for x, i := range p.holders {
		if int(i) == n.i && p.gens[x] == n.gen {
			j = x
		}
	}
	if j <= 0 {
		return // not a holder, or the prober
	}
	p.charged[int32(n.i)] += tokens
	if p.measuring && p.charged[int32(n.i)] >= p.want && p.mark(n.i, s.now-p.start) {
		delete(s.m.byKey, key)
	}
}

// mark records that slot i reflects the probe after lag; true when every
// node needed does.
func (p *probe) mark(i int, lag int64) bool {
	if p.seen[i/64]&(1<<(i%64)) != 0 {
		return p.settled
	}
	p.seen[i/64] |= 1 << (i % 64)
	if p.got++; p.got >= p.need {
		p.settled, p.lag = true, lag
	}
	return p.settled
}
