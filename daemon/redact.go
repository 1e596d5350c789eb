package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"
)

// redactKey is how listings show a client key unless Settings.AdminShowKeys:
// up to its first 4 bytes (never more than half of it, and cut on a UTF-8
// boundary), "…", and the first 12 hex digits of its SHA-256. The form is
// stable, so an operator can follow a key across refreshes and nodes, and
// check a key they know:
//
//	printf %s "$KEY" | sha256sum | cut -c1-12
//
// It shows too little of an API token or an email address to use or read.
func redactKey(key string) string {
	n := min(4, len(key)/2)
	for n > 0 && !utf8.RuneStart(key[n]) {
		n--
	}
	sum := sha256.Sum256([]byte(key))
	return key[:n] + "…" + hex.EncodeToString(sum[:6])
}
