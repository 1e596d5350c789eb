#!/usr/bin/env bash
# Measures the cluster on loopback, every node in one process, at 3, 10, 25
# and 50 nodes (testcluster/bench_test.go):
#   BenchmarkConvergence       one admission until every other node shows it,
#                              by size x gossip interval (10/50/200 ms), and
#                              direct fan-out vs relayed gossip;
#   BenchmarkAccuracy          admitted vs burst + rate x time under 5x the
#                              limit on one hot key, 70% of it on one node;
#   BenchmarkGossipCost        gossip bytes, packets and counters per node per
#                              second at one cluster-wide rate (2,000 req/s)
#                              by size and number of hot keys;
#   BenchmarkHotKeyThroughput  new keys per second kept in sync.
# Writes docs/benchmarks/raw/cluster.txt (which scripts/bench.sh turns into
# docs/BENCHMARKS.md) and, in a full run, regenerates the
# README's chart data (docs/testcluster/) with cmd/testcluster (its own module).
# A full run takes about 10 minutes; -short (20 probes per case, 5 s and 3 s
# loads, fewer cases; the charts are left alone) under 2.
#
# Usage: scripts/cluster-bench.sh [-short]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${CLUSTER_OUT:-docs/benchmarks/raw/cluster.txt}
mkdir -p docs/benchmarks docs/testcluster out
probes=200 short="" mode=full
if [ "${1:-}" = "-short" ]; then probes=20 short=-short mode=short; fi

began=$(date +%s)
# Build the test binary once; each group of benchmarks then runs it.
go test -c -o out/testcluster.bench.test ./testcluster
bench() {
  (cd testcluster && ../out/testcluster.bench.test -test.run '^$' -test.bench "$1" -test.benchtime "$2" \
    ${short:+-test.short} -test.timeout 60m)
}
{
  echo "# Sluice cluster benchmarks ($mode run), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(go version)"
  echo "# every node in one process on 127.0.0.1; CPU figures are the whole process's, load drivers included"
  echo "# convergence: $probes probes per case; accuracy: 100/1s burst 100, 500/s offered, 70% on node 0"
  echo
  bench 'BenchmarkConvergence' "${probes}x"
  bench 'BenchmarkAccuracy|BenchmarkGossipCost|BenchmarkHotKeyThroughput' 1x
} | tee "$out"
if [ "$mode" = full ]; then
  go run -C cmd/testcluster . -n 5 --gossip-interval 20ms --rate 100/1s --skew 70,20,10 --duration 20s --out "$(pwd)/docs/testcluster"
fi
echo "# took $(( $(date +%s) - began )) s" | tee -a "$out"
