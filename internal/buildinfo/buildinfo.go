package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
)

// Set by the linker (-X) in release builds; see the package doc.
var (
	version    string
	revision   string
	commitTime string
	dirty      string // "true" or "false"; empty: not set
)

// Devel is the version of a build that carries none: built by go build
// or go test from a tree the go command did not stamp.
const Devel = "(devel)"

// maxVersionLen bounds Version: peers refuse metadata whose version string
// is longer than 128 bytes, and the daemon appends its gossip security
// identifiers to it.
const maxVersionLen = 80

// Info describes one build.
type Info struct {
	// Version is the main module's version ("v1.2.3", a pseudo-version
	// such as "v0.0.0-20261123235143-053787dab5f4", either possibly with
	// "+dirty"), or Devel when the build carries none. At most 80 bytes.
	Version string
	// Revision is the VCS revision (a full git commit hash), or "".
	Revision string
	// Modified reports that the tree had uncommitted changes.
	Modified bool
	// Time is the commit's time as RFC 3339, or "" when unknown.
	Time string
	// GoVersion is the Go toolchain that built the binary, e.g. "go1.26.8".
	GoVersion string
}

// Get is this binary's build information, read once.
var Get = sync.OnceValue(func() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuild(bi, linked{version: version, revision: revision, time: commitTime, dirty: dirty})
})

// linked holds the values the linker set.
type linked struct{ version, revision, time, dirty string }

// fromBuild merges the build information (nil when the binary has none)
// with the linker's values, which win.
func fromBuild(bi *debug.BuildInfo, l linked) Info {
	var in Info
	if bi != nil {
		in.GoVersion = bi.GoVersion
		if v := bi.Main.Version; v != "" {
			in.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.time":
				in.Time = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if l.version != "" {
		in.Version = l.version
	}
	if l.revision != "" {
		in.Revision = l.revision
	}
	if l.time != "" {
		in.Time = l.time
	}
	if l.dirty != "" {
		in.Modified = l.dirty == "true"
	}
	if in.Version == "" {
		in.Version = Devel
	}
	if len(in.Version) > maxVersionLen {
		in.Version = in.Version[:maxVersionLen]
	}
	if in.GoVersion == "" {
		in.GoVersion = "unknown"
	}
	return in
}

// RevisionString is the revision with "+dirty" when the tree was modified,
// "unknown" when there is none.
func (in Info) RevisionString() string {
	r := in.Revision
	if r == "" {
		r = "unknown"
	}
	if in.Modified {
		r += "+dirty"
	}
	return r
}

// String is the one line --version prints after the program's name:
// "v1.2.3 (revision 053787d…+dirty, committed 2026-11-23T23:51:43Z, go1.26.8)".
func (in Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (revision %s", in.Version, in.RevisionString())
	if in.Time != "" {
		fmt.Fprintf(&b, ", committed %s", in.Time)
	}
	fmt.Fprintf(&b, ", %s)", in.GoVersion)
	return b.String()
}
