"""Thread settings on a busy machine: budro's defaults against thread counts set by hand.

    BUDRO_DATA_HOME=../shared/data python benchmarks/threads.py                       # German 300, Adult 20 rounds
    python benchmarks/threads.py --settings german --backends xgboost,lightgbm --competitors 1 --repeats 3

Starts ``--competitors`` CPU-bound processes (a Python busy loop each) and, while they run, fits
BuDRO on the paper's settings (the BuDRO method of experiments/<setting>.toml, fewer rounds) with:

- ``default``: no thread parameter, the environment as budro leaves it (``GOMP_SPINCOUNT=3000``
  set at ``import budro`` when neither it nor ``OMP_WAIT_POLICY`` is set: budro/_threads.py);
- ``threads=N``: the booster's thread parameter set by hand (``nthread``, ``num_threads``, ``thread_count``);
- variants of the OpenMP waiting: ``OMP_WAIT_POLICY=`` (empty: libgomp's own default, a 3 ms
  spin, as before budro set anything), ``ACTIVE``, ``PASSIVE``, and other ``GOMP_SPINCOUNT``
  values (``--variants`` picks them by index).

Every fit runs in a fresh process (an OpenMP runtime reads ``OMP_WAIT_POLICY`` once, when it
starts).  Prints the thread count budro chose (``budro._threads.available_cores``) and a markdown
table of whole-fit times (median of ``--repeats``), and the ratio of the default to the best
setting found; ``--output FILE`` writes the table into FILE between markers.  Not a test:
numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _report import replace_section  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]

SETTINGS = {"german": ("german.toml", 300, None), "adult": ("adult.toml", 20, 32)}
THREADS_KEY = {"xgboost": "nthread", "lightgbm": "num_threads", "catboost": "thread_count"}
#: (label, thread count or None for budro's default, environment changes: a value, or None to
#: remove the variable; an empty dict leaves the environment as budro sets it[, solver parameters
#: set on top of the config's])
VARIANTS = [
    ("default", None, {}),
    ("default, OMP_WAIT_POLICY= (runtime default)", None, {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": None}),
    ("default, OMP_WAIT_POLICY=ACTIVE", None, {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": None}),
    ("default, OMP_WAIT_POLICY=PASSIVE", None, {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None}),
    ("threads=1", 1, {}),
    ("threads=1, OMP_WAIT_POLICY=", 1, {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": None}),
    ("threads=2", 2, {}),
    ("threads=2, OMP_WAIT_POLICY=", 2, {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": None}),
    ("default, GOMP_SPINCOUNT=3000", None, {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": "3000"}),
    ("default, GOMP_SPINCOUNT=30000", None, {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": "30000"}),
    # The solver's compiled kernel on one thread (its default before 2026-11-26; budro now chooses
    # one thread per 10 000 columns: German 1, Adult 2 on this machine).
    ("default, kernel_threads=1", None, {}, {"kernel_threads": 1}),
    ("default, kernel_threads=2", None, {}, {"kernel_threads": 2}),
]


def _child(spec: dict) -> dict:
    """One fit (runs in a fresh process)."""
    import numpy as np

    from budro import BuDROClassifier
    from budro._threads import available_cores
    from budro.compare import backend_params_for
    from budro.config import load_config

    config, rounds, m = SETTINGS[spec["setting"]]
    cfg = load_config(REPO / "experiments" / config)
    train, _ = cfg.load_dataset().train_test_split(test_size=0.2, random_state=0)
    params, _ = backend_params_for(cfg, spec["backend"])
    if spec["backend"] == "lightgbm" and "max_depth" in params and "num_leaves" not in params:
        params["num_leaves"] = min(2 ** int(params["max_depth"]), 131072)
    if spec["threads"] is not None:
        params[THREADS_KEY[spec["backend"]]] = spec["threads"]
    clf = BuDROClassifier(backend=spec["backend"], backend_params=params, eps=cfg.eps, n_steps=rounds - 1,
                          solver=cfg.solver, solver_params={**cfg.solver_params, **spec.get("solver_params", {})},
                          fair_metric=cfg.fair_metric,
                          fair_metric_params=dict(cfg.fair_metric_params), protected=list(cfg.protected) or None,
                          n_neighbors=m, random_state=0)
    t0 = time.perf_counter()
    clf.fit(train.X, np.asarray(train.y))
    total = time.perf_counter() - t0
    h = clf.history_
    return {"fit_s": total, "setup_s": clf.time_setup_,
            "tree_ms": 1000 * float(np.median([r.time_tree for r in h])),
            "solve_ms": 1000 * float(np.median([r.time_solve for r in h])),
            "cores": available_cores(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "gomp_spincount": os.environ.get("GOMP_SPINCOUNT")}


def _run(spec: dict, changes: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env, capture_output=True,
                         text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"child failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", default="german,adult")
    ap.add_argument("--backends", default="xgboost")
    ap.add_argument("--competitors", type=int, default=1, help="CPU-bound processes running during the fits")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--variants", default="", help="comma-separated indices into the variant list (default: all)")
    ap.add_argument("--output", default="", help="markdown file to write the table into (between markers)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(json.loads(args.child))))
        return 0

    sys.path.insert(0, str(REPO))
    from budro._threads import available_cores

    variants = [VARIANTS[int(i)] for i in args.variants.split(",")] if args.variants else VARIANTS
    command = "python benchmarks/threads.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    cores = available_cores()
    print(f"budro's thread count here: available_cores() = {cores} (affinity {len(os.sched_getaffinity(0))}, "
          f"os.cpu_count() {os.cpu_count()})", flush=True)
    load0 = os.getloadavg()[0]
    competitors = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.competitors)]
    rows = []
    try:
        time.sleep(1.0)
        for setting in args.settings.split(","):
            for backend in args.backends.split(","):
                results = {}
                for label, threads, changes, *solver_params in variants:
                    spec = {"setting": setting, "backend": backend, "threads": threads,
                            "solver_params": solver_params[0] if solver_params else {}}
                    runs = [_run(spec, changes) for _ in range(args.repeats)]
                    fit = statistics.median(r["fit_s"] for r in runs)
                    results[label] = (fit, runs)
                    times = ", ".join(f"{r['fit_s']:.2f}" for r in runs)
                    print(f"{setting:7s} {backend:9s} {label:45s} fit {fit:7.2f} s  ({times}; tree "
                          f"{runs[0]['tree_ms']:.1f} ms, solve {runs[0]['solve_ms']:.1f} ms; "
                          f"OMP_WAIT_POLICY={runs[0]['omp_wait_policy']!r}, "
                          f"GOMP_SPINCOUNT={runs[0]['gomp_spincount']!r})", flush=True)
                best = min(results, key=lambda k: results[k][0])
                for label, (fit, runs) in results.items():
                    rows.append((setting, backend, label, fit, [r["fit_s"] for r in runs], fit / results[best][0],
                                 runs[0]["tree_ms"], runs[0]["solve_ms"]))
                if "default" in results:
                    print(f"-> {setting}/{backend}: default {results['default'][0]:.2f} s, best {best!r} "
                          f"{results[best][0]:.2f} s, ratio {results['default'][0] / results[best][0]:.2f}", flush=True)
    finally:
        for p in competitors:
            p.kill()
            p.wait()
    table = [f"Command: `{command.strip()}`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average before the run {load0:.2f}; "
             f"{args.competitors} competing busy-loop process(es); budro's available_cores() = {cores}", "",
             "| setting | backend | variant | whole fit s (median) | runs | / best | tree ms | solve ms |",
             "|---|---|---|---:|---|---:|---:|---:|"]
    for setting, backend, label, fit, runs, ratio, tree, solve in rows:
        table.append(f"| {setting} | {backend} | {label} | {fit:.2f} | {', '.join(f'{r:.2f}' for r in runs)} | "
                     f"{ratio:.2f} | {tree:.2f} | {solve:.2f} |")
    text = "\n".join(table)
    print(text)
    if args.output:
        replace_section(Path(args.output), f"Threads benchmark ({args.competitors} competing processes)", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
