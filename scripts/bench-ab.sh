#!/usr/bin/env bash
# A/B runs of one `keel bench` scenario: two or more builds, in interleaved
# rounds (the order rotates each round, so a host that slows down over the
# run, or a slow first run, does not favour one build), then the median of
# each figure per build, its range, and a permutation p-value against the
# first build. On a 2-core host the same binary's figures spread by 15-25%
# from run to run, so one run of each build says little: the default 8
# rounds tell a change of about 20% from noise, a 10% change needs more.
#
#   scripts/bench-ab.sh 1597022 HEAD                          # broker-failure, 8 rounds
#   scripts/bench-ab.sh --scenario commit --rounds 4 v1 v2 v3
#   scripts/bench-ab.sh /tmp/keel-old target/release/keel     # prebuilt binaries
#   scripts/bench-ab.sh --summary bench-results/ab-20261204T210000Z
#
# A build is a git revision, built in release from a temporary worktree
# into one target dir for all of them ($BENCH_AB_TARGET, by default
# target/bench-ab), or the path of a `keel` binary (with the `keel-lab`
# beside it, which `keel bench` runs, when it has one). Flags after `--` go to
# every `keel bench` run (e.g. `-- --trials 3 --partitions 50000`).
# Results: bench-results/ab-<time>/<round>/<build>/<scenario>.json with the
# run's output beside it, the binaries (bin/), and summary.txt. Do not run
# it beside a build or another benchmark.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
scenario=broker-failure
rounds=8
builds=()
extra=()
summary_only=""
target=${BENCH_AB_TARGET:-$root/target/bench-ab}
while [ $# -gt 0 ]; do
  case "$1" in
    --scenario) scenario=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --summary) summary_only=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) builds+=("$1"); shift ;;
  esac
done

if [ -n "$summary_only" ]; then
  exec python3 "$root/scripts/bench_ab_summary.py" "$summary_only"
fi
if [ ${#builds[@]} -lt 2 ]; then
  echo "bench-ab: name at least two builds (git revisions or keel binaries)" >&2
  exit 2
fi
case "$rounds" in
  ''|*[!0-9]*) echo "bench-ab: --rounds takes a whole number" >&2; exit 2 ;;
esac

out="$root/bench-results/ab-$(date -u +%Y%m%dT%H%M%SZ)"
bins="$out/bin"
mkdir -p "$bins"
wt=""
cleanup() {
  if [ -n "$wt" ]; then
    git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

# Each build gets a short name (its revision's short hash, or the binary's
# file name) and a copy of its binaries under $bins/<name>/: `keel`, and
# `keel-lab` for the builds where `keel bench` runs it.
names=()
for b in "${builds[@]}"; do
  if [ -x "$b" ] && [ -f "$b" ]; then
    name=$(basename "$b")
    mkdir -p "$bins/$name"
    cp "$b" "$bins/$name/keel"
    lab="$(dirname "$b")/keel-lab"
    if [ -x "$lab" ]; then
      cp "$lab" "$bins/$name/keel-lab"
    fi
  else
    rev=$(git -C "$root" rev-parse --verify --quiet "$b^{commit}") || {
      echo "bench-ab: $b is neither an executable nor a git revision" >&2
      exit 2
    }
    name=$(git -C "$root" rev-parse --short "$rev")
    if [ -z "$wt" ]; then
      wt=$(mktemp -d /tmp/keel-bench-ab-wt.XXXXXX)
      git -C "$root" worktree add --quiet --detach "$wt" "$rev"
    else
      git -C "$wt" checkout --quiet --detach "$rev"
    fi
    echo "bench-ab: building $name ($b)"
    CARGO_TARGET_DIR="$target" cargo build --release --quiet \
      --manifest-path "$wt/Cargo.toml" --bin keel
    mkdir -p "$bins/$name"
    cp "$target/release/keel" "$bins/$name/keel"
    # Since the lab left the keel binary, `keel bench` runs keel-lab.
    if [ -f "$wt/crates/keel-lab/Cargo.toml" ]; then
      CARGO_TARGET_DIR="$target" cargo build --release --quiet \
        --manifest-path "$wt/Cargo.toml" -p keel-lab
      cp "$target/release/keel-lab" "$bins/$name/keel-lab"
    fi
  fi
  for n in "${names[@]}"; do
    if [ "$n" = "$name" ]; then
      echo "bench-ab: two builds are both named $name" >&2
      exit 2
    fi
  done
  names+=("$name")
done
cleanup
wt=""

printf '%s\n' "${names[@]}" >"$out/order.txt"
n=${#names[@]}
echo "bench-ab: $scenario, $rounds rounds of ${names[*]} -> $out"
for r in $(seq 1 "$rounds"); do
  for i in $(seq 0 $((n - 1))); do
    name=${names[$(((i + r) % n))]}
    dir="$out/$r/$name"
    mkdir -p "$dir"
    started=$(date +%s)
    rc=0
    "$bins/$name/keel" bench "$scenario" --out-dir "$dir" ${extra[@]+"${extra[@]}"} \
      >"$dir/output.txt" 2>&1 || rc=$?
    echo "bench-ab: round $r/$rounds $name: exit $rc in $(($(date +%s) - started)) s"
  done
done
python3 "$root/scripts/bench_ab_summary.py" "$out" | tee "$out/summary.txt"
