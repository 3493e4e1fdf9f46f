"""Where a sparse exact solve's time goes inside a fit, with the page faults of each part.

    BUDRO_DATA_HOME=../shared/data python benchmarks/solve_phases.py                     # Adult, LightGBM
    BUDRO_DATA_HOME=../shared/data python benchmarks/solve_phases.py --backend xgboost --fits 2

One process fits BuDRO at Adult's paper settings (``benchmarks/training.py``'s: 200 trees, m = 32,
the booster's parameters of ``experiments/adult.toml``) ``--fits`` times and reports, per solve
after the first two of each fit, the median wall time and the median count of minor page faults
(first touches of fresh memory, ``getrusage``) of the whole solve and of its parts: the candidate
kernel, the breakpoint read-off, the evaluations of g, the recovery of the plan and its weights.
Inside a fit the booster's trees run between two solves, so a solve meets caches and a heap
other than in a loop of solves alone (``benchmarks/solvers.py rounds``).

To compare two commits, run it with the older one first on ``PYTHONPATH`` (``git worktree add
/tmp/old <commit>``; ``PYTHONPATH=/tmp/old python benchmarks/solve_phases.py``), alternating.
Parts that the imported budro lacks are left out.  Not a test: times follow the machine's load.
"""

from __future__ import annotations

import argparse
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np
from _report import count_argument  # benchmarks/ is the script's folder, first on sys.path

#: (module, attribute, part): what is timed (a class attribute as "Class.method").
PARTS = [
    ("budro.solvers.dual", "DualSolver.solve", "solve"),
    ("budro.solvers._sparse_kernels", "sparse_candidates", "candidate kernel"),
    ("budro.solvers._sparse_kernels", "WarmBreakpoint.__call__", "breakpoint"),
    ("budro.solvers._dual_plan", "evaluate_candidates", "evaluations of g"),
    ("budro.solvers._dual_plan", "result_from_switch", "recovery"),
]


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class _Recorder:
    """Wraps the parts once; records (solve index of the fit, seconds, page faults) per call made
    on the main thread (the kernel preload's synthetic solves run on another)."""

    def __init__(self):
        self.records: dict[str, list] = {}
        self.solve_index = -1

    def wrap(self, module: str, name: str, part: str) -> bool:
        import importlib

        owner = importlib.import_module(module)
        *path, attr = name.split(".")
        for p in path:
            owner = getattr(owner, p, None)
        fn = getattr(owner, attr, None) if owner is not None else None
        if fn is None:
            return False
        main = threading.main_thread()

        def timed(*args, **kwargs):
            if threading.current_thread() is not main:
                return fn(*args, **kwargs)
            if part == "solve":
                self.solve_index += 1
            index, f0, t0 = self.solve_index, _faults(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.records.setdefault(part, []).append((index, time.perf_counter() - t0, _faults() - f0))

        setattr(owner, attr, timed)
        return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="lightgbm", choices=["lightgbm", "xgboost"])
    ap.add_argument("--fits", type=count_argument("fits"), default=1, help="fits in this process (default 1)")
    args = ap.parse_args(argv)

    import training  # benchmarks/training.py, the paper settings (the script's folder is first on sys.path)

    import budro
    from budro import BuDROClassifier

    from budro.datasets._home import MissingDataError

    try:
        X, y, cfg, params, _ = training._paper_setting("adult", args.backend)
    except MissingDataError as exc:
        print(f"solve_phases.py: {exc}", file=sys.stderr)
        return 2
    params = training._with_thread_param(args.backend, params, None)
    rec = _Recorder()
    parts = [part for module, name, part in PARTS if rec.wrap(module, name, part)]
    rows = []
    for _ in range(args.fits):
        rec.records, rec.solve_index = {}, -1
        clf = BuDROClassifier(backend=args.backend, backend_params=params, eps=cfg.eps, n_steps=199, random_state=0,
                              n_neighbors=32, solver=cfg.solver, solver_params=dict(cfg.solver_params),
                              fair_metric=cfg.fair_metric, fair_metric_params=dict(cfg.fair_metric_params),
                              protected=list(cfg.protected) or None)
        clf.fit(X, y)
        n_solves = rec.solve_index + 1
        cells = []
        for part in parts:
            v = np.array([r[1:] for r in rec.records.get(part, []) if r[0] >= 2])
            if not len(v):
                cells.append("-")
                continue
            calls = len(v) / max(n_solves - 2, 1)
            cells.append(f"{np.median(v[:, 0]) * 1e3:.3f} ms, {np.median(v[:, 1]):.0f}"
                         + (f" ({calls:.1f} calls a solve)" if abs(calls - 1.0) > 0.05 else ""))
        rows.append(cells)
    print(f"budro from {Path(budro.__file__).parent.parent}; Adult, {args.backend}, m = 32, 199 solves a fit; "
          f"each call after a fit's first two solves: median ms, median minor page faults")
    print()
    print("| fit | " + " | ".join(parts) + " |")
    print("|---|" + "---|" * len(parts))
    for i, cells in enumerate(rows, 1):
        print(f"| {i} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
