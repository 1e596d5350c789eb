package sim

// dmax is the delegate protocol version a node advertises: the current one,
// as sluiced advertises in every mode (3: owner mode, with owners telling
// how many nodes use a key, see gossip/ownershare.go). So in auto mode a
// cluster above the fan-out limit chooses owner mode, as a cluster of
// current sluiced does (it relayed when the simulated nodes advertised 1,
// while the report called it owner mode). Forced relay and direct runs do
// not read it beyond stamps (1 and above).
func (s *Sim) dmax(int) uint8 { return 3 }
