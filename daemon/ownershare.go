package daemon

import (
	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/gossip"
)

var _ gossip.OwnerViewLedger = ledger{}

// OwnerView takes owner mode's view of a key of the limit named rule
// (gossip/ownershare.go): this daemon then admits only its share of the
// key's balance (bucket.Store.SetOwnerView). Not with Config.NoFirstShare,
// which turns the first-contact hold and its kin off.
func (l ledger) OwnerView(rule, key string, _ uint64, v gossip.OwnerView) {
	if l.d.noFirstShare {
		return
	}
	defer leave(l.d.fence.enter())
	ar, i, ok := l.d.rules.Load().resolve(rule)
	if !ok {
		return
	}
	k := []byte(key)
	l.d.store.SetOwnerView(ar.ns[i], k, ar.LimitsFor(k)[i],
		bucket.OwnerView{Users: v.Users, Balance: v.Balance, Epoch: v.AckEpoch, Counted: v.AckUsed, Interval: v.Interval}, l.d.now())
}
