package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyFilesMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	const key = "MDEyMzQ1Njc4OWFiY2RlZg==" // 16 bytes
	for _, tt := range []struct {
		name    string
		content string
		mode    os.FileMode
		err     error  // nil: accepted
		says    string // in the error
	}{
		{"private", key + "\n", 0o600, nil, ""},
		{"owner read only", key, 0o400, nil, ""},
		{"world readable", key, 0o644, ErrKeyFileOpen, "chmod 600"},
		{"group readable", key, 0o640, ErrKeyFileOpen, "mode 0640"},
		{"world writable", key, 0o602, ErrKeyFileOpen, "chmod 600"},
		{"not a key", "c2hvcnQ=", 0o600, nil, "5 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			got, err := ReadKeyFile(path)
			switch {
			case tt.err == nil && tt.says == "":
				if err != nil || string(got) != "0123456789abcdef" {
					t.Fatalf("ReadKeyFile: %q %v", got, err)
				}
			case tt.err != nil && !errors.Is(err, tt.err), err == nil || !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), path):
				t.Fatalf("ReadKeyFile: %v; want %v saying %q and naming the file", err, tt.err, tt.says)
			}
			if err != nil && strings.Contains(err.Error(), strings.TrimSpace(tt.content)) {
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
	ring := filepath.Join(dir, "keyring.json")
	os.WriteFile(ring, []byte(`["`+key+`"]`), 0o644)
	os.Chmod(ring, 0o644)
	if _, err := loadKeyring(ring); !errors.Is(err, ErrKeyFileOpen) {
		t.Fatalf("a world-readable keyring: %v", err)
	}
}
