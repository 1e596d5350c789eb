#!/usr/bin/env bash
# Measures the cluster on loopback, in-process nodes: convergence by size,
# gossip interval and dissemination mode; gossip cost by hot keys; and how
# many new keys per second the cluster keeps in sync. Writes
# docs/benchmarks/cluster.txt and regenerates the README's convergence chart
# (docs/testcluster/) with cmd/testcluster. Takes about five minutes.
#
# Usage: scripts/cluster-bench.sh [-short]
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/benchmarks/cluster.txt
mkdir -p docs/benchmarks docs/testcluster
probes=60; [ "${1:-}" = "-short" ] && probes=10
{
  echo "# Sluice cluster benchmarks, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(go version)"
  echo "# every node in one process on 127.0.0.1; CPU figures include the load drivers"
  echo
  go test -run '^$' -bench 'BenchmarkConvergence' -benchtime "${probes}x" -timeout 60m ./testcluster
  go test -run '^$' -bench 'BenchmarkGossipCost|BenchmarkHotKeyThroughput' -benchtime 1x -timeout 60m ./testcluster
} | tee "$out"
go run ./cmd/testcluster -n 5 --gossip-interval 20ms --rate 100/1s --skew 70,20,10 --duration 20s --out docs/testcluster

# Accuracy under saturating load: 100/s burst 100, 10s, gossip 50ms, five
# times the limit offered, skewed over 3 and 5 nodes.
{
  echo
  echo "## Accuracy: admitted vs burst + rate × time (100/1s burst 100, 10s, gossip 50ms, 500/s offered)"
  for n in 3 5; do
    for skew in 70,20,10 100; do
      printf 'nodes=%d skew=%s: ' "$n" "$skew"
      go run ./cmd/testcluster -n "$n" --gossip-interval 50ms --rate 100/1s --skew "$skew" --duration 10s --out "out/accuracy-$n-$skew" | grep '^admitted'
    done
  done
} | tee -a "$out"
