#!/usr/bin/env python3
"""Summary of a `scripts/bench-ab.sh` result dir: per build, the median of
each figure over the rounds, its range, and the permutation p-value of the
difference of medians against the first build (two-sided; exact when the
labellings are few, else 20,000 seeded shuffles). Standard library only.

    python3 scripts/bench_ab_summary.py bench-results/ab-20261204T210000Z

Figures are the JSON's numeric fields named like a result (medians, p99s,
rates, CPU per record, the disk probe), per-trial lists left out; a list
of per-level results is labelled by its `writers`. A round whose run wrote no JSON is counted as
missing, not as zero."""

import itertools
import json
import math
import random
import re
import statistics
import sys
from pathlib import Path

FIGURE = re.compile(
    r"(median_ms|p99_ms|ops_per_s|records_per_s|cpu_us_per_record|fdatasync_4k_p50_us|mb_per_s)$"
)
SKIP = {"parameters", "machine", "storage_ceiling"}


def figures(doc, prefix="", out=None):
    """Flattens the figures of one result: {path: value}."""
    out = {} if out is None else out
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in SKIP or k.endswith("_trials"):
                continue
            path = f"{prefix}.{k}" if prefix else k
            if isinstance(v, bool):
                continue
            if isinstance(v, (int, float)) and FIGURE.search(k):
                out[path] = float(v)
            elif isinstance(v, (dict, list)):
                figures(v, path, out)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            label = v.get("writers", i) if isinstance(v, dict) else i
            figures(v, f"{prefix}[{label}]", out)
    return out


def permutation_p(a, b, shuffles=20_000, seed=1):
    """Two-sided p of |median(a) - median(b)| under random labelling."""
    observed = abs(statistics.median(a) - statistics.median(b))
    pool, n = a + b, len(a)
    combos = math.comb(len(pool), n)
    hits = total = 0
    if combos <= shuffles:
        for idx in itertools.combinations(range(len(pool)), n):
            chosen = set(idx)
            x = [pool[i] for i in idx]
            y = [pool[i] for i in range(len(pool)) if i not in chosen]
            total += 1
            hits += abs(statistics.median(x) - statistics.median(y)) >= observed - 1e-12
    else:
        rng = random.Random(seed)
        for _ in range(shuffles):
            rng.shuffle(pool)
            total += 1
            hits += (
                abs(statistics.median(pool[:n]) - statistics.median(pool[n:]))
                >= observed - 1e-12
            )
    return hits / total


def collect(root):
    """{build: {figure: [value per round]}} and the builds in first-seen order."""
    data, order = {}, []
    runs = [p for p in root.glob("*/*/*.json") if p.parts[-3].isdigit()]
    for path in sorted(runs, key=lambda p: (int(p.parts[-3]), p.parts[-2])):
        build = path.parts[-2]
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"skipping {path}: {e}", file=sys.stderr)
            continue
        if build not in data:
            data[build] = {}
            order.append(build)
        for k, v in figures(doc).items():
            data[build].setdefault(k, []).append(v)
    return data, order


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(sys.argv[1])
    data, order = collect(root)
    if len(order) < 1:
        print(f"no results under {root}", file=sys.stderr)
        return 1
    # The builds in the order they were named (bench-ab.sh writes it).
    named_file = root / "order.txt"
    if named_file.exists():
        named = named_file.read_text().split()
        order = [b for b in named if b in data] + [b for b in order if b not in named]
    base = order[0]
    keys = sorted({k for b in order for k in data[b]})
    print(f"{root}: {', '.join(f'{b} ({max(map(len, data[b].values()), default=0)} runs)' for b in order)}")
    print(f"median [min-max] per build; change and permutation p against {base}")
    for k in keys:
        cells = []
        for b in order:
            xs = data[b].get(k, [])
            if not xs:
                cells.append(f"{b}: -")
                continue
            cell = f"{b}: {statistics.median(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]"
            ys = data[base].get(k, [])
            if b != base and ys and len(xs) > 1 and len(ys) > 1:
                change = statistics.median(xs) / statistics.median(ys) - 1 if statistics.median(ys) else 0.0
                cell += f" {change:+.0%} p={permutation_p(ys, xs):.2f}"
            cells.append(cell)
        print(f"  {k}: " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
