#!/usr/bin/env bash
# Soak: a 5-node in-process cluster (loopback only) for a bounded time —
# 10 minutes by default — at a steady load (500/s on one hot key limited to
# 100/1s burst 100, skewed 60/20/10/5/5, plus 200/s over a sliding window of
# 1,000 background keys), reloading rules on every node every 5 s and
# stopping or crashing a node (not node 0) every 30 s for 8 s. Samples heap,
# RSS, goroutines, decisions and failed-open calls each second and writes
# soak.csv, summary.txt, soak.log and memory/goroutines/admitted.svg to
# docs/soak/ (or --out DIR). Not run in CI.
#
# Usage: scripts/soak.sh [--duration 1m] [other `testcluster soak` flags]
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/soak
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --out) out=${args[i+1]} ;;
    --out=*) out=${args[i]#--out=} ;;
  esac
done
mkdir -p "$out"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -C cmd/testcluster -o "$bin/testcluster" .
"$bin/testcluster" soak --out "$out" "$@" 2>&1 | tee "$out/soak.log"
