package clientlib

import (
	"crypto/sha256"
	"encoding/base64"
)

// boundedKeyHashLen is the length of the hash part of a bounded key: 22
// base64url characters carry 128 bits of a SHA-256 digest, so two distinct
// identities collide only with probability 2⁻⁶⁴ after 2⁶⁴ of them.
const boundedKeyHashLen = 22

// boundedKeyMark separates the kept prefix of a long key from its hash.
const boundedKeyMark = '#'

// BoundedKey returns key if it is at most maxLen bytes long, and otherwise a
// key of exactly maxLen bytes that stands for it: as much of key's start as
// fits, '#', and 22 base64url characters of key's SHA-256 digest. The
// mapping is deterministic, so every host derives the same bounded key for
// the same identity (given the same maxLen), and distinct long keys map to
// distinct bounded keys for all practical purposes. An identity longer than
// the daemon accepts is thereby limited like any other, rather than refused.
//
// maxLen below 23 bytes cannot hold the hash; such a maxLen yields the
// digest cut to maxLen. maxLen ≤ 0 returns key unchanged.
func BoundedKey(key string, maxLen int) string {
	if maxLen <= 0 || len(key) <= maxLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	var enc [43]byte // RawURLEncoding of 32 bytes
	base64.RawURLEncoding.Encode(enc[:], sum[:])
	hash := enc[:boundedKeyHashLen]
	if maxLen <= boundedKeyHashLen {
		return string(hash[:maxLen])
	}
	keep := maxLen - boundedKeyHashLen - 1
	out := make([]byte, 0, maxLen)
	out = append(out, key[:keep]...)
	out = append(out, boundedKeyMark)
	out = append(out, hash...)
	return string(out)
}
