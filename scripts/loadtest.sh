#!/usr/bin/env bash
# Load test of the HTTP proxy, on loopback, nginx as the upstream:
#   1. overhead (wrk, one connection, then 32): nginx directly; the proxy with
#      no limits (the bare net/http reverse proxy); the proxy built into
#      sluiced (--proxy-listen, deciding in-process); and `sluiced proxy` as
#      its own process (deciding over the socket) — limits never reached;
#   2. limiting (hey): 500 req/s offered for a bounded time against 200/s,
#      charted as admitted (200) vs throttled (429) per second into
#      docs/loadtest.svg.
# Installs nginx, wrk and hey with apt if missing; stops everything it started.
#
# Usage: scripts/loadtest.sh [-short]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dur=10s; secs=20
[ "${1:-}" = "-short" ] && { dur=2s; secs=5; }

need=()
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v hey >/dev/null || need+=(hey)
command -v wrk >/dev/null || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get install -y "${need[@]}" >/dev/null 2>&1 || { $sudo apt-get update >/dev/null && $sudo apt-get install -y "${need[@]}" >/dev/null; }
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# nginx on 127.0.0.1:18080 answering 200 "ok" to everything.
mkdir -p "$work/nginx"
cat > "$work/nginx.conf" <<NGINX
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx; proxy_temp_path $work/nginx; fastcgi_temp_path $work/nginx;
  uwsgi_temp_path $work/nginx; scgi_temp_path $work/nginx;
  server { listen 127.0.0.1:18080; keepalive_requests 1000000; location / { return 200 "ok\n"; } }
}
NGINX
"$NGINX" -c "$work/nginx.conf"

go build -o "$work/sluiced" ./cmd/sluiced
cat > "$work/rules.yaml" <<RULES
rules:
  default:
    rate: 200/1s
  unlimited:
    rate: 100000000/1s
RULES
printf 'default: [{rule: unlimited}]\n' > "$work/open.yaml"
printf 'routes: []\n' > "$work/none.yaml"
# The daemon, with its built-in proxy on 18083 (in-process decisions, never limiting).
"$work/sluiced" --socket "$work/d.sock" --rules "$work/rules.yaml" --log-level warn \
  --proxy-listen 127.0.0.1:18083 --proxy-upstream http://127.0.0.1:18080 --proxy-routes "$work/open.yaml" & pids+=($!)
for _ in $(seq 100); do [ -S "$work/d.sock" ] && break; sleep 0.05; done
# Separate proxies over the socket: never limiting (18081), no limits at all (18084), and the
# default route limiting by client IP under rule "default" = 200/s (18082).
"$work/sluiced" proxy --listen 127.0.0.1:18081 --upstream http://127.0.0.1:18080 --socket "$work/d.sock" --routes "$work/open.yaml" --log-level warn & pids+=($!)
"$work/sluiced" proxy --listen 127.0.0.1:18084 --upstream http://127.0.0.1:18080 --socket "$work/d.sock" --routes "$work/none.yaml" --log-level warn & pids+=($!)
"$work/sluiced" proxy --listen 127.0.0.1:18082 --upstream http://127.0.0.1:18080 --socket "$work/d.sock" --log-level warn & pids+=($!)
for port in 18081 18082 18083 18084; do
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done
done

summary() { # wrk --latency → "p50 p99 rps"
  awk '/^ +50%/ {p50=$2} /^ +99%/ {p99=$2} /Requests\/sec/ {rps=$2} END {printf "p50 %8s  p99 %8s  %8.0f req/s\n", p50, p99, rps}'
}
out="$root/docs/loadtest.txt"
{
  echo "# proxy load test, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, nginx $("$NGINX" -v 2>&1 | cut -d/ -f2), wrk, hey; all on this machine"
  echo
  echo "## Overhead: wrk for $dur per case, limits never reached"
  for c in 1 32; do
    printf 'connections=%-3s nginx directly:                 ' "$c"; wrk -t1 -c"$c" -d"$dur" --latency http://127.0.0.1:18080/ | summary
    printf 'connections=%-3s reverse proxy, no limits:       ' "$c"; wrk -t1 -c"$c" -d"$dur" --latency http://127.0.0.1:18084/ | summary
    printf 'connections=%-3s built into sluiced (in-process):' "$c"; wrk -t1 -c"$c" -d"$dur" --latency http://127.0.0.1:18083/ | summary
    printf 'connections=%-3s sluiced proxy (over the socket):' "$c"; wrk -t1 -c"$c" -d"$dur" --latency http://127.0.0.1:18081/ | summary
  done
  echo
  echo "## Limiting: 500 req/s offered for ${secs}s from one client against 200/1s (burst 200)"
  hey -z "${secs}s" -c 10 -q 50 -o csv http://127.0.0.1:18082/ > "$work/limit.csv"
  awk -F, 'NR>1 {c[$7]++} END {for (k in c) printf "status %s: %d\n", k, c[k]}' "$work/limit.csv" | sort
} | tee "$out"
go run -C scripts ./loadchart -in "$work/limit.csv" -limit 200 -out "$root/docs/loadtest.svg" \
  -title "sluiced proxy: 500 req/s offered against 200/s"
echo "wrote $out and docs/loadtest.svg"
