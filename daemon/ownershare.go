package daemon

import "github.com/sluicelabs/sluice/gossip"

var _ gossip.UsersLedger = ledger{}

// Users takes owner mode's count of the nodes using a key of the limit
// named rule (gossip/ownershare.go): this daemon then admits from the
// key's positive balance only its share of it (bucket.Store.SetUsers).
func (l ledger) Users(rule, key string, _, users uint64) {
	defer leave(l.d.fence.enter())
	ar, i, ok := l.d.rules.Load().resolve(rule)
	if !ok {
		return
	}
	l.d.store.SetUsers(ar.ns[i], []byte(key), users, l.d.now())
}
