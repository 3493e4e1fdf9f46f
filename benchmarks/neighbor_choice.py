"""The exact neighbour search's choice between scipy's k-d tree and brute force, checked by timing both.

    BUDRO_DATA_HOME=../shared/data python benchmarks/neighbor_choice.py                 # ~3 min
    BUDRO_DATA_HOME=../shared/data python benchmarks/neighbor_choice.py --output docs/neighbors-benchmark.md

``NeighborCost(Z, m)`` (methods ``"exact"`` and ``"auto"``) above ``EXACT_BRUTE_MAX_N`` points
chooses between the k-d tree on the principal axes and brute force (the compiled search of
``budro._knn_numba`` where numba is installed, else scikit-learn's) by a cost model
of both (``budro.transport._brute_force_cheaper``: no timing, so the choice depends on the data
only).  This script times both searches side by side on each case (the distinct points, as a fit
searches them) and prints what the model estimated and chose, so that its constants can be checked
on a machine: the choice is right when it picks the faster search, or one within 15 % of it.  On
Adult it also times the whole ``NeighborCost`` with the compiled list-finishing kernel and with
the numpy path.

Cases: Adult's fair embedding (experiments/adult.toml's metric on its first training split: 36177
rows, 30053 distinct, 38 coordinates) at m = 16, 32, 100, and benchmarks/training.py's synthetic
tabular rows (19 coordinates; 5 or 8 latent factors).  Brute force is timed only where the model
gives it at most ``--brute-max`` seconds.  Not a test: times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from _report import replace_section  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _adult_embedding() -> np.ndarray | None:
    from budro.config import load_config
    from budro.exceptions import BudroError

    try:
        cfg = load_config(REPO / "experiments" / "adult.toml")
        train, _ = cfg.load_dataset().train_test_split(0.2, random_state=0, stratify=True)
    except (BudroError, OSError) as exc:
        print(f"Adult skipped ({exc}); set BUDRO_DATA_HOME to the folder holding adult.data", file=sys.stderr)
        return None
    est = cfg.make_method("BuDRO")
    est.set_params(n_steps=1, n_neighbors=2)  # the fitted fair metric is what is needed
    est.fit(train.X, train.y)
    return est.fair_metric_.embed(np.asarray(train.X, dtype=np.float64))


def _synthetic(n: int, factors: int, d: int = 20, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(n, factors))
    X = F @ (rng.normal(size=(factors, d)) / np.sqrt(factors)) + 0.02 * rng.normal(size=(n, d))
    return X[:, 1:]  # the protected column left out, as the fair metric does


def run(name: str, Z: np.ndarray, m: int, threads: int, brute_max: float) -> dict:
    from budro import transport

    groups = transport._distinct_rows(Z, "auto")
    if groups is not None:
        Z = Z[groups[0]]
    n, p = Z.shape
    # the choice's own time as method="exact" makes it: the tree, the cost model, and the
    # dimension only where the model does not find brute force cheaper
    t0 = time.perf_counter()
    tree = transport._AxesTree(Z)
    cheaper = transport._brute_force_cheaper(tree, n, p, m, threads)
    chosen = "brute" if cheaper or tree.intrinsic_dimension(m, threads) > transport.KD_TREE_MAX_DIM else "tree"
    model_s = time.perf_counter() - t0
    dimension = tree.intrinsic_dimension(m, threads)  # reported where the choice did not need it too
    examined = tree.examined(m)
    brute_est = transport._brute_force_seconds(n, p)
    tree_est = transport._tree_seconds(tree, n, p, m)
    t0 = time.perf_counter()
    tree.query(m, threads)
    tree_s = time.perf_counter() - t0
    brute_s = sklearn_s = None
    if brute_est <= brute_max:
        t0 = time.perf_counter()
        transport._brute_force_neighbors(Z, m, threads)
        brute_s = time.perf_counter() - t0
        if transport._knn_kernel(n) is not None:  # scikit-learn's brute force beside it
            transport.USE_KNN_KERNEL = False
            try:
                t0 = time.perf_counter()
                transport._brute_force_neighbors(Z, m, threads)
                sklearn_s = time.perf_counter() - t0
            finally:
                transport.USE_KNN_KERNEL = True
    row = {"case": name, "n": n, "p": p, "m": m, "dimension": dimension, "examined": examined, "model_s": model_s,
           "tree_est": tree_est, "brute_est": brute_est, "chosen": chosen, "tree_s": tree_s, "brute_s": brute_s,
           "sklearn_s": sklearn_s}
    print(row, flush=True)
    return row


def finish_times(Z: np.ndarray, m: int, repeats: int = 2) -> dict | None:
    """``NeighborCost(Z, m)`` built with the compiled list-finishing kernel and with the numpy
    path, alternating (the same search; the difference is the finishing), and whether the lists
    are identical.  None where numba is not installed."""
    from budro import transport
    from budro.solvers import _sparse_kernels

    if not _sparse_kernels.installed():
        return None
    times = {True: [], False: []}
    lists = {}
    for _ in range(repeats):
        for use in (True, False):
            transport.USE_FINISH_KERNEL = use
            try:
                t0 = time.perf_counter()
                cost = transport.NeighborCost(Z, m)
                times[use].append(time.perf_counter() - t0)
            finally:
                transport.USE_FINISH_KERNEL = True
            lists[use] = (cost.neighbors, cost.neighbor_costs)
    same = all(np.array_equal(a, b) for a, b in zip(lists[True], lists[False]))
    return {"m": m, "kernel": times[True], "numpy": times[False], "same": same}


def _verdict(r: dict) -> str:
    if r["brute_s"] is None:
        return "tree (brute force not timed)" if r["chosen"] == "tree" else "not timed"
    best = min(r["tree_s"], r["brute_s"])
    got = r["tree_s"] if r["chosen"] == "tree" else r["brute_s"]
    return "right" if got <= 1.15 * best else f"WRONG ({got / best:.2f} x the faster)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None, help="search threads (default: budro's available_cores)")
    ap.add_argument("--brute-max", type=float, default=40.0,
                    help="time brute force only where the model gives it at most this many one-thread seconds")
    ap.add_argument("--output", default="")
    args = ap.parse_args(argv)
    from budro._threads import available_cores, limit_threads

    threads = args.threads or available_cores()
    command = "python benchmarks/neighbor_choice.py " + " ".join(argv if argv is not None else sys.argv[1:])
    load0 = os.getloadavg()[0]
    rows = []
    with limit_threads(threads):
        Z = _adult_embedding()
        finish = None
        if Z is not None:
            rows += [run("Adult", Z, m, threads, args.brute_max) for m in (16, 32, 100)]
            finish = finish_times(Z, 100)
        for n, factors, m in ((30_000, 5, 100), (30_000, 8, 100), (50_000, 8, 32), (100_000, 5, 16)):
            rows.append(run(f"synthetic, {factors} factors", _synthetic(n, factors), m, threads, args.brute_max))
    lines = [
        f"Command: `{command.strip()}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {threads} search threads; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load0:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end",
        "",
        "n: distinct points searched; examined: points per query in leaves whose box meets the ball of the m-th "
        "nearest distance (64 seeded queries); model s: the choice's own time (the tree, the examined count, and the dimension where the count does not find brute force cheaper); estimates "
        "in one-thread seconds, times measured on the threads above; right: the chosen search is the faster one "
        "or within 15 % of it.",
        "",
        "brute s: the brute force `exact` uses (the compiled search where numba is installed and n^2 >= "
        "KNN_KERNEL_MIN_PAIRS, else scikit-learn's); sklearn s: scikit-learn's brute force on the same points "
        "right after it, for comparison (not an option the choice considers).",
        "",
        "| case | n | p | m | dimension | examined | model s | tree est s | brute est s | chosen | tree s | brute s | sklearn s | choice |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        brute = "-" if r["brute_s"] is None else f"{r['brute_s']:.2f}"
        sk = "-" if r.get("sklearn_s") is None else f"{r['sklearn_s']:.2f}"
        lines.append(f"| {r['case']} | {r['n']} | {r['p']} | {r['m']} | {r['dimension']:.1f} | {r['examined']:.0f} | "
                     f"{r['model_s']:.2f} | {r['tree_est']:.1f} | {r['brute_est']:.1f} | {r['chosen']} | "
                     f"{r['tree_s']:.2f} | {brute} | {sk} | {_verdict(r)} |")
    if finish is not None:
        lines += ["", f"Finishing the lists (Adult, all 36177 rows, m = {finish['m']}, `NeighborCost(Z, m)` whole, "
                  f"alternating): with the compiled kernel {', '.join(f'{t:.2f}' for t in finish['kernel'])} s, with "
                  f"the numpy path {', '.join(f'{t:.2f}' for t in finish['numpy'])} s; lists and costs identical: "
                  f"{'yes' if finish['same'] else 'NO'}."]
    text = "\n".join(lines)
    print(text)
    if args.output:
        replace_section(Path(args.output), "Exact search: tree or brute force", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
