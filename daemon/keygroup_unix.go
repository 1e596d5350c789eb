//go:build unix

package daemon

import (
	"os"
	"syscall"
)

// sharedWithDaemon reports whether the secret file st describes is
// readable by its group as groupReadableByRoot allows.
func sharedWithDaemon(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	groups := []uint32{uint32(os.Getegid())}
	if more, err := os.Getgroups(); err == nil {
		for _, g := range more {
			groups = append(groups, uint32(g))
		}
	}
	return groupReadableByRoot(st.Mode().Perm(), sys.Uid, sys.Gid, effectiveUID(), groups)
}
