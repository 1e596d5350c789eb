package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/internal/localsocket"
)

func TestDefaultSettingsAreValid(t *testing.T) {
	if err := DefaultSettings().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateSettings(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Settings)
		want   string // "" for valid
	}{
		{"allowed uids", func(s *Settings) { s.AllowUIDs = []uint32{0, 1000} }, ""},
		{"allowed gids only", func(s *Settings) { s.AllowGIDs = []uint32{1000} }, ""},
		{"uid -1", func(s *Settings) { s.AllowUIDs = []uint32{1000, 1<<32 - 1} }, "allowed uid 4294967295"},
		{"gid -1", func(s *Settings) { s.AllowGIDs = []uint32{1<<32 - 1} }, "allowed gid 4294967295"},
		{"empty socket path", func(s *Settings) { s.SocketPath = "" }, "socket path"},
		{"socket mode beyond 0777", func(s *Settings) { s.SocketMode = 0o1777 }, "socket mode"},
		{"file and URL", func(s *Settings) { s.RulesPath, s.RulesURL = "r.yaml", "http://x" }, "exclusive"},
		{"zero batch", func(s *Settings) { s.MaxBatch = 0 }, "max batch"},
		{"zero admin conns", func(s *Settings) { s.AdminMaxConns = 0 }, "admin max connections"},
		{"admin and metrics on one address", func(s *Settings) { s.AdminAddr, s.MetricsAddr = "127.0.0.1:9464", "127.0.0.1:9464" }, "different ports"},
		{"http api on the admin address", func(s *Settings) { s.AdminAddr, s.HTTPAddr = "127.0.0.1:9464", "127.0.0.1:9464" }, "port of its own"},
		{"http api on the metrics address", func(s *Settings) { s.MetricsAddr, s.HTTPAddr = "0.0.0.0:9465", "0.0.0.0:9465" }, "port of its own"},
		{"http routes without the api", func(s *Settings) { s.HTTPRoutes = "routes.yaml" }, "http listen address"},
		{"zero http conns", func(s *Settings) { s.HTTPMaxConns = 0 }, "http api max connections"},
		{"http api apart", func(s *Settings) {
			s.AdminAddr, s.HTTPAddr, s.HTTPRoutes = "127.0.0.1:9464", "127.0.0.1:9466", "r.yaml"
		}, ""},
		{"admin and metrics apart", func(s *Settings) { s.AdminAddr, s.MetricsAddr = "127.0.0.1:9464", "0.0.0.0:9465" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := DefaultSettings()
			tt.modify(&s)
			err := s.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func TestValidateAllowListNeedsPeerCredentials(t *testing.T) {
	s := DefaultSettings()
	s.AllowUIDs = []uint32{1000}
	err := s.Validate()
	if localsocket.PeerCredSupported != (err == nil) {
		t.Fatalf("PeerCredSupported %v, Validate: %v", localsocket.PeerCredSupported, err)
	}
	if err != nil && !errors.Is(err, localsocket.ErrPeerCredUnsupported) {
		t.Fatalf("error %v does not wrap ErrPeerCredUnsupported", err)
	}
}
