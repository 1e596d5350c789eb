package sim

import "github.com/sluicelabs/sluice/gossip"

// dmax is the delegate protocol version a node advertises: in owner mode
// the current one (3: owners tell it how many nodes use a key, see
// gossip/ownershare.go); otherwise 1, so that auto mode relays above the
// fan-out limit as the simulated tables were made.
func (s *Sim) dmax(int) uint8 {
	if s.cfg.GossipMode == gossip.ModeOwner {
		return 3
	}
	return 1
}
