package gossip

import (
	"testing"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// decodeMetaV0 is the metadata decoder of nodes before the security
// identifiers: exactly two strings of at most 128 bytes.
func decodeMetaV0(b []byte) (version, hash string, ok bool) {
	d := mp.NewDecoder(b)
	if n, err := d.ArrayLen(); err != nil || n != 2 {
		return "", "", false
	}
	v, err := str(&d, 128, "version")
	if err != nil {
		return "", "", false
	}
	h, err := str(&d, 128, "rules hash")
	if err != nil || d.End() != nil {
		return "", "", false
	}
	return v, h, true
}

func TestMetaSecurityIsBackwardCompatible(t *testing.T) {
	for _, tt := range []struct {
		name    string
		m       Meta
		wire    string // the version string on the wire
		decoded Meta
	}{
		{"encrypted, labelled", Meta{Version: "0.1.0", RulesHash: "h", Encrypted: true, Labelled: true, SecurityKnown: true},
			"0.1.0+enc.label", Meta{Version: "0.1.0", RulesHash: "h", Encrypted: true, Labelled: true, SecurityKnown: true}},
		{"plain", Meta{Version: "0.1.0", Labelled: true, SecurityKnown: true},
			"0.1.0+plain.label", Meta{Version: "0.1.0", Labelled: true, SecurityKnown: true}},
		{"unlabelled", Meta{Version: "0.1.0", Encrypted: true, SecurityKnown: true},
			"0.1.0+enc.nolabel", Meta{Version: "0.1.0", Encrypted: true, SecurityKnown: true}},
		{"version with build metadata", Meta{Version: "0.2.0+git.abc", Encrypted: true, Labelled: true, SecurityKnown: true},
			"0.2.0+git.abc.enc.label", Meta{Version: "0.2.0+git.abc", Encrypted: true, Labelled: true, SecurityKnown: true}},
		{"an older node says nothing", Meta{Version: "0.1.0", RulesHash: "h"},
			"0.1.0", Meta{Version: "0.1.0", RulesHash: "h"}},
		{"an older node's own build metadata", Meta{Version: "0.1.0+enc"},
			"0.1.0+enc", Meta{Version: "0.1.0+enc"}},
		{"leaving", Meta{Version: "0.1.0", RulesHash: "h", Encrypted: true, Labelled: true, SecurityKnown: true, Leaving: true},
			"0.1.0+enc.label.leaving", Meta{Version: "0.1.0", RulesHash: "h", Encrypted: true, Labelled: true, SecurityKnown: true, Leaving: true}},
		{"an older node's build metadata ending in leaving", Meta{Version: "0.1.0+x.leaving"},
			"0.1.0+x.leaving", Meta{Version: "0.1.0+x.leaving"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := encodeMeta(tt.m)
			v, h, ok := decodeMetaV0(b)
			if !ok || v != tt.wire || h != tt.m.RulesHash {
				t.Fatalf("an older node reads version %q hash %q ok %v; want %q %q", v, h, ok, tt.wire, tt.m.RulesHash)
			}
			got, err := decodeMeta(b)
			if err != nil || got != tt.decoded {
				t.Fatalf("decoded %+v %v; want %+v", got, err, tt.decoded)
			}
		})
	}
}

// Every member advertises how it gossips: a keyed syncer says encrypted,
// whatever the caller put in Meta, and keeps saying so after SetMeta.
func TestMembersShowTheirGossipSecurity(t *testing.T) {
	key := []byte("0123456789abcdef")
	a := newTestSyncer(t, "a", key, newMemLedger())
	b := newTestSyncer(t, "b", key, newMemLedger())
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetMeta(Meta{Version: "9.9.9", RulesHash: "x"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a sees b's metadata", func() bool {
		for _, m := range a.Members() {
			if m.Name == "b" && m.Meta.Version == "9.9.9" {
				return m.Meta.Encrypted && m.Meta.Labelled && m.Meta.SecurityKnown
			}
		}
		return false
	})
	plain := newTestSyncer(t, "p", nil, newMemLedger())
	waitFor(t, "an unkeyed syncer lists itself as plain", func() bool {
		for _, m := range plain.Members() {
			if m.Name == "p" {
				return !m.Meta.Encrypted && m.Meta.SecurityKnown && m.Meta.Labelled
			}
		}
		return false
	})
}
