package sim

// dmax is the delegate protocol version a node advertises: the current one,
// as sluiced advertises in every mode (6: owner mode, with owners telling
// how many nodes use a key, see gossip/ownershare.go, keys many nodes use
// going through aggregators, gossip/owneragg.go, and a key's third member
// none of them, gossip/ownerchainagg.go, and the chain failover walking
// past a silent third, gossip/ownerchainwalk.go). So in auto mode a
// cluster above the fan-out limit chooses owner mode, as a cluster of
// current sluiced does. Forced relay and direct runs do not read it beyond
// stamps (1 and above).
func (s *Sim) dmax(int) uint8 { return 6 } // gossip's protoChainWalk
