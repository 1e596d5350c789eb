// Package buildinfo says which build of Sluice is running: the module
// version, the VCS revision it was built from (and whether the tree had
// uncommitted changes), that commit's time, and the Go version.
//
// It is the one source of the version: sluiced --version, sluice version,
// the daemon's start log, the version advertised to peers in gossip
// metadata and the sluice_build_info metric all read Get.
//
// The values come from runtime/debug.ReadBuildInfo, which the go command
// fills in when it builds from a git clone with -buildvcs=auto or true (not
// when GOFLAGS holds -buildvcs=false, as on some build machines, and never
// in a git worktree, which it does not recognise). Release builds
// (scripts/release.sh) set them with the linker instead, so that a build
// from a worktree or from a source tarball still says what it is:
//
//	-ldflags "-X github.com/sluicelabs/sluice/internal/buildinfo.version=v1.2.3
//	          -X github.com/sluicelabs/sluice/internal/buildinfo.revision=<sha>
//	          -X github.com/sluicelabs/sluice/internal/buildinfo.commitTime=<RFC 3339>"
//
// A linker value wins over the one read from the build information. The
// time is the commit's, never the build's: a build time would make two
// builds of one commit differ, and release builds are reproducible.
package buildinfo
