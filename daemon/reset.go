package daemon

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicelabs/sluice/daemon/adminapi"
	"github.com/sluicelabs/sluice/gossip"
)

// Errors ResetKey returns for requests it refuses; they change nothing.
var (
	ErrUnknownRule = errors.New("no such rule")
	ErrBadKey      = errors.New("bad key")
)

var _ gossip.ResetLedger = ledger{}

// Reset clears key under one limit of a rule (name as in limitName) and
// raises the store's epochs above at (see gossip.ResetLedger).
func (l ledger) Reset(limit, key string, at uint64, olderOnly bool) {
	l.d.store.RaiseEpochs(at)
	ar, i, ok := l.d.rules.Load().resolve(limit)
	if !ok {
		return
	}
	upTo := uint64(math.MaxUint64)
	if olderOnly {
		upTo = at
	}
	l.d.store.Reset(ar.ns[i], []byte(key), upTo)
}

// ResetKey clears key's consumption under every limit of rule, so the key
// is admitted again at its full burst: on this node and, in a cluster, on
// every member (see gossip.Syncer.Reset for how peers' earlier counters are
// kept from charging it again). It is an operator's action, for a client
// limited by mistake or by an incident now over.
func (d *Daemon) ResetKey(rule, key string) (adminapi.ResetView, error) {
	ar, ok := d.rules.Load().byName[rule]
	if !ok {
		return adminapi.ResetView{}, fmt.Errorf("reset %s: %w", rule, ErrUnknownRule)
	}
	if key == "" || len(key) > d.store.MaxKeyLen() {
		return adminapi.ResetView{}, fmt.Errorf("reset %s: %w: %d bytes, want 1 to %d", rule, ErrBadKey, len(key), d.store.MaxKeyLen())
	}
	limits := make([]string, len(ar.ns))
	for i := range limits {
		limits[i] = limitName(rule, i)
	}
	v := adminapi.ResetView{Rule: rule, Key: key, Node: d.settings.NodeName}
	var at uint64
	if d.syncer == nil {
		at = uint64(time.Now().UnixNano())
		for _, l := range limits {
			ledger{d}.Reset(l, key, at, false)
		}
	} else {
		res, err := d.syncer.Reset(limits, key)
		if err != nil {
			return adminapi.ResetView{}, fmt.Errorf("reset %s: %w", rule, err)
		}
		at, v.Told, v.Failed = res.At, res.Told, res.Failed
		if v.Failed == nil {
			v.Failed = []string{}
		}
		v.Clustered, v.Peers = true, res.Members
	}
	v.At = time.Unix(0, int64(at)).UTC()
	d.log.Info("key reset by an operator", "rule", rule, "key_redacted", redactKey(key), "peers_told", v.Told, "peers", v.Peers)
	return v, nil
}
