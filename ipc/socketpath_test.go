package ipc

import (
	"path/filepath"
	"testing"
)

func TestDefaultSocketPathHonoursEnvironment(t *testing.T) {
	t.Setenv("SLUICE_SOCKET", "/custom/s.sock")
	if got := DefaultSocketPath(); got != "/custom/s.sock" {
		t.Fatalf("with SLUICE_SOCKET: %s", got)
	}
	t.Setenv("SLUICE_SOCKET", "")
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir)
	if got := DefaultSocketPath(); got != filepath.Join(dir, "sluice", "sluiced.sock") {
		t.Fatalf("with XDG_RUNTIME_DIR: %s", got)
	}
}
