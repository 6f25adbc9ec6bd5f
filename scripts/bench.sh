#!/usr/bin/env bash
# Builds keel in release mode and runs every `keel bench` scenario against
# real local clusters (controllers on 127.0.x.y loopback addresses, data in
# temp dirs). Results: bench-results/<scenario>.json, tables on stdout.
#
#   scripts/bench.sh                 # every scenario, default parameters
#   scripts/bench.sh --json          # extra flags go to every `keel bench` run
#
# Expect roughly: commit ~1 min, failover ~5-10 min (1,000,000 partitions),
# heartbeats ~1-5 min (the ladder stops at the first level that is not ok),
# broker-failure ~3 min, create-topics ~2 min, scale ~3 min.
# The side-by-side run against ZooKeeper and etcd needs those servers and
# has its own script: scripts/bench-compare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release
keel=target/release/keel
status=0
for scenario in commit failover heartbeats broker-failure create-topics scale; do
    echo "== keel bench $scenario"
    "$keel" bench "$scenario" "$@" || status=$?
done
exit "$status"
