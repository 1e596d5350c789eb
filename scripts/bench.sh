#!/usr/bin/env bash
# One command for every benchmark, each next to its anchor in the same run,
# and the report: regenerates docs/BENCHMARKS.md and its charts.
#
#   1. in-process decisions: bucket vs golang.org/x/time/rate (serial,
#      parallel; 1, 100k and 1M keys; scaling with cores);
#   2. decisions through the daemon: clientlib -> sluiced vs
#      go-redis/redis_rate -> redis-server, 1/16/64/256 callers;
#   3. memory: per idle key in process, the daemon's RSS and heap per key at
#      10k-5M keys, a flood of unique keys against the cap;
#   4. the cluster: convergence, accuracy and gossip cost by node count and
#      gossip interval (scripts/cluster-bench.sh);
#   5. the daemon's CPU per 10k decisions/s;
#   6. with RATELIMIT_SRC set: Envoy's rate limit service on sluiced vs
#      envoyproxy/ratelimit on redis-server (scripts/bench-rls.sh), kept as
#      docs/benchmarks/raw/rls.md (section 6 of the report).
#
# It installs what it needs (redis-server with apt, benchstat with go
# install), runs everything on loopback, stops what it started, and keeps the
# raw output in docs/benchmarks/raw/. A full run takes about 30 minutes on 2
# cores; -short (fewer iterations, ~8 minutes) is for checking the pipeline.
#
# Usage: scripts/bench.sh [-short] [-skip-cluster]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
raw="$root/docs/benchmarks/raw"
mkdir -p "$raw"

short=""; skip_cluster=""
for a in "$@"; do
  case "$a" in
    -short) short=-short ;;
    -skip-cluster) skip_cluster=1 ;;
    *) echo "usage: scripts/bench.sh [-short] [-skip-cluster]" >&2; exit 2 ;;
  esac
done
count=6; rtx=50000x
if [ -n "$short" ]; then count=1; rtx=5000x; fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v redis-server >/dev/null; then
  echo "--- installing redis-server with apt-get" >&2
  as_root apt-get install -y -qq redis-server >/dev/null 2>&1 ||
    { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }
fi
benchstat="$(go env GOPATH)/bin/benchstat"
if [ ! -x "$benchstat" ]; then
  echo "--- installing benchstat with go install" >&2
  go install golang.org/x/perf/cmd/benchstat@latest
fi

port=${REDIS_PORT:-6391}
rdir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
  --daemonize yes --pidfile "$rdir/redis.pid" --dir "$rdir" --logfile "$rdir/redis.log"
cleanup() {
  if [ -f "$rdir/redis.pid" ]; then kill "$(cat "$rdir/redis.pid")" 2>/dev/null || true; fi
  rm -rf "$rdir"
}
trap cleanup EXIT
ready=""
for _ in $(seq 100); do
  if redis-cli -p "$port" ping >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.05
done
if [ -z "$ready" ]; then
  echo "redis-server did not come up on 127.0.0.1:$port (set REDIS_PORT to use another port):" >&2
  cat "$rdir/redis.log" >&2
  exit 1
fi

{
  echo "date:    $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr)"
  echo "go:      $(go version | cut -d' ' -f3-)"
  echo "redis:   $(redis-server --version | awk '{print $3}' | sed 's/^v=//')"
  echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "run:     scripts/bench.sh $*"
} > "$raw/env.txt"
cat "$raw/env.txt"

echo "--- 1. in process: bucket vs x/time/rate"
go test -run '^$' -bench 'BenchmarkDecision|BenchmarkStore|BenchmarkIdleKeyMemory' -benchmem -count "$count" ./bucket | tee "$raw/bucket.txt"
go test -run '^$' -bench 'BenchmarkStore/keys=100000/.*/mode=parallel' -benchmem -count "$count" -cpu "1,$(nproc)" ./bucket | tee "$raw/scaling.txt"
"$benchstat" -col /impl "$raw/bucket.txt" > "$raw/benchstat.txt" || echo "benchstat failed; the report goes without it" >&2

echo "--- 2, 3 and 5. through the daemon's socket; the daemon's memory and CPU"
(
  cd scripts/ipcbench
  REDIS_ADDR="127.0.0.1:$port" go test -run '^$' -bench 'BenchmarkRoundTrip' -benchtime "$rtx" -count "$count" .
  go test -run '^$' -bench 'BenchmarkDaemonMemory|BenchmarkUniqueKeyFlood|BenchmarkDaemonCPU' -benchtime 1x -timeout 30m .
) | tee "$raw/ipc.txt"

if [ -z "$skip_cluster" ]; then
  echo "--- 4. the cluster"
  CLUSTER_OUT="$raw/cluster.txt" scripts/cluster-bench.sh $short
fi

echo "--- 6. Envoy's rate limit service: sluiced vs envoyproxy/ratelimit + redis-server (scripts/bench-rls.sh)"
if [ -n "${RATELIMIT_SRC:-}" ]; then
  rls_dur=5s; if [ -n "$short" ]; then rls_dur=1s; fi
  scripts/bench-rls.sh "$rls_dur" 1,64 | tee "$raw/rls.md"
else
  echo "RATELIMIT_SRC (a checkout of envoyproxy/ratelimit) unset: skipped; $raw/rls.md keeps the last run's table" >&2
fi

echo "--- report"
# The report tools are in the scripts module (their plotting libraries stay
# out of the sluice module): run there, with absolute paths.
go run -C scripts ./benchreport -raw "$raw" -out "$root/docs/BENCHMARKS.md" -charts "$root/docs/benchmarks"
echo "wrote docs/BENCHMARKS.md"
