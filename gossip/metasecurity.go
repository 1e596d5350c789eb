package gossip

import "strings"

// A node says how it gossips in its metadata's version string, as the last
// two identifiers of its semver build metadata: "0.1.0+enc.label",
// "0.1.0+plain.label" ("+" becomes "." when the version already has build
// metadata). Nodes before this version decode metadata of exactly two
// strings and refuse more, so a third field would blank this node's version
// and rules hash in their view (and flag its rules as drifting); a longer
// version string they show as it is. A version without the two identifiers
// (an older node) says nothing: SecurityKnown is false.
const (
	metaEncrypted   = "enc"
	metaPlain       = "plain"
	metaLabelled    = "label"
	metaNotLabelled = "nolabel"
	// metaLeaving follows them on a member that is leaving:
	// "0.1.0+enc.label.leaving". Older nodes then show the version string
	// whole, for the moments before the member is gone.
	metaLeaving = "leaving"
)

// ownMeta is m with this syncer's gossip security filled in.
func (s *Syncer) ownMeta(m Meta) Meta {
	m.Encrypted = len(s.cfg.SecretKey) > 0 || s.cfg.Keyring != nil
	m.Labelled = s.cfg.Label != ""
	m.SecurityKnown = true
	m.Leaving = false
	return m
}

// versionWithSecurity is the version string m is advertised with.
func versionWithSecurity(m Meta) string {
	if !m.SecurityKnown {
		return m.Version
	}
	enc, lab := metaPlain, metaNotLabelled
	if m.Encrypted {
		enc = metaEncrypted
	}
	if m.Labelled {
		lab = metaLabelled
	}
	sep := "+"
	if strings.Contains(m.Version, "+") {
		sep = "."
	}
	return m.Version + sep + enc + "." + lab
}

// splitSecurity undoes versionWithSecurity: the version proper and what the
// node says of its gossip, known only when both identifiers are there.
func splitSecurity(v string) (version string, encrypted, labelled, known bool) {
	plus := strings.IndexByte(v, '+')
	last := strings.LastIndexByte(v, '.')
	if plus < 0 || last <= plus {
		return v, false, false, false
	}
	start := max(strings.LastIndexByte(v[:last], '.'), plus)
	first, second := v[start+1:last], v[last+1:]
	if (first != metaEncrypted && first != metaPlain) || (second != metaLabelled && second != metaNotLabelled) {
		return v, false, false, false
	}
	return v[:start], first == metaEncrypted, second == metaLabelled, true
}
