package clientlib

import (
	"strings"
	"testing"
)

func TestBoundedKey(t *testing.T) {
	long := strings.Repeat("a", 300)
	tests := []struct {
		name   string
		key    string
		maxLen int
		want   func(string) bool
	}{
		{"short key unchanged", "alice", 256, func(s string) bool { return s == "alice" }},
		{"exactly the bound unchanged", long[:256], 256, func(s string) bool { return s == long[:256] }},
		{"no bound unchanged", long, 0, func(s string) bool { return s == long }},
		{"long key bounded to maxLen", long, 256, func(s string) bool {
			return len(s) == 256 && strings.HasPrefix(s, long[:233]+"#")
		}},
		{"tiny bound is the hash cut", long, 8, func(s string) bool { return len(s) == 8 && !strings.Contains(s, "a#") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BoundedKey(tt.key, tt.maxLen); !tt.want(got) {
				t.Fatalf("BoundedKey(%d bytes, %d) = %q", len(tt.key), tt.maxLen, got)
			}
		})
	}
	// Deterministic, and distinct for keys sharing the kept prefix.
	a, b := long+"x", long+"y"
	if BoundedKey(a, 256) != BoundedKey(a, 256) {
		t.Fatal("not deterministic")
	}
	if BoundedKey(a, 256) == BoundedKey(b, 256) {
		t.Fatal("two long keys with one prefix collide")
	}
}
