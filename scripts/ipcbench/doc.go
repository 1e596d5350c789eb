// Package ipcbench measures decisions through the daemon's socket next to the
// same workload on go-redis/redis_rate against a local redis-server, in one
// run, and the daemon's memory under a flood of unique keys. It is a separate
// module so that the anchors' dependencies stay out of Sluice's own go.mod.
//
// Run it through scripts/bench.sh, which starts redis-server and sets
// REDIS_ADDR; without REDIS_ADDR the Redis side is skipped.
package ipcbench
