package sim

// chosenMode is the mode the syncers gossiped in, from what they did:
// "owner" when some node answered as a key's owner. Otherwise the
// configuration's: a syncer outside owner mode fans out or relays by its
// configured mode and the cluster's size alone (gossip's fanoutLocked),
// which the simulation fixes; a run configured for owner mode whose nodes
// never answered says so.
func chosenMode(c Config, nodes []*node) string {
	var answers uint64
	for _, n := range nodes {
		answers += n.syncer.OwnerStats().AnswersSent
	}
	switch {
	case answers > 0:
		return "owner"
	case c.mode() == "owner":
		return "owner, no answers"
	}
	return c.mode()
}
