"""Mid-size tables on the full problem: the exact ``dual`` solver's paths between the complete lists
(up to about 1000 distinct points) and Adult's scale.

    python benchmarks/mid_size.py                              # 1100, 1500, 3000 rows; 100 rounds
    python benchmarks/mid_size.py --sizes 1500 --rounds 40     # one size, shorter
    python benchmarks/mid_size.py --output docs/solvers.md     # the table between its markers

A synthetic raw table (a numeric column with an effect, one with missing values, a string
protected attribute, a category with missing values, a noise column; all points distinct) is fitted
by ``BuDROClassifier(protected=["sex"], eps=0.05)`` with the default fair metric (the
sensitive-subspace metric on the encoded table: an ``EmbeddingCost``) and XGBoost, each case in a
fresh process, with:

- ``full_min_n=4000``: the default before 2026-11-28 (column blocks below 4000 points);
- ``full_min_n="auto"``: the default since (the full path from 1000 points with the compiled kernels);
- ``full_min_n="auto", kernel="numpy"``: without numba (column blocks below 4000 points).

Reports the whole fit, the median and mean solve, and whether the predictions equal the first
variant's (to the bit).  Not a test: times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from _report import replace_section  # benchmarks/ is the script's folder, first on sys.path

CHILD = r"""
import json, sys, time, gc
import numpy as np, pandas as pd
from budro import BuDROClassifier
n, rounds, params = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
rng = np.random.default_rng(0)
df = pd.DataFrame({
    "age": rng.integers(18, 80, n).astype(float),
    "income": np.where(rng.random(n) < 0.05, np.nan, rng.lognormal(10, 1, n)),
    "sex": rng.choice(["f", "m"], n),
    "city": pd.Categorical(rng.choice(["a", "b", "c", None], n)),
    "x": rng.normal(size=n),
})
y = (rng.random(n) < 1 / (1 + np.exp(-(df["age"] - 45) / 10))).astype(int)
gc.collect()
t0 = time.perf_counter()
clf = BuDROClassifier(protected=["sex"], n_steps=rounds - 1, eps=0.05, random_state=0, solver="dual",
                      solver_params=params).fit(df, y)
fit = time.perf_counter() - t0
solves = np.array([r.time_solve for r in clf.history_]) * 1e3
print(json.dumps({"fit_s": fit, "median_ms": float(np.median(solves)), "mean_ms": float(solves.mean()),
                  "proba": clf.predict_proba(df)[:, 1].tolist()}))
"""

VARIANTS = [
    ("full_min_n=4000 (before)", {"full_min_n": 4000}),
    ('full_min_n="auto" (default)', {}),
    ('full_min_n="auto", kernel="numpy"', {"kernel": "numpy"}),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1100,1500,3000")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--output", type=Path, default=None)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    command = "python benchmarks/mid_size.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = []
    for n in sizes:
        first = None
        for label, params in VARIANTS:
            out = subprocess.run([sys.executable, "-c", CHILD, str(n), str(args.rounds), json.dumps(params)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                rows.append(f"| {n} | {label} | error: {out.stderr.strip().splitlines()[-1]} | | | |")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            same = "-" if first is None else ("yes" if r["proba"] == first else "no")
            first = r["proba"] if first is None else first
            rows.append(f"| {n} | {label} | {r['fit_s']:.2f} | {r['median_ms']:.1f} | {r['mean_ms']:.1f} | {same} |")
            print(rows[-1], flush=True)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = "\n".join([
        f"Command: `{command.strip()}` ({when}; {args.rounds} rounds; each case in a fresh process)", "",
        "| rows | dual | whole fit s | median solve ms | mean solve ms | same predictions |",
        "|---:|---|---:|---:|---:|---|", *rows])
    print(body)
    if args.output is not None:
        replace_section(args.output, "Mid-size tables", body, new_file="# Mid-size tables\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
