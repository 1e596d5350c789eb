package main

import (
	"io"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		ok   bool
		want func(o options) bool
	}{
		{"no flags", nil, nil, true, func(o options) bool {
			return o.listen == DefaultListen && o.db == "" && o.loosenFactor == 2 && o.shutdownWait == 10*time.Second
		}},
		{"env", map[string]string{"SLUICE_RULES_LISTEN": "127.0.0.1:0", "SLUICE_RULES_LOOSEN_FACTOR": "3", "SLUICE_RULES_DATA_DIR": "/x"}, nil, true,
			func(o options) bool { return o.listen == "127.0.0.1:0" && o.loosenFactor == 3 && o.dataDir == "/x" }},
		{"flag beats env", map[string]string{"SLUICE_RULES_DB": "postgres://a"}, []string{"--db", "sqlite:///b.db"}, true,
			func(o options) bool { return o.db == "sqlite:///b.db" }},
		{"factor below 1", nil, []string{"--loosen-factor", "0.5"}, false, nil},
		{"bad env factor", map[string]string{"SLUICE_RULES_LOOSEN_FACTOR": "x"}, nil, false, nil},
		{"bad env wait", map[string]string{"SLUICE_RULES_SHUTDOWN_WAIT": "soon"}, nil, false, nil},
		{"stray argument", nil, []string{"serve"}, false, nil},
		{"unknown flag", nil, []string{"--nope"}, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"SLUICE_RULES_LISTEN", "SLUICE_RULES_LOOSEN_FACTOR", "SLUICE_RULES_DATA_DIR", "SLUICE_RULES_DB", "SLUICE_RULES_SHUTDOWN_WAIT"} {
				t.Setenv(k, tt.env[k]) // "" (unset here) means the default
			}
			o, err := parseFlags(tt.args, io.Discard)
			if (err == nil) != tt.ok {
				t.Fatalf("parseFlags(%q) error %v; want ok %v", tt.args, err, tt.ok)
			}
			if tt.ok && !tt.want(o) {
				t.Fatalf("parseFlags(%q) = %+v", tt.args, o)
			}
		})
	}
}
