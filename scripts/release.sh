#!/usr/bin/env bash
# Release builds of sluiced and sluice: static (CGO_ENABLED=0), trimmed of
# local paths (-trimpath), without a build ID (-buildid=) or VCS stamping by
# the go command (-buildvcs=false: the version is stamped with -X instead, so
# a build from a git worktree or a source tarball says what it is), one
# binary per command and target, with SHA256SUMS. Two runs on one commit
# with the same Go toolchain give identical bytes: --verify proves it.
#
#   scripts/release.sh [OUTDIR]        build every target into OUTDIR (default dist/)
#   scripts/release.sh --verify        build linux/amd64 twice (a copy of the tree
#                                      elsewhere, a fresh build cache) and compare
#
# Environment:
#   TARGETS            GOOS/GOARCH list (default "linux/amd64 linux/arm64")
#   VERSION            the version to stamp (default: git describe --tags, or
#                      v0.0.0-<commit time>-<12 hex of the commit>, +dirty if modified)
#   REVISION           the commit (default: git rev-parse HEAD)
#   SOURCE_DATE_EPOCH  the commit time stamped, in seconds (default: the commit's)
#   DIRTY              true/false (default: whether git status shows changes)
# Needs only Go (and git, unless all four above are set).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
pkg=github.com/sluicelabs/sluice/internal/buildinfo

if [ -z "${REVISION:-}" ]; then REVISION=$(git rev-parse HEAD); fi
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then SOURCE_DATE_EPOCH=$(git log -1 --format=%ct HEAD); fi
if [ -z "${DIRTY:-}" ]; then
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then DIRTY=true; else DIRTY=false; fi
fi
if [ -z "${VERSION:-}" ]; then
  if VERSION=$(git describe --tags --exact-match 2>/dev/null); then :; else
    VERSION="v0.0.0-$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%d%H%M%S)-${REVISION:0:12}"
  fi
  if [ "$DIRTY" = true ]; then VERSION="$VERSION+dirty"; fi
fi
export REVISION SOURCE_DATE_EPOCH DIRTY VERSION
committed=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

if [ "${1:-}" = "--verify" ]; then
  work=$(mktemp -d)
  trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
  echo "--- release build 1 (this tree, the usual build cache)"
  TARGETS=linux/amd64 "$0" "$work/a" >/dev/null
  echo "--- release build 2 (a copy of the tree in another directory, a fresh build cache)"
  mkdir -p "$work/src"
  git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$work/src"
  (cd "$work/src" && TARGETS=linux/amd64 GOCACHE="$work/cache" GOFLAGS=-modcacherw scripts/release.sh "$work/b" >/dev/null)
  cat "$work/a/SHA256SUMS"
  if ! diff "$work/a/SHA256SUMS" "$work/b/SHA256SUMS"; then
    echo "release builds differ: not reproducible"; exit 1
  fi
  echo "--- reproducible: both builds have the checksums above"
  exit 0
fi

out=${1:-dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
ldflags="-buildid= -s -w -X $pkg.version=$VERSION -X $pkg.revision=$REVISION -X $pkg.commitTime=$committed -X $pkg.dirty=$DIRTY"
rm -f "$out/SHA256SUMS"
for target in ${TARGETS:-linux/amd64 linux/arm64}; do
  os=${target%/*} arch=${target#*/}
  for cmd in sluiced sluice; do
    bin="$cmd-$os-$arch"
    echo "building $bin ($VERSION)"
    # GOAMD64/GOARM64 pinned to the baselines: a GOAMD64 in the
    # environment would otherwise change the bytes.
    (cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOAMD64=v1 GOARM64=v8.0 \
      go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$out/$bin" "./cmd/$cmd")
  done
done
(cd "$out" && sha256sum -- *-*-* | sort -k2 > SHA256SUMS)
cat "$out/SHA256SUMS"
