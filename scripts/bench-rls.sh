#!/usr/bin/env bash
# Envoy's rate limit service, served by sluiced, next to the service it
# replaces and next to Sluice's own socket, in one run, called by the same
# client (scripts/rlsbench: the generated RateLimitService client, and
# clientlib for the socket): p50, p99 and decisions/s at 1 and 64 callers.
#
#   - sluiced --grpc-listen on a Unix socket and on loopback TCP, deciding
#     from an envoyproxy/ratelimit YAML (--envoy-config);
#   - envoyproxy/ratelimit built from a source snapshot (RATELIMIT_SRC, a
#     checkout of github.com/envoyproxy/ratelimit), with the same YAML, on a
#     local redis-server (installed with apt-get if missing), as it ships
#     (statsd off, logging at warn);
#   - sluiced's Unix socket through clientlib (the Go services' path).
#
# Limits are far above what the run spends: every side measures admitted
# decisions. Everything is on loopback; what it starts it stops.
#
# Usage: RATELIMIT_SRC=/path/to/ratelimit scripts/bench-rls.sh [DURATION] [CALLERS]
#   DURATION per measurement (default 5s); CALLERS comma-separated (default 1,64).
# Without RATELIMIT_SRC the ratelimit rows are left out (said on stderr).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-5s}
callers=${2:-1,64}
work=$(mktemp -d /tmp/bench-rls.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
await_port() { # host port
  for _ in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on $1:$2 after 30s" >&2; return 1
}
await_socket() { for _ in $(seq 1 300); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "no socket $1" >&2; return 1; }

echo "--- building sluiced and rlsbench" >&2
go build -o "$work/sluiced" ./cmd/sluiced
go build -C scripts -o "$work/rlsbench" ./rlsbench

mkdir -p "$work/runtime/ratelimit/config"
cat > "$work/runtime/ratelimit/config/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000000000}
YAML
printf 'rules:\n  bench:\n    rate: 1000000000/1s\n' > "$work/rules.yaml"

sport=$(freeport)
"$work/sluiced" --socket "$work/d.sock" --rules "$work/rules.yaml" --admin-addr "" --log-level warn \
  --envoy-config "$work/runtime/ratelimit/config/bench.yaml" \
  --grpc-listen "unix:$work/rls.sock,127.0.0.1:$sport" &
pids+=($!)
await_socket "$work/rls.sock"; await_port 127.0.0.1 "$sport"
args=(-grpc "sluiced unix=unix:$work/rls.sock" -grpc "sluiced TCP=127.0.0.1:$sport")

if [ -n "${RATELIMIT_SRC:-}" ]; then
  if ! command -v redis-server >/dev/null; then
    echo "--- installing redis-server with apt-get" >&2
    if [ "$(id -u)" = 0 ]; then apt-get install -y redis-server >&2; else sudo apt-get install -y redis-server >&2; fi
  fi
  echo "--- building envoyproxy/ratelimit from $RATELIMIT_SRC" >&2
  (cd "$RATELIMIT_SRC" && go build -o "$work/ratelimit" ./src/service_cmd)
  rport=$(freeport)
  redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
  pids+=($!)
  await_port 127.0.0.1 "$rport"
  gport=$(freeport); hport=$(freeport); dport=$(freeport)
  env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" \
    RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
    HOST=127.0.0.1 PORT="$hport" GRPC_HOST=127.0.0.1 GRPC_PORT="$gport" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$dport" \
    "$work/ratelimit" >"$work/ratelimit.log" 2>&1 &
  pids+=($!)
  await_port 127.0.0.1 "$gport"
  args+=(-grpc "envoyproxy/ratelimit + redis-server TCP=127.0.0.1:$gport")
else
  echo "--- RATELIMIT_SRC unset: envoyproxy/ratelimit left out" >&2
fi

echo "--- measuring: $duration each, callers $callers ($(nproc) cores)" >&2
"$work/rlsbench" "${args[@]}" -socket "$work/d.sock" -rule bench -domain bench -callers "$callers" -duration "$duration"
