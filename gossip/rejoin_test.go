package gossip

import (
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestResolvePeer(t *testing.T) {
	s := &Syncer{log: hclog.NewNullLogger()}
	for _, tt := range []struct {
		peer string
		want []string
	}{
		{"10.0.0.7:7000", []string{"10.0.0.7:7000"}},
		{"10.0.0.7", []string{"10.0.0.7:7946"}},
		{"[fd00::1]:7000", []string{"[fd00::1]:7000"}},
		{"localhost:7000", []string{"127.0.0.1:7000"}},
		{"no-such-name.invalid:7000", nil},
	} {
		got := s.resolvePeer(tt.peer, "7946")
		if tt.peer == "localhost:7000" {
			got = slices.DeleteFunc(got, func(a string) bool { return a == "[::1]:7000" })
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("resolvePeer(%q) = %q, want %q", tt.peer, got, tt.want)
		}
	}
}
