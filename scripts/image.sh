#!/usr/bin/env bash
# Builds the sluiced container image with podman (or buildah) from a
# release binary for this machine's architecture, without pulling anything
# (deploy/container/Containerfile.scratch). The image's timestamp is the
# commit's, so one commit gives one image ID.
#
#   scripts/image.sh [TAG]      default tag: sluiced:<version>
set -euo pipefail
cd "$(dirname "$0")/.."
arch=$(go env GOARCH)
TARGETS="linux/$arch" scripts/release.sh dist >/dev/null
version=$("dist/sluiced-linux-$arch" --version | awk '{print $3}')
tag=${1:-sluiced:${version//+/_}}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}
if command -v podman >/dev/null 2>&1; then build=(podman build); else build=(buildah bud); fi
"${build[@]}" --timestamp "$epoch" --build-arg "TARGETARCH=$arch" -f deploy/container/Containerfile.scratch -t "$tag" .
echo "$tag"
