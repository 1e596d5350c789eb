package daemon

import (
	"math/rand/v2"
	"sync"
)

// A reload must switch the rules and the balances together: a decision
// that read the new rules must not meet a balance not yet rescaled for
// them, nor one that read the old rules a balance already rescaled. The
// rules fence makes that so. Every decision (and every peer charge or
// adoption) holds one of its slots for reading from the moment it loads the
// rules until its last store call; a reload holds all of them for writing
// while it swaps the rules and rescales the balances. A decision then sees
// either the old rules with the old balances or the new rules with the new
// ones. Slots are picked at random and padded to a cache line each, so
// decisions on different cores rarely share one; a reload, rare, waits for
// every decision in flight, and decisions wait out the rescale (a pass over
// the store's keys).

// fenceSlots is how many read slots the fence has.
const fenceSlots = 16

type rulesFence struct {
	slots [fenceSlots]struct {
		sync.RWMutex
		_ [64 - 24]byte // one cache line each
	}
}

// enter holds a read slot and returns it, for leave.
func (f *rulesFence) enter() *sync.RWMutex {
	s := &f.slots[rand.Uint32()%fenceSlots].RWMutex
	s.RLock()
	return s
}

// leave releases what enter returned.
func leave(s *sync.RWMutex) { s.RUnlock() }

// exclusive runs fn with every slot held for writing.
func (f *rulesFence) exclusive(fn func()) {
	for i := range f.slots {
		f.slots[i].Lock()
	}
	defer func() {
		for i := range f.slots {
			f.slots[i].Unlock()
		}
	}()
	fn()
}
