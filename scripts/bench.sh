#!/usr/bin/env bash
# Runs Sluice's benchmarks next to their anchors, in one run, on loopback:
#   1. in-process decisions: bucket vs golang.org/x/time/rate (and a mutex map of them);
#   2. decisions through the daemon's socket: clientlib -> sluiced vs
#      go-redis/redis_rate -> redis-server, with 1, 16, 64 and 256 callers;
#   3. memory per idle key, and the daemon's RSS under a flood of unique keys.
# Installs redis-server with apt if missing, starts it on 127.0.0.1, and stops
# it by pid on exit. Output goes to stdout and to docs/benchmarks/latest.txt.
#
# Usage: scripts/bench.sh [-short]   (-short: fewer iterations, for a smoke run)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="$root/docs/benchmarks/latest.txt"
mkdir -p "$(dirname "$out")"

count=3; rtx=50000x; flood=1x
if [ "${1:-}" = "-short" ]; then count=1; rtx=5000x; fi

if ! command -v redis-server >/dev/null; then
  echo "installing redis-server with apt-get" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get install -y redis-server >/dev/null 2>&1 || { $sudo apt-get update >/dev/null && $sudo apt-get install -y redis-server >/dev/null; }
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
  echo "# Sluice benchmarks, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(go version)"
  echo "# redis: $(redis-server --version | awk '{print $3}')"
  echo
  echo "## 1. In-process decisions (bucket vs x/time/rate), ns/op and allocs/op"
  go test -run '^$' -bench 'BenchmarkDecision|BenchmarkStore|BenchmarkIdleKeyMemory' -benchmem -count "$count" ./bucket
  echo
  echo "## 2 and 3. Through the socket (clientlib -> sluiced vs redis_rate -> redis-server); unique-key flood"
  (cd scripts/ipcbench && REDIS_ADDR="127.0.0.1:$port" go test -run '^$' -bench 'BenchmarkRoundTrip' -benchtime "$rtx" -count "$count" . \
    && go test -run '^$' -bench 'BenchmarkDaemonMemory|BenchmarkUniqueKeyFlood|BenchmarkDaemonCPU' -benchtime "$flood" -timeout 30m .)
} | tee "$out"
