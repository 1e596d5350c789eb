// Package ipcbench measures the daemon as it ships, built from cmd/sluiced
// and run as a separate process on a Unix socket:
//
//   - BenchmarkRoundTrip: decisions through the socket next to the same
//     workload on go-redis/redis_rate against a local redis-server;
//   - BenchmarkDaemonMemory: RSS and heap per idle key at 10k to 5M keys;
//   - BenchmarkUniqueKeyFlood: a flood of unique keys against the default
//     cap, with the keys held and the RSS sampled throughout;
//   - BenchmarkDaemonCPU: the daemon's CPU at fixed offered rates.
//
// The last three read the daemon from outside: /proc/PID for its RSS and
// CPU time, its admin endpoint's /metrics (on a free loopback port) for its
// heap and keys. Each iteration starts its own daemon, so run them with
// -benchtime 1x. With IPCBENCH_PROFILE_DIR set, the flood and the CPU
// benchmark also write the daemon's CPU profiles there.
//
// It is a separate module so that the anchors' dependencies stay out of
// Sluice's own go.mod. Run it through scripts/bench.sh, which starts
// redis-server and sets REDIS_ADDR; without REDIS_ADDR the Redis side of
// BenchmarkRoundTrip is skipped.
package ipcbench
