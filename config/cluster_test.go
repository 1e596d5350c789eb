package config

import (
	"errors"
	"strings"
	"testing"
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
