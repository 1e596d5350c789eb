package sim

import (
	"math"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicelabs/sluice/gossip"
)

// membership is one node's view of the simulated cluster: what the syncer
// calls memberlist for. A member is addressed by its slot (Node.Port).
type membership struct {
	s *Sim
	n *node
}

var _ gossip.Membership = membership{}

func (m membership) SendBestEffort(to *memberlist.Node, msg []byte) error {
	m.s.send(m.n, to, msg)
	return nil
}

func (m membership) SendReliable(to *memberlist.Node, msg []byte) error {
	return nil // resets are not simulated
}

func (m membership) Join([]string) (int, error)     { return 0, nil }
func (m membership) Leave(time.Duration) error      { return nil }
func (m membership) UpdateNode(time.Duration) error { return nil }
func (m membership) NumMembers() int                { return m.s.alive }
func (m membership) Members() []*memberlist.Node    { return nil }
func (m membership) LocalNode() *memberlist.Node    { return &m.n.self }
func (m membership) Shutdown() error                { return nil }

// cut reports whether a and b are on different sides of the partition now.
func (s *Sim) cut(a, b int) bool {
	p := s.cfg.Partition
	if p.To <= p.From || s.now < int64(p.From) || s.now >= int64(p.To) {
		return false
	}
	return (a < p.Split) != (b < p.Split)
}

// silenced reports whether from is the hot key's owner while
// Config.SilenceOwner silences it (the owner named at the silence's start).
func (s *Sim) silenced(from *node) bool {
	w := s.cfg.SilenceOwner
	if w.To <= w.From || s.now < int64(w.From) || s.now >= int64(w.To) {
		return false
	}
	if s.silent == "" {
		s.silent, _ = from.syncer.OwnerOf(ruleHot, string(s.hot))
	}
	return from.name == s.silent
}

// delay is one packet's one-way flight: the fixed latency and an
// exponential jitter (which reorders packets).
func (s *Sim) delay() int64 {
	d := int64(s.cfg.Latency)
	if j := float64(s.cfg.Jitter); j > 0 {
		d += int64(-j * math.Log(1-s.rnd.Float64()))
	}
	return d
}

// send puts a best-effort packet on the network.
func (s *Sim) send(from *node, to *memberlist.Node, msg []byte) {
	from.pktSent++
	from.bytesSent += uint64(len(msg))
	if s.isolating {
		return // a replay's packets go nowhere (isolate.go)
	}
	dst := int(to.Port)
	if dst >= len(s.nodes) || s.nodes[dst].name != to.Name {
		return // a member that crashed: its address answers no more
	}
	if s.cfg.Loss > 0 && s.rnd.Float64() < s.cfg.Loss {
		return
	}
	if s.cut(from.i, dst) || s.silenced(from) {
		return
	}
	s.push(event{at: s.now + s.delay(), kind: evPacket, node: int32(dst), from: int32(from.i), gen: s.nodes[dst].gen,
		msg: append([]byte(nil), msg...)})
}

// deliver hands a packet to its node, if that node is still the one it was
// sent to and alive.
func (s *Sim) deliver(e event) {
	n := s.nodes[e.node]
	if !n.alive || n.gen != e.gen {
		return
	}
	if !s.knows(n.i, int(e.from)) {
		return // the sender guard refuses a sender that is not a member
	}
	n.pktRecv++
	n.bytesRcv += uint64(len(e.msg))
	n.trace.add(traceEvent{at: s.now, kind: trPacket, msg: e.msg})
	start := time.Now()
	n.dg.NotifyMsg(e.msg)
	n.busy += time.Since(start)
}

// pushPull starts a push-pull from n with a random live member, as
// memberlist does every (stretched) PushPullInterval: n's state travels to
// the peer, which merges it and answers with its own, which n merges.
func (s *Sim) pushPull(n *node) {
	if s.alive < 2 {
		return
	}
	var peer int
	for tries := 0; ; tries++ {
		peer = s.rnd.IntN(len(s.nodes))
		if peer != n.i && s.nodes[peer].alive {
			break
		}
		if tries > 64 {
			return
		}
	}
	if s.cut(n.i, peer) || !s.knows(n.i, peer) {
		return // the TCP connection fails, or n does not know peer yet
	}
	n.trace.add(traceEvent{at: s.now, kind: trGive})
	start := time.Now()
	st := n.dg.LocalState(false)
	n.busy += time.Since(start)
	n.stateBytes += uint64(len(st))
	s.push(event{at: s.now + 2*s.delay(), kind: evState, node: int32(peer), from: int32(n.i), gen: s.nodes[peer].gen, msg: st})
}

// state delivers a push-pull state; a state that is not a reply is
// answered with the receiver's own.
func (s *Sim) state(e event) {
	n := s.nodes[e.node]
	if !n.alive || n.gen != e.gen {
		return
	}
	n.stateBytes += uint64(len(e.msg))
	n.trace.add(traceEvent{at: s.now, kind: trState, join: e.join, msg: e.msg})
	start := time.Now()
	var reply []byte
	if !e.join {
		reply = n.dg.LocalState(false)
	}
	n.dg.MergeRemoteState(e.msg, false)
	n.busy += time.Since(start)
	if reply != nil && !s.cut(n.i, int(e.from)) {
		n.stateBytes += uint64(len(reply))
		from := s.nodes[e.from]
		s.push(event{at: s.now + 2*s.delay(), kind: evState, node: e.from, from: int32(n.i), gen: from.gen, join: true, msg: reply})
	}
}

// pushPullEvery is memberlist's push-pull interval for n members: above 32
// it is stretched by ⌈log2 n − log2 32⌉ + 1 (pushPullScale).
func pushPullEvery(interval time.Duration, n int) time.Duration {
	if n <= 32 {
		return interval
	}
	mult := math.Ceil(math.Log2(float64(n))-math.Log2(32)) + 1
	return time.Duration(mult) * interval
}

// suspicionTimeout is memberlist's LAN suspicion timeout for n members
// (SuspicionMult 4, ProbeInterval 1 s), plus a probe interval to notice.
func suspicionTimeout(n int) time.Duration {
	scale := max(1, math.Log10(float64(n)))
	return time.Duration(4*scale*float64(time.Second)) + time.Second
}
