package rulesapi

import "testing"

func TestVersionETagRoundTrip(t *testing.T) {
	for _, v := range []int64{0, 1, 42, 1 << 40} {
		got, ok := ParseVersionETag(VersionETag(v))
		if !ok || got != v {
			t.Errorf("ParseVersionETag(VersionETag(%d)) = %d, %v", v, got, ok)
		}
	}
	for _, bad := range []string{"", `"3"`, `v3`, `"v"`, `"v-1"`, `"vx"`, `"v3`} {
		if _, ok := ParseVersionETag(bad); ok {
			t.Errorf("ParseVersionETag(%q) accepted", bad)
		}
	}
	if v, ok := ParseVersionETag(`W/"v7"`); !ok || v != 7 {
		t.Errorf("weak etag: %d %v", v, ok)
	}
}

func TestETagMatches(t *testing.T) {
	tests := []struct {
		header, etag string
		exists, want bool
	}{
		{`"v1"`, `"v1"`, true, true},
		{`"v1"`, `"v2"`, true, false},
		{`"v0", "v2"`, `"v2"`, true, true},
		{`*`, `"v2"`, true, true},
		{`*`, ``, false, false},
		{`"v1"`, `"v1"`, false, false},
		{`W/"v1"`, `"v1"`, true, true},
		{``, `"v1"`, true, false},
	}
	for _, tt := range tests {
		if got := ETagMatches(tt.header, tt.etag, tt.exists); got != tt.want {
			t.Errorf("ETagMatches(%q, %q, %v) = %v, want %v", tt.header, tt.etag, tt.exists, got, tt.want)
		}
	}
}

func TestParsePreferWait(t *testing.T) {
	tests := []struct {
		header string
		want   int64
	}{
		{"", 0},
		{"wait=30", 30},
		{"respond-async, wait=5", 5},
		{"Wait = 7", 7},
		{"wait=0", 0},
		{"wait=-3", 0},
		{"wait=abc", 0},
		{"wait=100000", 300},
	}
	for _, tt := range tests {
		if got := ParsePreferWait(tt.header); got != tt.want {
			t.Errorf("ParsePreferWait(%q) = %d, want %d", tt.header, got, tt.want)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "pay", "pay-api", "a1", "0"} {
		if !ValidName(ok) {
			t.Errorf("ValidName(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a.b", "a_b", "a b", "é", string(make([]byte, MaxNameLen+1))} {
		if ValidName(bad) {
			t.Errorf("ValidName(%q) = true", bad)
		}
	}
}
