package sim

import "container/heap"

// The event queue: a min-heap on (time, sequence), so events at the same
// instant run in the order they were scheduled and a run repeats itself.

type kind uint8

const (
	evRequest      kind = iota // a node's next request on its load
	evRound                    // a node's gossip round
	evPacket                   // a best-effort packet arrives
	evPushPull                 // a node starts a push-pull exchange
	evState                    // a push-pull state arrives (reliable)
	evProbe                    // a convergence probe is consumed
	evPrune                    // a node prunes its seen table
	evChurn                    // a node is replaced
	evDeclare                  // the cluster declares a crashed node dead
	evSample                   // the simulator samples its measurements
	evJoin                     // a node learns of a member as the cluster forms
	evProbeMeasure             // an owner-mode probe's measured consumption (holders.go)
	evKillOwner                // the hot key's owner crashes (killowner.go)
	evKillReplica              // the hot key's replica crashes (killowner.go)
	evKillThird                // the hot key's third member crashes (killowner.go)
)

type event struct {
	at   int64 // virtual nanoseconds since the start
	seq  uint64
	kind kind
	node int32  // the node it happens at
	from int32  // for packets and states: the sender
	gen  uint32 // the node's generation it was meant for
	join bool   // a state: sent at a join (merge only, no reply) / a reply
	msg  []byte
}

type queue []event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = event{}
	*q = old[:len(old)-1]
	return e
}

// push schedules e.
func (s *Sim) push(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

// pop takes the next event.
func (s *Sim) pop() event { return heap.Pop(&s.q).(event) }
