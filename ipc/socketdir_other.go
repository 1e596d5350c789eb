//go:build !unix

package ipc

import "io/fs"

// fileOwner reports no owner: this system has no Unix file ownership.
func fileOwner(fs.FileInfo) (uint32, bool) { return 0, false }
