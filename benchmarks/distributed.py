"""BuDRO on a Dask LocalCluster: time per phase, bytes moved per round, peak memory per worker.

    python benchmarks/distributed.py --quick                          # 10^5 rows, 3 rounds, 2 workers (smoke run)
    python benchmarks/distributed.py --rows 1000000 --workers 1,2 --rounds 10 --single 1000000
    python benchmarks/distributed.py --rows 10000000 --workers 2 --rounds 3 --single 0
    python benchmarks/distributed.py --report-only                    # rewrite the report from stored runs

Data (the same rows for every worker count): X = Z A + 0.05 noise with Z ~ N(0, I_5), A a fixed
5 x 20 matrix, float32; column 0 replaced by a binary protected attribute and column 1 made a proxy
of it; y Bernoulli with logistic probabilities of five columns.  Rows are generated block by block
(blocks of at most 250 000 rows, seeded by block index) **on the workers**: the "load" phase is the
time until every block is in worker memory.  The single-machine comparison (``--single N``)
generates the same blocks in one child process and fits :class:`budro.BuDROClassifier` there.

For each (rows, workers) a fresh ``LocalCluster(n_workers=w, threads_per_worker=1,
processes=True)`` runs one ``DaskBuDROClassifier(n_neighbors=16, ...)`` fit of ``--rounds`` BuDRO
rounds (XGBoost, depth 6) and records its ``timings_`` (once-per-fit phases) and ``history_``
(per-round phases and bytes moved), the peak resident memory of each worker process (``VmHWM`` from
/proc through ``client.run``) and the load average before and after.  Runs are merged into
``--results`` (JSON, keyed by rows, workers, rounds) and the report section (``--report``, between
markers, through benchmarks/_report.py) is rebuilt from every stored run: the tables, and per
per-round phase the least-squares fit of ``t(n, w) = a + b n / w + c w`` over the stored runs.

Not a test: times depend on the machine and on the other jobs sharing its cores (the load average is
reported beside every run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# This file's name would shadow the ``distributed`` package (here and in the worker processes,
# which inherit sys.path and re-import this file): the script's folder leaves sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(REPO))


def replace_section(*args, **kwargs) -> None:
    """benchmarks/_report.py's, loaded from its file (the folder is not on sys.path, see above)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_report", HERE / "_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.replace_section(*args, **kwargs)

SECTION = "distributed-benchmark"
BLOCK_ROWS = 250_000
N_FEATURES, N_LATENT = 20, 5
PARAMS = {"eps": 0.1, "n_neighbors": 16, "protected": [0], "random_state": 0,
          "backend_params": {"max_depth": 6, "learning_rate": 0.3}}
DOC_HEADER = "# BuDRO on a Dask cluster\n"


# ------------------------------------------------------------------------------------- data
def block(i: int, rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows of block ``i`` (a pure function of ``i``, ``rows`` and ``seed``)."""
    A = np.random.default_rng(seed).normal(size=(N_LATENT, N_FEATURES)) / math.sqrt(N_LATENT)
    rng = np.random.default_rng([seed, i + 1])
    Z = rng.normal(size=(rows, N_LATENT))
    X = Z @ A + 0.05 * rng.normal(size=(rows, N_FEATURES))
    X[:, 0] = rng.integers(0, 2, rows)  # binary protected attribute
    X[:, 1] += 0.8 * X[:, 0]  # a proxy for it
    logits = X[:, 1:6] @ np.array([1.0, -0.7, 0.5, 0.3, -0.2]) + 0.5 * X[:, 0]
    y = (rng.random(rows) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
    return X.astype(np.float32), y


def block_sizes(n: int) -> list[int]:
    k = max(1, math.ceil(n / BLOCK_ROWS))
    base, extra = divmod(n, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def local_data(n: int) -> tuple[np.ndarray, np.ndarray]:
    parts = [block(i, r) for i, r in enumerate(block_sizes(n))]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def dask_data(n: int):
    """Dask arrays whose blocks are generated on the workers."""
    import dask
    import dask.array as da

    xs, ys = [], []
    for i, r in enumerate(block_sizes(n)):
        pair = dask.delayed(block, nout=2, pure=True)(i, r)
        xs.append(da.from_delayed(pair[0], shape=(r, N_FEATURES), dtype=np.float32))
        ys.append(da.from_delayed(pair[1], shape=(r,), dtype=np.int64))
    return da.concatenate(xs), da.concatenate(ys)


# ------------------------------------------------------------------------------ measurement
def _vmhwm_mib() -> float:
    """Peak resident memory of the calling process (VmHWM), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _as_dict(record: Any) -> dict[str, Any]:
    if isinstance(record, dict):
        return dict(record)
    if hasattr(record, "to_dict"):
        return dict(record.to_dict())
    import dataclasses

    if dataclasses.is_dataclass(record):
        return dataclasses.asdict(record)
    return dict(vars(record))


def _numbers(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items() if isinstance(v, (int, float, np.integer, np.floating))
            and not isinstance(v, bool)}


def run_distributed(n: int, workers: int, rounds: int, metric_sample: int | None,
                    partitions: int | None = None, memory_limit: str | int = 0) -> dict[str, Any]:
    from distributed import Client, LocalCluster, wait

    from budro.dask import DaskBuDROClassifier

    out: dict[str, Any] = {"kind": "dask", "rows": n, "workers": workers, "rounds": rounds,
                           "metric_sample": metric_sample, "partitions_given": partitions,
                           "load_before": os.getloadavg()[0]}
    import dask

    # A memory limit only ends a worker above 95% of it (its nanny kills it: the run fails, the machine
    # is safe); no spilling or pausing, which would change what is timed.
    with dask.config.set({"distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
                          "distributed.worker.memory.pause": False}):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                               memory_limit=memory_limit)
    out["memory_limit"] = memory_limit
    client = Client(cluster)
    try:
        out["rss_start_mib"] = sorted(client.run(_rss_mib).values())
        dX, dy = dask_data(n)
        t0 = time.perf_counter()
        dX, dy = client.persist([dX, dy])
        wait([dX, dy])
        out["load_s"] = time.perf_counter() - t0
        out["rss_data_mib"] = sorted(client.run(_rss_mib).values())
        est = DaskBuDROClassifier(client=client, n_steps=rounds, metric_sample=metric_sample,
                                  n_partitions=partitions, **PARAMS)
        t0 = time.perf_counter()
        est.fit(dX, dy)
        out["fit_s"] = time.perf_counter() - t0
        out["peak_mib"] = sorted(client.run(_vmhwm_mib).values())
        out["timings"] = _numbers(_as_dict(getattr(est, "timings_", {}) or {}))
        out["history"] = [_numbers(_as_dict(r)) for r in est.history_]
        out["time_setup"] = float(est.time_setup_)  # metric + the slowest shard's embedding and neighbour lists
        for attr in ("partition_sizes_", "shard_sizes_", "neighbor_recall_", "n_partitions_"):
            value = getattr(est, attr, None)
            if value is not None:
                out[attr.rstrip("_")] = np.asarray(value).tolist()
    finally:
        client.close()
        cluster.close()
    out["load_after"] = os.getloadavg()[0]
    return out


def run_single(n: int, rounds: int) -> dict[str, Any]:
    """In a child process: the single-machine fit on the same rows (VmHWM of that process)."""
    from budro import BuDROClassifier

    out: dict[str, Any] = {"kind": "single", "rows": n, "workers": 1, "rounds": rounds,
                           "load_before": os.getloadavg()[0]}
    t0 = time.perf_counter()
    X, y = local_data(n)
    out["load_s"] = time.perf_counter() - t0
    out["rss_data_mib"] = [_rss_mib()]
    est = BuDROClassifier(n_steps=rounds, **PARAMS)
    t0 = time.perf_counter()
    est.fit(X, y)
    out["fit_s"] = time.perf_counter() - t0
    out["peak_mib"] = [_vmhwm_mib()]
    out["time_setup"] = float(est.time_setup_)
    out["history"] = [_numbers(_as_dict(r)) for r in est.history_]
    out["load_after"] = os.getloadavg()[0]
    return out


# ---------------------------------------------------------------------------------- results
def _key(run: dict[str, Any]) -> str:
    return f"{run['kind']}:{run['rows']}:{run['workers']}:{run['rounds']}:{run.get('partitions_given')}"


def merge_results(path: Path, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    stored = json.loads(path.read_text()) if path.exists() else []
    by_key = {_key(r): r for r in stored}
    for r in runs:
        by_key[_key(r)] = r
    merged = sorted(by_key.values(), key=lambda r: (r["kind"], r["rows"], r["workers"], r.get("partitions_given") or 0,
                                                    r["rounds"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(merged, indent=1) + "\n")
    os.replace(tmp, path)
    return merged


#: Per-round columns of ``history_`` (DaskRoundRecord; the single-machine RoundRecord has losses,
#: ``time_solve``, ``time_tree`` and ``time_total``): (key, heading).
ROUND_COLUMNS = [("time_losses", "losses (worker)"), ("time_hulls", "hulls (client)"),
                 ("worker_time_hulls", "hulls (worker wall)"), ("worker_cpu_hulls", "hulls (worker CPU)"),
                 ("time_search", "dual search (client)"), ("time_recover", "primal recovery (worker)"),
                 ("time_solve", "solve"), ("time_tree", "tree (client)"), ("worker_time_tree", "tree (worker wall)"),
                 ("worker_cpu_tree", "tree (worker CPU)"), ("time_total", "round"), ("bytes_sent", "bytes sent"),
                 ("bytes_received", "bytes received"), ("calls", "actor calls")]
#: Once-per-fit columns: (key of ``timings_`` or of the run, heading).
SETUP_COLUMNS = [("check", "checks"), ("metric", "fair metric"), ("partition", "k-means partitioning"),
                 ("shards", "shards: rows moved, embedding, neighbour lists"),
                 ("neighbors", "of which embedding + neighbour lists (slowest shard)"),
                 ("start", "first tree (f_0)"), ("rounds", "rounds"), ("finish", "model to client"),
                 ("recall", "neighbour recall measurement")]


def per_round(run: dict[str, Any]) -> dict[str, float]:
    """Median over rounds (the first left out when there are three or more) of every per-round
    number of the run's history."""
    hist = run.get("history") or []
    if len(hist) >= 3:
        hist = hist[1:]
    keys = sorted({k for h in hist for k in h})
    return {k: float(np.median([h.get(k, np.nan) for h in hist])) for k in keys}


def _compute(pr: dict[str, float]) -> float:
    """Worker-side seconds of a round: losses, hulls and tree in CPU seconds of the slowest shard's
    thread, recovery in wall seconds (no CPU count recorded for it)."""
    return pr["time_losses"] + pr["worker_cpu_hulls"] + pr["time_recover"] + pr["worker_cpu_tree"]


def _overhead(pr: dict[str, float]) -> float:
    """Client-side seconds of a round not spent computing on a shard: the calls' latency, the
    network, the client's search, and waiting (for the slowest shard, for a core)."""
    return (pr["time_hulls"] - pr["worker_time_hulls"]) + pr["time_search"] + (pr["time_tree"] - pr["worker_time_tree"])


#: The time model's parts: (name, value of a run's per-round medians, regressors of (n, w)).
MODEL_PARTS = [
    ("compute: worker CPU per round", _compute, lambda n, w: [1.0, n / w]),
    ("overhead: client wall less worker wall", _overhead, lambda n, w: [1.0, float(w)]),
    ("round wall time on this machine", lambda pr: pr["time_total"], lambda n, w: [1.0, n / w, float(w)]),
]


def fit_time_model(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Least squares in relative error (each run's equation divided by its value) over the dask runs
    with one partition per worker and at least 3 rounds, for each part of MODEL_PARTS:
    compute = b0 + b n/w, overhead = a + c w, round = a + b n/w + c w."""
    dask_runs = [r for r in runs if r["kind"] == "dask" and len(r.get("history") or []) >= 3
                 and not r.get("partitions_given")]
    model: dict[str, dict[str, float]] = {}
    for name, value, regressors in MODEL_PARTS:
        pts = []
        for r in dask_runs:
            try:
                v = value(per_round(r))
            except KeyError:
                continue
            if math.isfinite(v) and v > 0:
                pts.append((r["rows"], r["workers"], v))
        k = len(regressors(1, 1))
        if len(pts) < k + 1 or (k >= 2 and len({w for _, w, _ in pts}) < 2 and name.startswith("overhead")):
            continue
        M = np.array([regressors(n, w) for n, w, _ in pts], dtype=float)
        t = np.array([v for *_, v in pts])
        coef, *_ = np.linalg.lstsq(M / t[:, None], np.ones(len(t)), rcond=None)
        pred = M @ coef
        names = {"compute": ["b0", "b"], "overhead": ["a", "c"], "round": ["a", "b", "c"]}[name.split()[0].rstrip(":")]
        fitted = {key: 0.0 for key in ("a", "b0", "b", "c")}
        fitted.update(zip(names, map(float, coef)))
        fitted["max_rel_err"] = float(np.max(np.abs(pred - t) / t))
        fitted["points"] = len(pts)
        model[name] = fitted
    return model


def _fmt_t(s: float) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def _fmt_b(b: float) -> str:
    if b is None or not math.isfinite(b):
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b:.0f} B"


def _setup(run: dict[str, Any]) -> dict[str, float]:
    out = dict(run.get("timings", {}))
    if run["kind"] == "dask" and "time_setup" in run and "metric" in out:
        out["neighbors"] = run["time_setup"] - out["metric"]
    return out


def _label(run: dict[str, Any]) -> str:
    given = run.get("partitions_given")
    return f"{run['kind']}, {given} partitions" if given else run["kind"]


def report(runs: list[dict[str, Any]], command: str) -> str:
    import dask
    import distributed
    import xgboost

    failed = [r for r in runs if r["kind"] == "failed"]
    runs = [r for r in runs if r["kind"] != "failed"]
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs (load = 1-minute "
        f"`os.getloadavg()` before / after each run), Python {platform.python_version()}, dask {dask.__version__}, "
        f"distributed {distributed.__version__}, xgboost {xgboost.__version__}.  "
        f"`LocalCluster(n_workers=w, threads_per_worker=1, processes=True)`, one XGBoost thread per worker.",
        f"Parameters: `{json.dumps(PARAMS)}`.  Runs are stored in `docs/results/distributed-benchmark.json`; "
        f"last command: `{command}`.",
        "",
        "| run | rows | workers | rounds | metric rows | data to workers | whole fit | sum of rounds | partitions "
        "(rows) | neighbour recall | peak RSS per worker | RSS with data | load before / after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        hist = r.get("history") or []
        total_rounds = sum(h.get("time_total", 0.0) for h in hist)
        parts = r.get("partition_sizes")
        lines.append(
            f"| {_label(r)} | {r['rows']:,} | {r['workers']} | {r['rounds']} | "
            f"{r.get('metric_sample') or 'all'} | {_fmt_t(r['load_s'])} | {_fmt_t(r['fit_s'])} | "
            f"{_fmt_t(total_rounds)} | {', '.join(f'{p:,}' for p in parts) if parts else '-'} | "
            f"{r['neighbor_recall']:.3f} |".replace("| nan |", "| - |") if "neighbor_recall" in r else
            f"| {_label(r)} | {r['rows']:,} | {r['workers']} | {r['rounds']} | "
            f"{r.get('metric_sample') or 'all'} | {_fmt_t(r['load_s'])} | {_fmt_t(r['fit_s'])} | "
            f"{_fmt_t(total_rounds)} | - | - |")
        lines[-1] += (f" {' / '.join(f'{m:.0f} MiB' for m in r['peak_mib'])} | "
                      f"{' / '.join(f'{m:.0f} MiB' for m in r.get('rss_data_mib', []))} | "
                      f"{r['load_before']:.1f} / {r['load_after']:.1f} |")
    lines += ["", "Once-per-fit phases (seconds; single machine: fair metric + neighbour lists together):", "",
              "| run | rows | workers | " + " | ".join(h for _, h in SETUP_COLUMNS) + " | set-up bytes |",
              "|---|---|---|" + "---|" * (len(SETUP_COLUMNS) + 1)]
    for r in runs:
        st = _setup(r)
        if r["kind"] == "single":
            st = {"metric": r.get("time_setup", math.nan)}
        lines.append(f"| {_label(r)} | {r['rows']:,} | {r['workers']} | "
                     + " | ".join(_fmt_t(st.get(k, math.nan)) for k, _ in SETUP_COLUMNS)
                     + f" | {_fmt_b(st.get('bytes_setup', math.nan))} |")
    lines += ["", "Per round (median over rounds 2..T of `history_`; wall times on the client, the slowest "
                  "worker and the network included):", "",
              "| run | rows | workers | " + " | ".join(h for _, h in ROUND_COLUMNS) + " |",
              "|---|---|---|" + "---|" * len(ROUND_COLUMNS)]
    for r in runs:
        pr = per_round(r)
        cells = []
        for k, _ in ROUND_COLUMNS:
            v = pr.get(k, math.nan)
            cells.append(_fmt_b(v) if k.startswith("bytes") else (f"{v:.0f}" if k == "calls" and math.isfinite(v)
                                                                   else ("-" if k == "calls" else _fmt_t(v))))
        lines.append(f"| {_label(r)} | {r['rows']:,} | {r['workers']} | " + " | ".join(cells) + " |")
    model = fit_time_model(runs)
    if model:
        lines += ["", "Time per round against rows n and workers w, fitted to the dask runs above with one partition "
                      "per worker (least squares in relative error; seconds):", "",
                  "| part | a: fixed (s) | b0: per shard (s) | b: per row on one worker (s) | c: per worker (s) | runs "
                  "| largest relative error |", "|---|---|---|---|---|---|---|"]
        for name, f in model.items():
            lines.append(f"| {name} | {f['a']:.4g} | {f['b0']:.4g} | {f['b']:.3g} | {f['c']:.4g} | {f['points']} | "
                         f"{f['max_rel_err']:.0%} |")
        lines += ["", *predictions(model)]
    if failed:
        lines += ["", "Runs that failed:", ""]
        lines += [f"- {r['rows']:,} rows, {r['workers']} worker(s), memory limit {r.get('memory_limit')} per worker: "
                  f"`{r['error']}`" for r in failed]
    return "\n".join(lines)


def crossover(compute: dict[str, float], overhead: dict[str, float], n: float) -> float:
    """Workers w at which the compute per shard, b0 + b n / w, falls to the overhead a + c w (the
    positive root of c w^2 + (a - b0) w - b n = 0); inf when the overhead does not grow."""
    a, c, b0, b = overhead["a"], overhead["c"], compute["b0"], compute["b"]
    if b <= 0:
        return math.nan
    if c > 0:
        return (-(a - b0) + math.sqrt((a - b0) ** 2 + 4.0 * c * b * n)) / (2.0 * c)
    if a - b0 > 0:
        return b * n / (a - b0)
    return math.inf


def predictions(model: dict[str, dict[str, float]]) -> list[str]:
    """The model read off: t(n, w) = compute + overhead = (a + b0) + b n / w + c w for one core per
    worker, at 10^6..10^8 rows and 1..64 workers, and the worker count where overhead overtakes."""
    comp = model.get("compute: worker CPU per round")
    over = model.get("overhead: client wall less worker wall")
    if comp is None or over is None:
        return []
    ws = [1, 2, 4, 8, 16, 64]
    out = ["Predicted time per round with one core per worker, t(n, w) = (a + b0) + b n / w + c w from the compute "
           "and overhead rows (an extrapolation far beyond the 1-2 workers measured):", "",
           "| rows | " + " | ".join(f"w = {w}" for w in ws) + " | overhead = compute at w = |",
           "|---|" + "---|" * (len(ws) + 1)]
    for n in (10**6, 10**7, 10**8):
        cells = [_fmt_t(over["a"] + comp["b0"] + comp["b"] * n / w + over["c"] * w) for w in ws]
        x = crossover(comp, over, n)
        out.append(f"| {n:.0e} | " + " | ".join(cells) + " | "
                   + ("-" if math.isnan(x) else "never" if math.isinf(x) else f"{x:.1f}") + " |")
    return out


# -------------------------------------------------------------------------------------- main
def _ints(text: str) -> list[int]:
    return [int(float(v)) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1000000,10000000", help="comma-separated row counts (default: %(default)s)")
    ap.add_argument("--workers", default="2", help="comma-separated worker counts (default: %(default)s)")
    ap.add_argument("--rounds", default="10,3",
                    help="BuDRO rounds: one value, or one per --rows entry (default: %(default)s)")
    ap.add_argument("--single", type=int, default=1_000_000,
                    help="rows of the single-machine comparison, 0 for none (default: %(default)s)")
    ap.add_argument("--metric-sample", type=int, default=None, help="DaskBuDROClassifier(metric_sample=...)")
    ap.add_argument("--memory-limit", default="0",
                    help="LocalCluster memory_limit per worker, e.g. 7GiB: a worker above 95%% of it is killed by "
                         "its nanny and the run fails (default: %(default)s, no limit)")
    ap.add_argument("--partitions", default="",
                    help="comma-separated n_partitions to run at each size (default: one per worker); runs with "
                         "them are left out of the time model")
    ap.add_argument("--quick", action="store_true", help="--rows 100000 --rounds 3 --single 100000, results and report "
                                                         "in a temporary folder unless given")
    ap.add_argument("--results", help="JSON of stored runs (default: docs/results/distributed-benchmark.json)")
    ap.add_argument("--report", help="markdown file (default: docs/distributed.md)")
    ap.add_argument("--report-only", action="store_true", help="rebuild the report from the stored runs")
    ap.add_argument("--child-single", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_single:
        print(json.dumps(run_single(*args.child_single)))
        return 0
    if args.quick:
        args.rows, args.rounds, args.single = "100000", "3", 100_000
        tmp = Path(tempfile.mkdtemp(prefix="budro-distributed-"))
        args.results = args.results or str(tmp / "runs.json")
        args.report = args.report or str(tmp / "distributed.md")
    results = Path(args.results or REPO / "docs" / "results" / "distributed-benchmark.json")
    report_path = Path(args.report or REPO / "docs" / "distributed.md")
    command = "python benchmarks/distributed.py " + " ".join(sys.argv[1:] if argv is None else argv)
    runs: list[dict[str, Any]] = []
    if not args.report_only:
        rows, workers, rounds = _ints(args.rows), _ints(args.workers), _ints(args.rounds)
        if len(rounds) == 1:
            rounds = rounds * len(rows)
        if len(rounds) != len(rows):
            ap.error("--rounds: one value, or one per --rows entry")
        r_single = rounds[rows.index(args.single)] if args.single in rows else rounds[0]
        if args.single:
            proc = subprocess.run([sys.executable, __file__, "--child-single", str(args.single), str(r_single)],
                                  capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr)
                return proc.returncode
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"single {args.single}: fit {runs[-1]['fit_s']:.1f} s", flush=True)
        for n, r in zip(rows, rounds):
            for w, p in [(w, p) for w in workers for p in (_ints(args.partitions) or [None])]:
                try:
                    runs.append(run_distributed(n, w, r, args.metric_sample, p,
                                                int(args.memory_limit) if args.memory_limit.isdigit()
                                                else args.memory_limit))
                except Exception as exc:  # noqa: BLE001 - recorded: e.g. a worker killed at its memory limit
                    print(f"dask {n} x {w} workers failed: {type(exc).__name__}: {exc}", flush=True)
                    runs.append({"kind": "failed", "rows": n, "workers": w, "rounds": r, "partitions_given": p,
                                 "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                                 "memory_limit": args.memory_limit, "load_after": os.getloadavg()[0]})
                else:
                    print(f"dask {n} x {w} workers: fit {runs[-1]['fit_s']:.1f} s, peak {runs[-1]['peak_mib']} MiB",
                          flush=True)
                merge_results(results, runs[-1:])
        if runs and runs[0]["kind"] == "single":
            merge_results(results, runs[:1])
    stored = json.loads(results.read_text()) if results.exists() else runs
    replace_section(report_path, SECTION, report(stored, command), new_file=DOC_HEADER)
    print(f"report: {report_path}; runs: {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
