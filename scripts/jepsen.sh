#!/usr/bin/env bash
# Jepsen-style fault tests of real keel processes (crates/keel-jepsen).
#
#   scripts/jepsen.sh --ci                          # each nemesis family once, ~40 s each, over TLS
#   scripts/jepsen.sh --time-limit 300 --nemesis all  # the long run
#   scripts/jepsen.sh <any keel jepsen flags>      # e.g. --plaintext (no TLS, no intruder)
#
# Builds the binary first (release; KEEL_JEPSEN_PROFILE=debug for a debug
# build). Network partitions need root and iptables, power cuts root,
# /dev/fuse and LazyFS (target/lazyfs, built on first use): without them
# the run exits with code 5 (use --nemesis kill,pause to run without);
# disk faults need libfiu (apt-get install -y fiu-utils).
# Exit code 0 only when every run is valid.
set -euo pipefail
cd "$(dirname "$0")/.."

profile="${KEEL_JEPSEN_PROFILE:-release}"
if [[ "$profile" == release ]]; then
  cargo build --release -p keel
  bin="${CARGO_TARGET_DIR:-target}/release/keel"
else
  cargo build -p keel
  bin="${CARGO_TARGET_DIR:-target}/debug/keel"
fi

if [[ "${1:-}" != "--ci" ]]; then
  exec "$bin" jepsen "$@"
fi
shift

if [[ "$(id -u)" != 0 ]]; then
  echo "jepsen.sh --ci: network partitions need root (iptables); run as root" >&2
  exit 5
fi
if ! command -v iptables >/dev/null; then
  echo "jepsen.sh --ci: iptables missing (apt-get install -y iptables)" >&2
  exit 5
fi

results="${KEEL_JEPSEN_RESULTS:-jepsen-results}"
seed="${KEEL_JEPSEN_SEED:-$(( $(date +%s) % 100000 ))}"
failed=()
# Every run speaks mutual TLS (the default of keel jepsen). The intruder
# (bad certificates, a user without ACLs) rides along with the zombie run:
# it needs no fault window of its own. The power run's first window cuts
# every controller at once.
for family in partition kill pause zombie,intruder power disk; do
  # Shorter fault/heal windows so each 40 s run sees at least two faults.
  echo "=== jepsen: nemesis $family (seed $seed) ==="
  if ! "$bin" jepsen --time-limit 40 --fault-secs 8 --heal-secs 6 --nemesis "$family" \
      --seed "$seed" --results-dir "$results" "$@"; then
    failed+=("$family")
  fi
  seed=$((seed + 1))
done
if ((${#failed[@]})); then
  echo "jepsen: INVALID runs: ${failed[*]} (see $results/)" >&2
  exit 1
fi
echo "jepsen: all runs valid"
