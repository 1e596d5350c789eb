package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/bucket"
)

func TestClusterSettingsValidate(t *testing.T) {
	key := []byte("0123456789abcdef")
	for _, tt := range []struct {
		name    string
		c       ClusterSettings
		exposed bool
		err     string // "" when valid
	}{
		{"no cluster", ClusterSettings{}, false, ""},
		{"loopback bind, no key", ClusterSettings{Bind: "127.0.0.1:7946"}, false, ""},
		{"localhost bind, no key", ClusterSettings{Bind: "localhost:7946"}, false, ""},
		{"ipv6 loopback bind, no key", ClusterSettings{Bind: "[::1]:7946"}, false, ""},
		{"bare loopback address", ClusterSettings{Bind: "127.0.0.2"}, false, ""},
		{"all interfaces, no key", ClusterSettings{Bind: "0.0.0.0:7946"}, true, "--bind 0.0.0.0:7946 (not loopback): gossip beyond loopback needs a key"},
		{"empty host is every interface", ClusterSettings{Bind: ":7946"}, true, "needs a key"},
		{"a host name is not known loopback", ClusterSettings{Bind: "gossip.internal:7946"}, true, "needs a key"},
		{"loopback bind advertising beyond", ClusterSettings{Bind: "127.0.0.1:7946", Advertise: "10.0.0.1:7946"}, true, "--advertise 10.0.0.1:7946 (not loopback): gossip beyond loopback needs a key"},
		{"loopback bind advertising loopback", ClusterSettings{Bind: "127.0.0.1:7946", Advertise: "127.0.0.1"}, false, ""},
		{"join, no key", ClusterSettings{Join: []string{"127.0.0.1:7946"}}, true, "--join: gossip beyond loopback needs a key"},
		{"join, insecure", ClusterSettings{Join: []string{"10.0.0.1:7946"}, Insecure: true}, true, ""},
		{"join with key and label", ClusterSettings{Join: []string{"10.0.0.1:7946"}, Key: key, Label: "prod"}, true, ""},
		{"join with keyring and label", ClusterSettings{Bind: "0.0.0.0:7946", KeyringFile: "k.json", Label: "prod"}, true, ""},
		{"key without label", ClusterSettings{Join: []string{"10.0.0.1:7946"}, Key: key}, true, "cluster label is required"},
		{"key and keyring", ClusterSettings{Bind: "10.0.0.1:7946", Key: key, KeyringFile: "k.json", Label: "x"}, true, "exclusive"},
		{"insecure with a key", ClusterSettings{Bind: "10.0.0.1:7946", Key: key, Label: "x", Insecure: true}, true, "give one or the other"},
		{"short key", ClusterSettings{Bind: "10.0.0.1:7946", Key: key[:5], Label: "x"}, true, "5 bytes"},
		{"long label", ClusterSettings{Bind: "10.0.0.1:7946", Key: key, Label: strings.Repeat("l", 256)}, true, "at most 255"},
		{"first contact share", ClusterSettings{Bind: "127.0.0.1:7946", FirstContact: bucket.FirstContactShare}, false, ""},
		{"first contact token", ClusterSettings{Bind: "127.0.0.1:7946", FirstContact: bucket.FirstContactToken}, false, ""},
		{"first contact auto", ClusterSettings{Bind: "127.0.0.1:7946", FirstContact: bucket.FirstContactAuto}, false, ""},
		{"first contact unknown", ClusterSettings{Bind: "127.0.0.1:7946", FirstContact: 7}, false, "first contact FirstContact(7): want auto, token or share"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.Exposed(); got != tt.exposed {
				t.Errorf("Exposed() = %v, want %v", got, tt.exposed)
			}
			err := tt.c.Validate()
			if tt.err == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Validate() = %v, want it to say %q", err, tt.err)
			}
			if strings.Contains(tt.err, "needs a key") {
				if !errors.Is(err, ErrGossipNeedsKey) || !strings.Contains(err.Error(), "--gossip-key-file") || !strings.Contains(err.Error(), "--insecure-gossip") {
					t.Fatalf("the refusal %q does not wrap ErrGossipNeedsKey or name the fixes", err)
				}
			}
		})
	}
}

func TestSettingsValidateChecksTheCluster(t *testing.T) {
	s := DefaultSettings()
	s.Cluster.Join = []string{"10.0.0.1:7946"}
	if err := s.Validate(); !errors.Is(err, ErrGossipNeedsKey) {
		t.Fatalf("Validate() = %v, want ErrGossipNeedsKey", err)
	}
}

// The names sluiced's --first-contact takes.
func TestParseFirstContact(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bucket.FirstContact
		err  bool
	}{
		{in: "", want: bucket.FirstContactAuto},
		{in: "auto", want: bucket.FirstContactAuto},
		{in: "token", want: bucket.FirstContactToken},
		{in: "share", want: bucket.FirstContactShare},
		{in: "Share", err: true},
		{in: "demand", err: true},
		{in: "ceil", err: true},
	} {
		got, err := ParseFirstContact(tt.in)
		if (err != nil) != tt.err || (err == nil && got != tt.want) {
			t.Errorf("ParseFirstContact(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err == nil && tt.in != "" && got.String() != tt.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tt.in)
		}
	}
}
