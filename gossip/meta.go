package gossip

// What a node advertises about itself (memberlist's node meta): its
// version, gossip security and rules hash.

import (
	"fmt"
	"strings"
	"time"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// metaSendTimeout bounds how long SetMeta waits for memberlist to send the
// new meta. memberlist's UpdateNode puts the meta in place and queues it at
// once, then waits until its alive message has been transmitted
// RetransmitMult × ⌈log10(n+1)⌉ times (4 in a pair, 8 from 10 nodes), at
// most GossipNodes per gossip round of 200 ms: 0.6–0.8 s for an idle pair.
// The 1 s it was given was within a few rounds of that, and a loaded
// machine's late rounds exceeded it ("timeout waiting for update
// broadcast"). Ten seconds is a dozen times the idle cost; the wait only
// confirms that the meta went out, which it does whatever the wait.
const metaSendTimeout = 10 * time.Second

// SetMeta re-advertises this node's metadata, e.g. after a rules reload.
// Before Start it only sets what Start will advertise.
func (s *Syncer) SetMeta(m Meta) error {
	s.mu.Lock()
	s.meta = encodeMeta(s.ownMeta(m))
	s.mu.Unlock()
	ml := s.list()
	if ml == nil || s.leaving.Load() {
		return nil // Start advertises it; a leaving member keeps saying so
	}
	if err := ml.UpdateNode(metaSendTimeout); err != nil {
		return fmt.Errorf("gossip: advertise meta: %w", err)
	}
	return nil
}

// encodeMeta encodes m as memberlist's node meta: [version, rules hash].
func encodeMeta(m Meta) []byte {
	b := mp.AppendArrayHeader(nil, 2)
	v := versionWithSecurity(m)
	if m.Leaving && m.SecurityKnown {
		v += "." + metaLeaving
	}
	b = mp.AppendStr(b, v)
	return mp.AppendStr(b, m.RulesHash)
}

// decodeMeta decodes a peer's node meta.
func decodeMeta(b []byte) (Meta, error) {
	d := mp.NewDecoder(b)
	var m Meta
	if n, err := d.ArrayLen(); err != nil || n != 2 {
		return m, orMalformed(err, &d, "meta must have 2 fields")
	}
	v, err := str(&d, 128, "version")
	if err != nil {
		return m, err
	}
	h, err := str(&d, 128, "rules hash")
	if err != nil {
		return m, err
	}
	m = Meta{RulesHash: h}
	m.Version, m.Encrypted, m.Labelled, m.SecurityKnown = splitSecurity(v)
	if base, ok := strings.CutSuffix(v, "."+metaLeaving); ok && !m.SecurityKnown {
		// "leaving" counts only after the security identifiers.
		if ver, enc, lab, known := splitSecurity(base); known {
			m.Version, m.Encrypted, m.Labelled, m.SecurityKnown, m.Leaving = ver, enc, lab, true, true
		}
	}
	return m, d.End()
}

// advertiseLeaving re-advertises this node's metadata with Leaving set and
// waits up to timeout for memberlist to send it.
func (s *Syncer) advertiseLeaving(timeout time.Duration) error {
	s.mu.Lock()
	m, err := decodeMeta(s.meta)
	if err == nil {
		m.Leaving = true
		s.meta = encodeMeta(m)
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("gossip: advertise leaving: %w", err)
	}
	if err := s.list().UpdateNode(timeout); err != nil {
		return fmt.Errorf("gossip: advertise leaving: %w", err)
	}
	return nil
}
