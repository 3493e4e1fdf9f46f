"""Paired comparison of one method across two experiment runs on the same splits.

Reads the ``splits.csv`` written by ``budro experiment`` in two result folders, matches the rows of
one method in each by split seed, and prints a markdown table: per split the value in each run and,
per metric, the mean and standard deviation (ddof = 1) of the paired difference (second minus first)
with the number of splits on which it is negative.

    python experiments/paired.py docs/results/adult "BuDRO" \\
        docs/results/adult-exact-full "BuDRO (exact full)"
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

METRICS = (
    "balanced_accuracy",
    "consistency[S-cons]",
    "consistency[GR-cons]",
    "gap_max[sex]",
    "gap_rms[sex]",
    "gap_max[race]",
    "gap_rms[race]",
)


def _rows(folder: Path, method: str) -> dict[str, dict[str, str]]:
    path = folder / "splits.csv"
    if not path.is_file():
        raise SystemExit(f"error: {path} not found: expected the splits.csv of a `budro experiment` run")
    with path.open(newline="") as f:
        rows = {r["seed"]: r for r in csv.DictReader(f) if r["method"] == method}
    if not rows:
        raise SystemExit(f"error: method {method!r} has no rows in {path}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("first", type=Path, help="result folder of the first run")
    p.add_argument("first_method", help="method name in the first run")
    p.add_argument("second", type=Path, help="result folder of the second run")
    p.add_argument("second_method", help="method name in the second run")
    p.add_argument("--metrics", default=",".join(METRICS), help="comma-separated splits.csv columns")
    a = p.parse_args(argv)
    first, second = _rows(a.first, a.first_method), _rows(a.second, a.second_method)
    seeds = sorted(set(first) & set(second), key=int)
    if len(seeds) < 2:
        raise SystemExit(f"error: the runs share {len(seeds)} split seed(s); need at least 2")
    metrics = [m for m in a.metrics.split(",") if m]
    missing = [m for m in metrics if m not in first[seeds[0]] or m not in second[seeds[0]]]
    if missing:
        raise SystemExit(f"error: metric(s) {missing} not in both splits.csv files")

    print(f"| split | method | {' | '.join(metrics)} |")
    print("|---|---|" + "---|" * len(metrics))
    for s in seeds:
        for name, rows in ((a.first_method, first), (a.second_method, second)):
            print(f"| {s} | {name} | " + " | ".join(f"{float(rows[s][m]):.3f}" for m in metrics) + " |")
    print()
    print(f"Paired difference, {a.second_method} minus {a.first_method}, over {len(seeds)} splits:")
    print()
    print("| metric | mean | std | min | max | splits below 0 |")
    print("|---|---|---|---|---|---|")
    for m in metrics:
        d = [float(second[s][m]) - float(first[s][m]) for s in seeds]
        print(f"| {m} | {statistics.mean(d):+.4f} | {statistics.stdev(d):.4f} | {min(d):+.4f} | "
              f"{max(d):+.4f} | {sum(x < 0 for x in d)} of {len(d)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
