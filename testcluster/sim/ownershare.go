package sim

import "github.com/sluicelabs/sluice/gossip"

// dmax is the delegate protocol version a node advertises: in owner mode
// the current one (4: owners tell it how many nodes use a key, see
// gossip/ownershare.go, and keys many nodes use go through aggregators,
// gossip/owneragg.go); otherwise 1, so that auto mode relays above the
// fan-out limit as the simulated tables were made.
func (s *Sim) dmax(int) uint8 {
	if s.cfg.GossipMode == gossip.ModeOwner {
		return 4 // gossip's protoAgg
	}
	return 1
}
