//go:build unix

package daemon

import (
	"os"
	"syscall"
)

// fileOwner returns the uid owning the file st describes; ok is false where
// the system does not say.
func fileOwner(st os.FileInfo) (uid uint32, ok bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return sys.Uid, true
}

// effectiveUID is the uid the daemon runs as.
func effectiveUID() uint32 { return uint32(os.Geteuid()) }
