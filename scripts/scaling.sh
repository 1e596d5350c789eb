#!/usr/bin/env bash
# Regenerates docs/SCALING.md's simulated tables (cmd/testcluster sim
# --report): N = 3 ... 10,000 under both designs, "broadcast" (direct fan-out
# up to 64 members, relayed above) and owner mode, each run as sluiced runs
# it (first-contact hold, fair floor, owner's shares: --first-share; sluiced's
# default --first-contact token, and owner mode with --first-contact share
# too in sim-hot and sim-loss), seed 1, each table rewritten between its
# <!-- sim-... --> markers as soon as its runs finish, and the goals at a
# glance (<!-- goals -->) after each table:
#   sim-hot     saturating load on one key, 20 req/s per node (accuracy,
#               overshoot, convergence, per-node cost);
#   sim-loss    the same with 10% and 30% packet loss;
#   sim-churn   1% and 10% of the nodes replaced per minute, 2 minutes;
#   sim-fair    even demand under a limit of 50/s per node (fair shares);
#   sim-spread  50 req/s per node over N keys (per-node cost at a fixed
#               per-host load).
# Broadcast stops at 2,000 nodes (hot), 1,000 (loss) and 100 (churn, fair,
# spread): its simulated work grows as N^2. The whole run costs about 22
# minutes of the simulator's CPU (one core): 52 minutes of wall time on the
# shared 2-core development machine (2026-11-24, load 3-15), of which owner
# mode's rows about 30 (mostly the spread load at 3,000 and 10,000 nodes);
# each table states its own wall and CPU time. The validation against real processes is separate:
# go run -C cmd/testcluster . sim --validate.
#
# --design owner (or broadcast) runs only that design's rows and keeps the
# other's as the document holds them; --resume continues the regeneration
# that stopped (the newest named in the tables' notes), keeping its rows.
#
# Usage: scripts/scaling.sh [--tables sim-hot ...] [--max-nodes N] [--design owner|broadcast] [--resume] [--doc PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
(cd cmd/testcluster && go build -o ../../out/testcluster .) # its own module
began=$(date +%s)
(cd cmd/testcluster && ../../out/testcluster sim --report "$@")
echo "scaling: $(( $(date +%s) - began )) s" >&2
