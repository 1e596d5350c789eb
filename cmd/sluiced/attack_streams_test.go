package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// These tests attack a real sluiced where issue 15 left known limits: key
// files owned by another user, stream slots held by a stranger, hostile
// replies on streams the daemon opened, and forged epochs in the relay
// queue.

// A key file or keyring chowned to nobody is refused at start even at mode
// 0600, naming the file, its owner and the fix, as ssh refuses a key owned
// by another user. Needs root to chown.
func TestStreamsKeyFileOwnedByAnotherUserIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown a key file to nobody (uid 65534)")
	}
	dir := tempDir(t)
	port := freePort(t)
	keyFile := secureKeyFile(t, dir, secureKey)
	ring := filepath.Join(dir, "keyring.json")
	if err := os.WriteFile(ring, []byte(`["`+secureKey+`"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{keyFile, ring} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct{ flag, path string }{{"--gossip-key-file", keyFile}, {"--gossip-keyring", ring}} {
		t.Run(tt.flag, func(t *testing.T) {
			code, out := secureRun(t, nil, "--socket", filepath.Join(dir, "d.sock"), "--join", "127.0.0.1:"+port, tt.flag, tt.path)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			for _, s := range []string{tt.path + " is owned by uid 65534", "or root", "chown 0 " + tt.path} {
				if !strings.Contains(out, s) {
					t.Errorf("the error does not say %q:\n%s", s, out)
				}
			}
			if strings.Contains(out, secureKey) {
				t.Errorf("the output shows the key:\n%s", out)
			}
		})
	}
}
