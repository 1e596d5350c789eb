package daemon

import (
	"errors"
	"fmt"
)

// ErrKeyFileOwner is returned (wrapped) for a key or keyring file owned by
// a user other than the daemon's effective user and root: that user can
// read the key or replace it with one of their own, whatever the mode says.
var ErrKeyFileOwner = errors.New("owned by another user")

// checkSecretOwner refuses a secret file (path, owned by uid owner) unless
// its owner is the daemon's effective user (euid) or root, as ssh refuses a
// private key owned by someone else. The error names the file, its owner
// and both fixes.
func checkSecretOwner(path string, owner, euid uint32) error {
	if owner == euid || owner == 0 {
		return nil
	}
	return fmt.Errorf("%s is owned by uid %d, %w: it must be owned by this daemon's user (uid %d) or root: run chown %d %s",
		path, owner, ErrKeyFileOwner, euid, euid, path)
}
