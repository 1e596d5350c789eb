//go:build !unix

package clientlib

import "io/fs"

// fileOwner is unknown on systems without Unix ownership.
func fileOwner(fs.FileInfo) (uid, gid uint32, ok bool) { return 0, 0, false }
