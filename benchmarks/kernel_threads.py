"""The exact dual's kernel threads inside a fit: one thread against budro's default, side by side.

    BUDRO_DATA_HOME=../shared/data python benchmarks/kernel_threads.py                 # Adult, XGBoost and LightGBM
    BUDRO_DATA_HOME=../shared/data python benchmarks/kernel_threads.py --settings german,compas,adult --repeats 2
    python benchmarks/kernel_threads.py --output docs/performance.md

For each paper setting (benchmarks/training.py's: the training split, the BuDRO method of
experiments/<setting>.toml, Adult with m = 32 neighbours) and booster, in one process: a plain fit
(the library's own training, same parameters and trees), then BuDRO fits alternating
``DualSolver(kernel_threads=1)`` (the default until 2026-11-26) and the default
(``kernel_threads=None``: budro chooses, one thread per 10 000 columns, at most the available
cores), ``--repeats`` times each, then the plain fit again.  The first BuDRO fit of the process
pays numba's start; it is reported and left out of the medians.  Reports per variant the median
BuDRO time per round (whole fit minus set-up, over the trees), the mean solve and tree per round,
the ratio to the plain round (mean of the two plain fits), and whether the predictions equal
those of the one-thread fit (the kernel's result does not depend on its threads).

Not a test: times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from _report import replace_section  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

VARIANTS = {"kernel_threads=1": 1, "default (None)": None}


def _fit(X, y, cfg, params, backend, rounds, m, kernel_threads):
    from budro import BuDROClassifier

    solver_params = dict(cfg.solver_params)
    if kernel_threads is not None:
        solver_params["kernel_threads"] = kernel_threads
    clf = BuDROClassifier(backend=backend, backend_params=params, eps=cfg.eps, n_steps=rounds - 1, random_state=0,
                          n_neighbors=m, solver=cfg.solver, solver_params=solver_params, fair_metric=cfg.fair_metric,
                          fair_metric_params=dict(cfg.fair_metric_params), protected=list(cfg.protected) or None)
    t0 = time.perf_counter()
    clf.fit(X, y)
    total = time.perf_counter() - t0
    h = clf.history_
    return {"round_ms": 1000 * (total - clf.time_setup_) / rounds,
            "solve_ms": 1000 * float(np.mean([r.time_solve for r in h[1:]])),
            "tree_ms": 1000 * float(np.mean([r.time_tree for r in h])),
            "proba": clf.predict_proba(X)[:, 1]}


def run(setting: str, backend: str, repeats: int) -> list[str]:
    import training

    import budro.registry as registry

    X, y, cfg, params, _ = training._paper_setting(setting, backend)
    rounds = training.SETTINGS[setting]["rounds"]
    m = training.SETTINGS[setting]["n_neighbors"]
    Xa = np.asarray(X, dtype=np.float64)
    plain = registry.create("backend", backend, **params)
    t0 = time.perf_counter()
    plain.fit_native(Xa, y, 2, rounds, random_state=0)
    plain_ms = [1000 * (time.perf_counter() - t0) / rounds]
    first = _fit(X, y, cfg, params, backend, rounds, m, 1)  # numba's start: reported, not counted
    runs: dict[str, list[dict]] = {k: [] for k in VARIANTS}
    for _ in range(repeats):
        for label, threads in VARIANTS.items():
            runs[label].append(_fit(X, y, cfg, params, backend, rounds, m, threads))
    t0 = time.perf_counter()
    plain.fit_native(Xa, y, 2, rounds, random_state=0)
    plain_ms.append(1000 * (time.perf_counter() - t0) / rounds)
    p = statistics.mean(plain_ms)
    lines = []
    for label, rs in runs.items():
        r_ms = statistics.median(r["round_ms"] for r in rs)
        same = all(np.array_equal(r["proba"], first["proba"]) for r in rs)
        lines.append(f"| {setting} | {backend} | {rounds} | {'full' if m is None else m} | {label} | "
                     f"{p:.2f} | {r_ms:.2f} | **{r_ms / p:.2f}** | {statistics.median(r['solve_ms'] for r in rs):.2f} | "
                     f"{statistics.median(r['tree_ms'] for r in rs):.2f} | "
                     f"{', '.join('%.2f' % r['round_ms'] for r in rs)} | {'yes' if same else 'NO'} |")
        print(lines[-1], flush=True)
    print(f"  (first BuDRO fit of the process, kernel_threads=1: {first['round_ms']:.2f} ms per round; "
          f"plain {', '.join('%.2f' % v for v in plain_ms)} ms per round)", flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", default="adult", help="comma-separated: german, compas, adult")
    ap.add_argument("--backends", default="xgboost,lightgbm")
    ap.add_argument("--repeats", type=int, default=2, help="BuDRO fits per variant (alternating)")
    ap.add_argument("--output", default="", help="markdown file to write the table into (between markers)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}")
    from budro._threads import available_cores

    load0 = os.getloadavg()[0]
    header = ["| setting | backend | trees | m | kernel threads | plain ms/round | BuDRO ms/round (median) | ratio | "
              "solve ms | tree ms | runs ms/round | same model |",
              "|---|---|---:|---|---|---:|---:|---:|---:|---:|---|---|"]
    print("\n".join(header), flush=True)
    lines = []
    for setting in args.settings.split(","):
        for backend in args.backends.split(","):
            lines += run(setting, backend, args.repeats)
    command = "python benchmarks/kernel_threads.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        f"Command: `{command.strip()}`", "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, budro's available_cores() = {available_cores()}; "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; load average {load0:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end", "", *header, *lines, ""])
    if args.output:
        replace_section(Path(args.output), "Kernel threads in a fit", text)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
