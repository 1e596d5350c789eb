//go:build !unix

package daemon

import "os"

// sharedWithDaemon is false where files have no owners.
func sharedWithDaemon(os.FileInfo) bool { return false }
