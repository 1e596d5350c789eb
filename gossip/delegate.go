package gossip

// delegate adapts the syncer to memberlist.Delegate. memberlist calls
// NotifyMsg from its one packet-handler goroutine (it must not block),
// LocalState and MergeRemoteState from push-pull streams, concurrently.
// Sluice sends its own packets (counters.go), so GetBroadcasts has none.
type delegate Syncer

func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}

func (d *delegate) NotifyMsg(b []byte)                         { (*Syncer)(d).receive(b) }
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return (*Syncer)(d).localState() }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     { (*Syncer)(d).mergeState(buf) }
