package daemon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrKeyFileOpen is returned (wrapped) for a key or keyring file that users
// other than its owner may read or write.
var ErrKeyFileOpen = errors.New("readable or writable by group or others")

// maxSecretFile bounds a key or keyring file: a keyring of a few hundred
// keys fits; a mistaken path to a large file is refused, not read.
const maxSecretFile = 64 << 10

// readSecretFile reads a file holding gossip keys, refusing one that any
// user but its owner may read or write (as ssh refuses an open private key):
// a key others can read is not a secret. The one exception is a root-owned
// file a non-root daemon reads through its group (see keygroup.go: a
// Kubernetes Secret with an fsGroup). It refuses one owned by a user
// other than the daemon's and root too (see checkSecretOwner). Mode and
// owner are checked on the file opened, not on the path, so it cannot be
// swapped between check and read.
func readSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 && !sharedWithDaemon(st) {
		return nil, fmt.Errorf("%s has mode %04o, %w: run chmod 600 %s", path, perm, ErrKeyFileOpen, path)
	}
	if owner, ok := fileOwner(st); ok {
		if err := checkSecretOwner(path, owner, effectiveUID()); err != nil {
			return nil, err
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxSecretFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSecretFile)
	}
	return data, nil
}

// ReadKeyFile reads a gossip key file: the base64 of a 16, 24 or 32-byte
// key, surrounding whitespace ignored. A file others may read or write is
// refused (see ErrKeyFileOpen). Errors name the file, never the key.
func ReadKeyFile(path string) ([]byte, error) {
	data, err := readSecretFile(path)
	if err != nil {
		return nil, fmt.Errorf("read gossip key file: %w", err)
	}
	key, err := DecodeKey(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("read gossip key file %s: %w", path, err)
	}
	return key, nil
}
