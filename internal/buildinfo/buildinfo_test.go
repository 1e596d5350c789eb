package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuild(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/sluicelabs/sluice", Version: "v0.0.0-20261123235143-053787dab5f4+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "053787dab5f4761399495ee9d44c431e3e539961"},
			{Key: "vcs.time", Value: "2026-11-23T23:51:43Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	unstamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sluicelabs/sluice", Version: "(devel)"}}
	tests := []struct {
		name   string
		bi     *debug.BuildInfo
		l      linked
		want   Info
		line   string
		revStr string
	}{
		{"stamped by the go command", stamped, linked{},
			Info{Version: "v0.0.0-20261123235143-053787dab5f4+dirty", Revision: "053787dab5f4761399495ee9d44c431e3e539961", Modified: true, Time: "2026-11-23T23:51:43Z", GoVersion: "go1.26.8"},
			"v0.0.0-20261123235143-053787dab5f4+dirty (revision 053787dab5f4761399495ee9d44c431e3e539961+dirty, committed 2026-11-23T23:51:43Z, go1.26.8)",
			"053787dab5f4761399495ee9d44c431e3e539961+dirty"},
		{"unstamped: go build in a worktree, go test", unstamped, linked{},
			Info{Version: Devel, GoVersion: "go1.26.8"},
			"(devel) (revision unknown, go1.26.8)", "unknown"},
		{"release build: the linker's values win", stamped, linked{version: "v1.2.3", revision: "abc", time: "2026-01-02T03:04:05Z", dirty: "false"},
			Info{Version: "v1.2.3", Revision: "abc", Time: "2026-01-02T03:04:05Z", GoVersion: "go1.26.8"},
			"v1.2.3 (revision abc, committed 2026-01-02T03:04:05Z, go1.26.8)", "abc"},
		{"release build over an unstamped tree", unstamped, linked{version: "v1.2.3-rc1", revision: "abc", dirty: "true"},
			Info{Version: "v1.2.3-rc1", Revision: "abc", Modified: true, GoVersion: "go1.26.8"},
			"v1.2.3-rc1 (revision abc+dirty, go1.26.8)", "abc+dirty"},
		{"no build information at all", nil, linked{},
			Info{Version: Devel, GoVersion: "unknown"},
			"(devel) (revision unknown, unknown)", "unknown"},
		{"an overlong version is cut to fit peers' metadata", unstamped, linked{version: strings.Repeat("v", 200)},
			Info{Version: strings.Repeat("v", maxVersionLen), GoVersion: "go1.26.8"},
			strings.Repeat("v", maxVersionLen) + " (revision unknown, go1.26.8)", "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fromBuild(tt.bi, tt.l)
			if got != tt.want {
				t.Fatalf("fromBuild = %+v, want %+v", got, tt.want)
			}
			if s := got.String(); s != tt.line {
				t.Errorf("String = %q, want %q", s, tt.line)
			}
			if r := got.RevisionString(); r != tt.revStr {
				t.Errorf("RevisionString = %q, want %q", r, tt.revStr)
			}
		})
	}
}

func TestGetInATestBinary(t *testing.T) {
	in := Get()
	if in.Version == "" || in.GoVersion == "" || !strings.HasPrefix(in.GoVersion, "go") {
		t.Fatalf("Get() = %+v: want a version and the Go version", in)
	}
}
