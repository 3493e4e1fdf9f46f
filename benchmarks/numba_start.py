"""What numba's start costs a fresh process's first exact solve, step by step.

    python benchmarks/numba_start.py                                  # 3 fresh processes, medians
    python benchmarks/numba_start.py --repeats 5 --output docs/performance.md

The exact dual's compiled kernels (``DualSolver(kernel="auto")`` with numba installed) are loaded
from numba's on-disk cache on their first call in a process; a fit's first solve waits for it.
Each repeat runs two fresh Python processes:

* *compiled*: imports what a fit has imported before its first solve (budro, scikit-learn's
  logistic regression, scipy.linalg, xgboost), then times ``import numba``, the first solve of
  a small full problem with few distinct points (the complete-list path of German and COMPAS:
  ``n`` points on ``n // 10`` distinct embeddings, two labels) by ``DualSolver(kernel="numba")``,
  which sets up numba's CPU target and loads the path's kernels, and a second solve of the same
  problem (the steady state);
* *numpy*: the same imports and both solves by ``DualSolver(kernel="numpy")`` (no numba).

The first child of a run compiles the kernels if numba's cache is empty; it is reported apart
and left out.  Not a test: times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from _report import replace_section  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import numpy as np
t0 = time.perf_counter()
import budro, budro.estimator, scipy.linalg, sklearn.linear_model, xgboost  # what a fit has loaded
from budro.solvers.dual import DualSolver
from budro.transport import EmbeddingCost, TransportProblem
out = {"imports_s": time.perf_counter() - t0}
kernel, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
Z = rng.normal(size=(max(1, n // 10), 5))[rng.integers(0, max(1, n // 10), n)]
problem = TransportProblem(rng.random((n, 2)), rng.integers(0, 2, n), EmbeddingCost(Z), 0.05)
if kernel == "numba":
    t = time.perf_counter()
    import numba
    out["import_numba_s"] = time.perf_counter() - t
solver = DualSolver(kernel=kernel)
t = time.perf_counter()
first = solver.solve(problem)
out["first_solve_s"] = time.perf_counter() - t
t = time.perf_counter()
solver.solve(problem, eta0=first.eta)
out["second_solve_s"] = time.perf_counter() - t
out["reduced"] = list(first.info["reduced"])
out["numba_loaded"] = "numba" in sys.modules
print(json.dumps(out))
"""


def _child(kernel: str, n: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, kernel, str(n)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    if done.returncode != 0:
        raise SystemExit(f"child ({kernel}) failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per kernel (default 3)")
    ap.add_argument("--n", type=int, default=4000, help="points of the full problem (default 4000)")
    ap.add_argument("--output", type=Path, default=None, help="markdown file whose section to replace")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.n < 2:
        ap.error("--repeats must be >= 1 and --n >= 2")
    warm = _child("numba", args.n)  # compiles on an empty cache; left out
    runs = {"numba": [], "numpy": []}
    for _ in range(args.repeats):  # alternating, so that load drifts touch both alike
        for kernel in runs:
            runs[kernel].append(_child(kernel, args.n))

    def med(kernel: str, key: str) -> float:
        return 1000 * statistics.median(r[key] for r in runs[kernel])

    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    import numba  # the version only, in this process

    lines = [
        f"Command: `python benchmarks/numba_start.py --repeats {args.repeats} --n {args.n}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs; {now}; load average {load:.2f}; python "
        f"{platform.python_version()}, numba {numba.__version__}",
        "",
        f"A full problem of {args.n} points on {warm['reduced'][0]} distinct embeddings "
        f"({warm['reduced'][0]} groups x {warm['reduced'][1]} classes on complete lists), medians of "
        f"{args.repeats} fresh processes per kernel (ms); the imports a fit has made before its first solve "
        "are not counted in the solves.",
        "",
        "| kernel | imports of a fit | import numba | first solve | second solve | numba loaded |",
        "|---|---|---|---|---|---|",
        f"| numba | {med('numba', 'imports_s'):.0f} | {med('numba', 'import_numba_s'):.0f} | "
        f"{med('numba', 'first_solve_s'):.0f} | {med('numba', 'second_solve_s'):.2f} | yes |",
        f"| numpy | {med('numpy', 'imports_s'):.0f} | - | {med('numpy', 'first_solve_s'):.0f} | "
        f"{med('numpy', 'second_solve_s'):.2f} | {'yes' if any(r['numba_loaded'] for r in runs['numpy']) else 'no'} |",
        "",
        f"numba's start in a fit's first solve: import {med('numba', 'import_numba_s'):.0f} ms + first compiled "
        f"solve minus a steady one {med('numba', 'first_solve_s') - med('numba', 'second_solve_s'):.0f} ms "
        "(its CPU target's set-up, the kernels' load and the lists' first build).  "
        f"First child (numba's cache {'filled by it' if warm['first_solve_s'] > 2.0 else 'already filled'}): "
        f"first solve {1000 * warm['first_solve_s']:.0f} ms.",
    ]
    body = "\n".join(lines) + "\n"
    print(body)
    if args.output is not None:
        replace_section(args.output, "numba start", f"#### numba's start (`benchmarks/numba_start.py`)\n\n{body}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
