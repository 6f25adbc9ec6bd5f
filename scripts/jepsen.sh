#!/usr/bin/env bash
# Jepsen-style fault tests of real keel processes (crates/keel-jepsen).
#
#   scripts/jepsen.sh --ci                          # each nemesis family once, ~40 s each, over TLS,
#                                                  # then 30 s of the workload over Kafka
#   scripts/jepsen.sh --time-limit 300 --nemesis all  # the long run
#   scripts/jepsen.sh --soak 20 --time-limit 300   # 20 runs, fresh seeds, all nemeses:
#                                                  # summary.md + summary.html in the soak's dir
#   scripts/jepsen.sh <any keel jepsen flags>      # e.g. --plaintext (no TLS, no intruder)
#
# Builds the binaries first, `keel` and the `keel-lab` that `keel jepsen`
# runs (release; KEEL_JEPSEN_PROFILE=debug for a debug build). Network partitions need root and iptables, power cuts root,
# /dev/fuse and LazyFS (target/lazyfs, built on first use): without them
# the run exits with code 5 (use --nemesis kill,pause to run without);
# disk faults need libfiu (apt-get install -y fiu-utils).
# Exit code 0 only when every run is valid.
set -euo pipefail
cd "$(dirname "$0")/.."

profile="${KEEL_JEPSEN_PROFILE:-release}"
if [[ "$profile" == release ]]; then
  cargo build --release -p keel -p keel-lab
  bin="${CARGO_TARGET_DIR:-target}/release/keel"
else
  cargo build -p keel -p keel-lab
  bin="${CARGO_TARGET_DIR:-target}/debug/keel"
fi

if [[ "${1:-}" == "--soak" ]]; then
  runs="${2:?--soak needs a number of runs}"
  shift 2
  results="${KEEL_JEPSEN_RESULTS:-jepsen-results}"
  soak="$results/soak-$(date -u +%Y%m%dT%H%M%SZ)"
  mkdir -p "$soak"
  nemesis=(--nemesis all)
  for a in "$@"; do [[ "$a" == --nemesis* ]] && nemesis=(); done
  : >"$soak/runs.tsv"
  failed=0
  for ((i = 1; i <= runs; i++)); do
    seed=$(( $(od -An -N4 -tu4 /dev/urandom) % 1000000 ))
    echo "=== soak run $i/$runs: seed $seed (replay: scripts/jepsen.sh --seed $seed ${nemesis[*]} $*) ==="
    rc=0
    "$bin" jepsen --seed "$seed" --results-dir "$soak" "${nemesis[@]}" "$@" || rc=$?
    dir=$(ls -d "$soak"/*-seed"$seed" 2>/dev/null | tail -1 || true)
    printf '%s\t%s\t%s\n' "$seed" "$rc" "${dir:-}" >>"$soak/runs.tsv"
    [[ "$rc" == 0 ]] || failed=1
  done
  python3 - "$soak" <<'PY'
import html, json, os, sys
soak = sys.argv[1]
rows = []
for line in open(os.path.join(soak, "runs.tsv")):
    seed, rc, d = (line.rstrip("\n").split("\t") + ["", "", ""])[:3]
    r = {}
    if d and os.path.exists(os.path.join(d, "results.json")):
        r = json.load(open(os.path.join(d, "results.json")))
    s = r.get("summary", {})
    first = ""
    for name, c in r.get("checkers", {}).items():
        if c.get("valid") is not True:
            first = f"{name}: {json.dumps(c.get('detail'))[:200]}"
            break
    if not r:
        first = f"no results (exit {rc})"
    rows.append({
        "seed": seed, "rc": rc, "dir": os.path.relpath(d, soak) if d else "",
        "nemeses": ",".join(r.get("nemesis", [])), "ops": s.get("ops", 0),
        "faults": s.get("faults", 0), "short": s.get("short_faults_inside_lease", 0),
        "valid": r.get("valid", False), "first": first,
    })
head = "| seed | nemeses | ops | faults | short faults inside the lease | valid | first violation |"
md = [head, "|" + "---|" * 7]
for x in rows:
    md.append(f"| {x['seed']} | {x['nemeses']} | {x['ops']} | {x['faults']} | {x['short']} | {str(x['valid']).lower()} | {x['first']} |")
md.append("")
md.append(f"runs {len(rows)}, valid {sum(1 for x in rows if x['valid'])}, "
          f"operations {sum(x['ops'] for x in rows)}, faults {sum(x['faults'] for x in rows)}")
open(os.path.join(soak, "summary.md"), "w").write("\n".join(md) + "\n")
cells = "".join(
    f"<tr><td><a href=\"{html.escape(x['dir'])}/report.html\">{x['seed']}</a></td><td>{html.escape(x['nemeses'])}</td>"
    f"<td>{x['ops']}</td><td>{x['faults']}</td><td>{x['short']}</td>"
    f"<td style=\"color:{'green' if x['valid'] else 'red'}\">{str(x['valid']).lower()}</td><td>{html.escape(x['first'])}</td></tr>"
    for x in rows)
open(os.path.join(soak, "summary.html"), "w").write(
    "<!doctype html><meta charset=utf-8><title>keel jepsen soak</title>"
    "<style>td,th{border:1px solid #ccc;padding:4px}table{border-collapse:collapse}</style>"
    f"<h1>keel jepsen soak: {len(rows)} runs</h1><p>{html.escape(md[-1])}</p>"
    "<table><tr><th>seed (report)</th><th>nemeses</th><th>ops</th><th>faults</th>"
    f"<th>short faults inside the lease</th><th>valid</th><th>first violation</th></tr>{cells}</table>\n")
print("\n".join(md))
PY
  echo "jepsen soak: $soak/summary.md, $soak/summary.html"
  exit "$failed"
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
# it needs no fault window of its own. The intruder nemesis gives the
# brokers Kafka listeners (SASL_SSL-ready) even with the gRPC workload and
# attacks them too: plaintext bytes, a foreign CA's and a broker's
# certificates, a wrong SCRAM password, a SCRAM user without ACLs, a
# replayed SCRAM client-final. The power run's first window cuts
# every controller at once.
# The newer families share two runs: network shapes (one-way cuts, a
# bridge, the leader isolated with or without brokers, a voter removed and
# added back), then a ring of
# majorities, every controller or broker killed at once, a slow
# network (tc netem) and skewed wall clocks (libfaketime). Faults last
# from 50 ms to 8 s, mostly 200-900 ms,
# the first ones just either side of the lease and election timeout.
for family in partition kill pause zombie,intruder power disk \
    partition-one-way,bridge,isolate-leader,membership majorities-ring,kill-all,net-slow,clock; do
  # Shorter fault/heal windows so each 40 s run sees at least two faults.
  echo "=== jepsen: nemesis $family (seed $seed) ==="
  if ! "$bin" jepsen --time-limit 40 --fault-secs 8 --heal-secs 6 --nemesis "$family" \
      --seed "$seed" --results-dir "$results" "$@"; then
    failed+=("$family")
  fi
  seed=$((seed + 1))
done
# The same workload through the brokers' Kafka listeners (Kafka's protocol
# over SASL_SSL as the SCRAM user User:jepsen-client with ACLs for just the
# workload, forwarded to the active controller), through cuts and kills.
echo "=== jepsen: --client kafka, nemesis partition,kill (seed $seed) ==="
if ! "$bin" jepsen --client kafka --time-limit 30 --fault-secs 8 --heal-secs 6 \
    --nemesis partition,kill --seed "$seed" --results-dir "$results" "$@"; then
  failed+=("kafka-client")
fi
if ((${#failed[@]})); then
  # Last in the output (what a CI log keeps): each invalid run's failing
  # checkers with their detail, from its results.json.
  for d in $(ls -d "$results"/*/ 2>/dev/null); do
    [[ -f "$d/results.json" ]] || continue
    python3 - "$d" <<'PY2' >&2 || true
import json, sys
d = sys.argv[1]
r = json.load(open(d + "/results.json"))
if r.get("valid") is not True:
    for name, c in r.get("checkers", {}).items():
        if c.get("valid") is not True:
            print(f"jepsen: {d}: {name}: {json.dumps(c.get('detail'))[:1500]}")
PY2
  done
  echo "jepsen: INVALID runs: ${failed[*]} (see $results/)" >&2
  exit 1
fi
echo "jepsen: all runs valid"
