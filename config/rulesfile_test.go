package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadRulesFileCapsItsSize(t *testing.T) {
	dir := t.TempDir()
	good := "rules:\n  r:\n    rate: 1/1s\n"
	tests := []struct {
		name    string
		size    int // padding with a comment; the file is len(good) + size bytes
		wantErr bool
	}{
		{"small", 0, false},
		{"exactly the cap", MaxRulesBytes - len(good), false},
		{"one byte over", MaxRulesBytes - len(good) + 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "rules.yaml")
			data := good
			if tt.size > 0 {
				data += "#" + strings.Repeat("x", tt.size-2) + "\n"
			}
			if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadRules(path)
			if tt.wantErr != (err != nil) {
				t.Fatalf("LoadRules of %d bytes: %v", len(data), err)
			}
			if tt.wantErr && (!errors.Is(err, ErrRulesTooLarge) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "4194304")) {
				t.Fatalf("error %q does not name the file and the cap", err)
			}
		})
	}
}
