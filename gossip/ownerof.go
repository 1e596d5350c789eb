package gossip

// RingOwners returns the owner and replica of (rule, key) on the owner ring
// of the given members, as every daemon in owner mode computes it from its
// own member list (ownerring.go): "" for the replica of a lone member, both
// "" for no members. Tests and tools use it to find the member to watch or
// to kill; a daemon asks its own ring (Syncer.OwnerOf).
func RingOwners(members []string, rule, key string) (owner, replica string) {
	return newOwnerRing(members).owners(rule, key)
}

// RingChain returns the first three members of (rule, key) on the owner
// ring of the given members: its owner, its replica and its third, where
// a node's counters of the key also go once the owner and the replica are
// both silent (ownerchain.go); "" for the members a smaller ring lacks.
// Tests and tools use it to know which member plays which part for a key.
func RingChain(members []string, rule, key string) (owner, replica, third string) {
	r := newOwnerRing(members)
	owner, replica = r.owners(rule, key)
	return owner, replica, r.third(rule, key)
}
