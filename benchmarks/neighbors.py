"""Neighbour graph of a BuDRO fit: exact against approximate searches, and what the approximation costs.

    python benchmarks/neighbors.py                                   # 10^5 and 10^6 synthetic rows, m = 16
    python benchmarks/neighbors.py --sizes 100000 --methods exact,faiss-ivf --m 32
    python benchmarks/neighbors.py --output docs/neighbors-benchmark.md

Data: benchmarks/training.py's synthetic tabular-like rows (20 features, 5 latent factors), embedded
by the fair metric a BuDRO fit learns on them (sensitive subspace, protected f0), as
``BuDROClassifier(n_neighbors=m)`` searches them.  For each size and method, a fresh process
builds ``NeighborCost(Z, m, method=...)`` and reports its time (build + query + exact costs of the
listed pairs) and its peak RSS above the loaded data.  Then, against the exact lists:

- recall@m: the share of listed neighbours within the exact m-th distance (ties count), over
  ``--queries`` random points whose exact distances to all n points are computed by brute force;
- the adversary's objective: the exact dual (``DualSolver``) solved on each method's lists with
  the same losses (those of plain XGBoost after 20 rounds on the same rows) and the same eps;
- determinism: the lists of a second build with one thread, compared with the first.

Writes a markdown table (``--output`` FILE, between markers) with the machine and the command.
Not a test: times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _report import replace_section  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def _peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the
    parent across fork + exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _synthetic(n: int, factors: int, d: int = 20, seed: int = 0):
    """benchmarks/training.py's synthetic rows with ``factors`` latent factors (5: the same rows)."""
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(n, factors))
    X = F @ (rng.normal(size=(factors, d)) / np.sqrt(factors)) + 0.02 * rng.normal(size=(n, d))
    X[:, 0] = rng.integers(0, 2, n)  # a binary protected attribute
    X[:, 1] += 0.8 * X[:, 0]  # a proxy for it
    logits = X[:, 1:6] @ np.array([1.0, -0.7, 0.5, 0.3, -0.2]) + 0.5 * X[:, 0]
    y = (rng.random(n) < 1 / (1 + np.exp(-logits))).astype(int)
    return X, y


def _data(n: int, factors: int, cache: Path):
    """(Z, X, y) of n synthetic rows; Z is the fitted fair metric's embedding (cached on disk)."""
    X, y = _synthetic(n, factors)
    path = cache / f"Z{n}_{factors}.npy"
    if path.exists():
        return np.load(path), X, y
    import budro.registry as registry

    metric = registry.create("fair_metric", "sensitive-subspace").fit(X, [0], y=y)
    Z = metric.embed(X)
    np.save(path, Z)
    return Z, X, y


def _child(spec: dict) -> dict:
    from budro.transport import NeighborCost

    Z = np.load(spec["Z"])
    rss0 = _peak_rss_mib()
    t0 = time.perf_counter()
    cost = NeighborCost(Z, spec["m"], method=spec["method"], n_jobs=spec["threads"])
    seconds = time.perf_counter() - t0
    np.save(spec["out"], cost.neighbors)
    np.save(spec["out_costs"], cost.neighbor_costs)
    return {"seconds": seconds, "rss_above_mib": _peak_rss_mib() - rss0, "n_distinct": cost.n_distinct,
            "used": cost.method}


def _run_child(spec: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{spec['method']} failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _exact_kth(Z: np.ndarray, queries: np.ndarray, m: int) -> np.ndarray:
    """Exact m-th smallest squared distance (itself included) of each query point, brute force."""
    sq = np.einsum("ij,ij->i", Z, Z)
    out = np.empty(len(queries))
    for b in range(0, len(queries), 64):
        q = queries[b:b + 64]
        D = sq[q, None] + sq[None, :] - 2.0 * (Z[q] @ Z.T)
        D[np.arange(len(q)), q] = 0.0
        out[b:b + 64] = np.partition(D, m - 1, axis=1)[:, m - 1]
    return out


def _recall(Z: np.ndarray, nb: np.ndarray, queries: np.ndarray, kth: np.ndarray) -> float:
    d = ((Z[nb[queries]] - Z[queries][:, None, :]) ** 2).sum(-1)
    return float(np.mean(d <= kth[:, None] * (1 + 1e-9) + 1e-12))


def _losses(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-label logistic losses of plain XGBoost after 20 rounds (depth 6, learning rate 0.1)."""
    import xgboost as xgb

    booster = xgb.train({"max_depth": 6, "eta": 0.1, "objective": "binary:logistic", "nthread": 2},
                        xgb.DMatrix(X, label=y), num_boost_round=20)
    f = booster.predict(xgb.DMatrix(X), output_margin=True).astype(np.float64)
    return np.column_stack([np.logaddexp(0.0, f), np.logaddexp(0.0, -f)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--factors", type=int, default=5,
                    help="latent factors of the synthetic rows (5: benchmarks/training.py's data; more: a higher dimension)")
    ap.add_argument("--methods", default="exact,faiss-ivf,auto",
                    help="NeighborCost methods; the first must be exact (the reference)")
    ap.add_argument("--extra", default="100000:sklearn,100000:faiss-hnsw", help="size:method pairs run in addition, e.g. 100000:sklearn")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--eps", type=float, default=0.1)
    ap.add_argument("--queries", type=int, default=2000, help="random points whose exact neighbours are computed")
    ap.add_argument("--threads", type=int, default=None, help="search threads (default: budro's available_cores)")
    ap.add_argument("--determinism-max-n", type=int, default=200_000,
                    help="rebuild approximate lists on one thread and compare, up to this n")
    ap.add_argument("--output", default="")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(json.loads(args.child))))
        return 0

    from budro._threads import available_cores
    from budro.solvers.dual import DualSolver
    from budro.transport import NeighborCost, TransportProblem

    command = "python benchmarks/neighbors.py " + " ".join(argv if argv is not None else sys.argv[1:])
    threads = args.threads or available_cores()
    load0 = os.getloadavg()[0]
    methods = args.methods.split(",")
    extra = [tuple(e.split(":")) for e in args.extra.split(",") if e]
    rows = []
    dims = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for n in [int(s) for s in args.sizes.split(",")]:
            Z, X, y = _data(n, args.factors, tmp)
            losses = _losses(X, y)
            del X
            from budro.transport import _AxesTree

            dims[n] = _AxesTree(Z).intrinsic_dimension(args.m)
            queries = np.sort(np.random.default_rng(0).choice(n, min(args.queries, n), replace=False))
            kth = _exact_kth(Z, queries, min(args.m, n))
            lists = {}
            for method in methods + [mm for s, mm in extra if int(s) == n and mm not in methods]:
                spec = {"Z": str(tmp / f"Z{n}_{args.factors}.npy"), "m": args.m, "method": method, "threads": threads,
                        "out": str(tmp / f"nb_{method}.npy"), "out_costs": str(tmp / f"c_{method}.npy")}
                res = _run_child(spec)
                nb, c = np.load(spec["out"]), np.load(spec["out_costs"])
                lists[method] = (nb, c)
                row = {"n": n, "method": method, **res, "recall": _recall(Z, nb, queries, kth)}
                cost = NeighborCost.from_lists(nb, c)
                t0 = time.perf_counter()
                result = DualSolver().solve(TransportProblem(losses, y, cost, args.eps))
                row["solve_s"] = time.perf_counter() - t0
                row["objective"] = float(result.objective)
                if n <= args.determinism_max_n and row["used"].startswith("faiss"):
                    again = _run_child({**spec, "threads": 1, "out": str(tmp / "again.npy"),
                                        "out_costs": str(tmp / "again_c.npy")})
                    same = np.array_equal(np.load(tmp / "again.npy"), nb)
                    row["deterministic"] = f"{'yes' if same else 'NO'} ({threads} vs 1 thread, {again['seconds']:.1f} s on 1)"
                elif method.startswith("faiss") or row["used"].startswith("faiss"):
                    row["deterministic"] = f"not checked (n > {args.determinism_max_n})"
                rows.append(row)
                print(json.dumps(row), flush=True)
            ref = rows[-len(lists)]
            plain = float(np.mean(losses[np.arange(n), y]))
            for r in rows[-len(lists):]:
                r["plain_loss"] = plain
                r["objective_vs_exact"] = r["objective"] / ref["objective"]
                r["gain_vs_exact"] = (r["objective"] - plain) / (ref["objective"] - plain)
            del Z, lists
    lines = [f"Command: `{command.strip()}`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average before the run {load0:.2f}; "
             f"search threads {threads}; m = {args.m}; eps = {args.eps}; synthetic rows with {args.factors} latent "
             f"factors, embedding dimension at the neighbours' scale (budro's estimate): "
             + ", ".join(f"n={n}: {d:.1f}" for n, d in dims.items()), "",
             "| n | method (used) | build+query s | peak RSS above data MiB | recall@m | objective | / exact | adversary gain / exact | deterministic |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        used = f" ({r['used']})" if r["used"] != r["method"] else ""
        lines.append(f"| {r['n']} | {r['method']}{used} | {r['seconds']:.1f} | {r['rss_above_mib']:.0f} | {r['recall']:.6f} | "
                     f"{r['objective']:.8f} | {r['objective_vs_exact']:.8f} | {r['gain_vs_exact']:.6f} | "
                     f"{r.get('deterministic', 'exact')} |")
    lines.append("")
    lines.append(f"recall@m over {args.queries} random query points (exact distances to all n points); objective: the exact "
                 f"dual on each method's lists, losses of plain XGBoost after 20 rounds (plain loss "
                 + ", ".join(f"n={r['n']}: {r['plain_loss']:.6f}" for r in rows if r is rows[0] or r["n"] != rows[rows.index(r) - 1]["n"])
                 + "); adversary gain = (objective - plain loss) / (exact lists' objective - plain loss).")
    text = "\n".join(lines)
    print(text)
    if args.output:
        replace_section(Path(args.output), f"Neighbour search ({args.factors} factors, n = {args.sizes})", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
