package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
)

// Rotating the gossip keys while gossip runs.

// ErrNoKeyring is returned by SetKeys when the syncer was not started with a
// keyring (plain-text gossip, or a single SecretKey, cannot rotate).
var ErrNoKeyring = errors.New("gossip: not started with a keyring")

// SetKeys makes keys the gossip keyring, the first one primary (used to
// encrypt; every key is tried to decrypt), while gossip runs. Rotating
// without downtime takes three steps, each on every node before the next:
// add the new key ([old, new]), make it primary ([new, old]), drop the old
// one ([new]). Keys already in the ring are kept; the primary is switched
// before any key is removed.
func (s *Syncer) SetKeys(keys [][]byte) error {
	kr := s.cfg.Keyring
	if kr == nil {
		return ErrNoKeyring
	}
	if len(keys) == 0 {
		return errors.New("gossip: a keyring needs at least one key")
	}
	have := kr.GetKeys()
	for _, k := range keys {
		if !slices.ContainsFunc(have, func(h []byte) bool { return bytes.Equal(h, k) }) {
			if err := kr.AddKey(k); err != nil {
				return fmt.Errorf("gossip: add key: %w", err)
			}
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return fmt.Errorf("gossip: use key: %w", err)
	}
	for _, h := range have {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(h, k) }) {
			if err := kr.RemoveKey(h); err != nil {
				return fmt.Errorf("gossip: remove key: %w", err)
			}
		}
	}
	return nil
}

// Keys returns the gossip keys, the primary first; nil without a keyring.
func (s *Syncer) Keys() [][]byte {
	if s.cfg.Keyring == nil {
		return nil
	}
	return s.cfg.Keyring.GetKeys()
}
