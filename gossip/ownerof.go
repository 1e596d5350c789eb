package gossip

// RingOwners returns the owner and replica of (rule, key) on the owner ring
// of the given members, as every daemon in owner mode computes it from its
// own member list (ownerring.go): "" for the replica of a lone member, both
// "" for no members. Tests and tools use it to find the member to watch or
// to kill; a daemon asks its own ring (Syncer.OwnerOf).
func RingOwners(members []string, rule, key string) (owner, replica string) {
	return newOwnerRing(members).owners(rule, key)
}
