// Package buildinfo says which build of Sluice is running: the module
// version, the VCS revision it was built from (and whether the tree had
// uncommitted changes), that commit's time, and the Go version.
//
// It is the one source of the version: sluiced --version, sluice version,
// the daemon's start log, the version advertised to peers in gossip
// metadata and the sluice_build_info metric all read Get.
//
// The values come from runtime/debug.ReadBuildInfo, which the go command
// fills in when it builds from a VCS checkout with -buildvcs (the default
// outside this repository's CI, where GOFLAGS=-buildvcs=false). Release
// builds (scripts/release.sh) set them with the linker instead, so that a
// build from a git worktree (which the go command does not stamp) or from
// a source tarball still says what it is:
//
//	-ldflags "-X github.com/sluicelabs/sluice/internal/buildinfo.version=v1.2.3
//	          -X github.com/sluicelabs/sluice/internal/buildinfo.revision=<sha>
//	          -X github.com/sluicelabs/sluice/internal/buildinfo.commitTime=<RFC 3339>"
//
// A linker value wins over the one read from the build information. The
// time is the commit's, never the build's: a build time would make two
// builds of one commit differ, and release builds are reproducible.
package buildinfo
