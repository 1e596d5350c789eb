package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestCheckSecretOwner(t *testing.T) {
	for _, tt := range []struct {
		name        string
		owner, euid uint32
		ok          bool
	}{
		{"owned by the daemon's user", 1000, 1000, true},
		{"owned by root, daemon not root", 0, 1000, true},
		{"root daemon, root's file", 0, 0, true},
		{"root daemon, nobody's file", 65534, 0, false},
		{"another user's file", 1001, 1000, false},
		{"nobody's file, daemon a user", 65534, 1000, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkSecretOwner("/etc/sluice/gossip.key", tt.owner, tt.euid)
			if tt.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrKeyFileOwner) {
				t.Fatalf("got %v, want ErrKeyFileOwner", err)
			}
			for _, want := range []string{"/etc/sluice/gossip.key", "uid " + itoa(tt.owner), "chown " + itoa(tt.euid) + " /etc/sluice/gossip.key", "or root"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("%q does not say %q", err, want)
				}
			}
		})
	}
}

func itoa(u uint32) string { return strconv.FormatUint(uint64(u), 10) }

// TestKeyFilesOwnedByAnotherUserAreRefused chowns a 0600 key file and
// keyring to nobody (uid 65534): a root daemon refuses both, naming the
// file, its owner and the fix; chowned back to root, both are read.
func TestKeyFilesOwnedByAnotherUserAreRefused(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux to chown a file to nobody")
	}
	dir := t.TempDir()
	const key = "MDEyMzQ1Njc4OWFiY2RlZg==" // 16 bytes
	keyFile := filepath.Join(dir, "gossip.key")
	ring := filepath.Join(dir, "keyring.json")
	os.WriteFile(keyFile, []byte(key+"\n"), 0o600)
	os.WriteFile(ring, []byte(`["`+key+`"]`), 0o600)
	for _, p := range []string{keyFile, ring} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	_, err := ReadKeyFile(keyFile)
	if !errors.Is(err, ErrKeyFileOwner) || !strings.Contains(err.Error(), keyFile) || !strings.Contains(err.Error(), "uid 65534") ||
		!strings.Contains(err.Error(), "chown 0 "+keyFile) || strings.Contains(err.Error(), key) {
		t.Fatalf("ReadKeyFile of nobody's file: %v", err)
	}
	if _, err := loadKeyring(ring); !errors.Is(err, ErrKeyFileOwner) || !strings.Contains(err.Error(), ring) {
		t.Fatalf("loadKeyring of nobody's file: %v", err)
	}
	for _, p := range []string{keyFile, ring} {
		if err := os.Chown(p, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadKeyFile(keyFile); err != nil {
		t.Fatalf("ReadKeyFile of root's file: %v", err)
	}
	if _, err := loadKeyring(ring); err != nil {
		t.Fatalf("loadKeyring of root's file: %v", err)
	}
}
