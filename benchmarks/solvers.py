"""Transport-solver benchmarks: time and memory per solve, restriction quality, dual-sgd gaps.

    BUDRO_DATA_HOME=../shared/data python benchmarks/solvers.py speed          # ~6-10 min
    BUDRO_DATA_HOME=../shared/data python benchmarks/solvers.py restriction    # ~3 min
    BUDRO_DATA_HOME=../shared/data python benchmarks/solvers.py sgd-gap        # ~3 min
    python benchmarks/solvers.py speed --quick                                  # smoke run
    BUDRO_DATA_HOME=../shared/data python benchmarks/solvers.py rounds         # ~2 min
    BUDRO_DATA_HOME=../shared/data python benchmarks/solvers.py full           # ~30-60 min
    python benchmarks/solvers.py large                                          # ~20-40 min

Instances are the paper's three data sets at their training sizes (German n = 800, COMPAS
n = 4222, Adult n = 36177; 80/20 split, standardised features), the sensitive-subspace fair
metric on their protected attributes, and per-label logistic losses of a plain logistic
regression; where a data set cannot be loaded an Adult-shaped synthetic instance of the same size
is used instead (the report says which).

``speed``: every solver registered at run time (``budro.registry.available("solver")``), on the
dense cost where it fits in memory (n = 800, 4222) and on sparse ``NeighborCost`` lists of
m = 16, 32, 64, 128 neighbours; each case runs in its own process.  Per case: median wall time of
a *cold* solve (no warm start) and of a *round* (the losses perturbed by 1 % as between two
boosting rounds, warm-started from the previous round's eta; solver caches kept, as in a fit),
the CPU time of a round, the peak of Python-traced memory during one round (tracemalloc: numpy
buffers included) and the process's peak RSS (imports and data included).

``restriction``: the share of the full problem's adversarial gain (objective minus the plain
empirical loss) that the nearest-neighbour restriction keeps at m = 16, 32, 64, 128, eps = 0.1,
0.4, 1.0, on a random subsample of Adult (full problem solved exactly by the dense ``dual`` on an
``EmbeddingCost``, in blocks).

``sgd-gap``: the objective gap of ``dual-sgd`` (unpolished: the SGD plan itself) to the exact
``dual`` optimum, over seeds, budgets, cold and warm starts.

``rounds``: ``dual`` on the losses of an actual BuDRO fit (the paper's configuration of
experiments/<setting>.toml with XGBoost on one thread: German and COMPAS on the full problem,
Adult with m = 32 neighbours), round after round, warm-started from the previous round's eta as
in a fit; per round it times the solver as configured and, side by side in the same process,
the reference path (German and COMPAS: the column-block cutting plane, i.e. no complete lists
and no collapsing; Adult: the numpy kernel), and reports the largest relative difference of
objective, eta and weights between the two.

``full``: the exact full-problem path of ``dual`` (:mod:`budro.solvers._dual_full`) on Adult's
EmbeddingCost through the rounds of the paper's BuDRO fit (losses recorded by a callback from
experiments/adult.toml's configuration, cached outside the repository): wall and CPU time per
round, columns rescanned, pairs kept, peak RSS, and equality with the dense dual on the rounds
checked (``--check-full`` at n = 36177, minutes each; ``--check-sub`` on a 20000-row subsample,
where a cold exact solve is timed too); a synthetic run at ``--syn-n`` rows, and the scan rate at
``--big-n`` rows (the unit of a cold pass there; 0 skips either).  Each part runs in its own
process.  Sizes of rows below the full path's ``full_min_n`` (4000) are refused up front.

``large``: the same path at large n without a fit's losses: synthetic drifting rounds at each
``--large-n`` (how many columns need rescans per round, as a share of n) and the scan rate at
``--big-n`` rows; from the two, a projection of a warm round at ``--big-n`` (labelled as such).

Writes markdown to docs/solvers-benchmark.md (sections replaced in place).  Not a test: numbers
depend on the machine and its load (this project's machines are 2 shared cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from _report import cpu_model, machine_speed, replace_section, speed_text  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("BUDRO_BENCH_CACHE", "/tmp/budro-bench"))
SETTINGS = {"german": ("load_german", 800, 61), "compas": ("load_compas", 4222, 7), "adult": ("load_adult", 36177, 41)}
M_LIST = (16, 32, 64, 128)
EPS = {"german": 1.0, "compas": 0.12, "adult": 0.4}  # the paper's budgets


# ---------------------------------------------------------------------------- instances


def _synthetic(n: int, d: int, seed: int = 0):
    """Adult-shaped: 5 continuous columns, two binary protected ones, the rest one-hot groups."""
    rng = np.random.default_rng(seed)
    cont = rng.normal(size=(n, 5))
    prot = (rng.random((n, 2)) < [0.67, 0.85]).astype(float)
    blocks = []
    left = d - 7
    while left > 0:
        k = min(left, int(rng.integers(3, 10)))
        blocks.append(np.eye(k)[rng.integers(0, k, size=n)])
        left -= k
    X = np.column_stack([cont, prot, *blocks])[:, :d]
    w = rng.normal(size=d)
    y = (X @ w + 0.8 * X[:, 5] + rng.logistic(size=n) > 0).astype(int)
    X = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
    return X, y, [5, 6]


def _instance(setting: str, m_max: int = 128) -> dict:
    """Embedding, losses, labels and the m_max nearest-neighbour lists (cached on disk)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{setting}-m{m_max}.npz"
    if path.exists():
        f = np.load(path, allow_pickle=False)
        return {k: f[k] for k in f.files} | {"source": str(f["source"])}
    import budro.datasets as ds
    from budro import registry
    from budro.transport import NeighborCost
    from sklearn.linear_model import LogisticRegression

    loader, n, d = SETTINGS[setting]
    try:
        data = getattr(ds, loader)(download=False)
        train, _ = data.train_test_split(test_size=0.2, random_state=0)
        X, y, protected = train.X, np.asarray(train.y).astype(int), list(train.protected_indices)
        source = f"{setting} (real, n={X.shape[0]})"
    except Exception as exc:  # no data: an Adult-shaped stand-in of the same size
        X, y, protected = _synthetic(n, d)
        source = f"{setting}-shaped synthetic (n={n}; data not loadable: {type(exc).__name__})"
    metric = registry.create("fair_metric", "sensitive-subspace").fit(X, protected=protected)
    Z = np.ascontiguousarray(metric.embed(X))
    s = LogisticRegression(max_iter=2000).fit(X, y).decision_function(X)
    losses = np.column_stack([np.logaddexp(0.0, s), np.logaddexp(0.0, -s)])  # label 0, label 1
    nbc = NeighborCost(Z, min(m_max, Z.shape[0]))
    out = {"Z": Z, "losses": losses, "labels": y, "nb": nbc.neighbors, "nc": nbc.neighbor_costs,
           "source": np.array(source)}
    np.savez(path, **out)
    return out | {"source": source}


def _peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: reset at exec, unlike ru_maxrss on Linux)."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cost(inst: dict, kind: str):
    from budro.transport import EmbeddingCost, NeighborCost

    if kind == "dense":
        return EmbeddingCost(inst["Z"])
    m = int(kind.split("=")[1])
    return NeighborCost.from_lists(inst["nb"][:, :m], inst["nc"][:, :m])


# ---------------------------------------------------------------------------- speed


def run_case(case: dict) -> dict:
    """One (setting, cost, solver) case, in a fresh process."""
    from budro import registry
    from budro.transport import TransportProblem

    inst = _instance(case["setting"])
    cost = _cost(inst, case["cost"])
    losses, labels, eps = inst["losses"], inst["labels"], case["eps"]
    rss_data = _peak_rss_mib()
    solver = registry.create("solver", case["solver"])
    rng = np.random.default_rng(0)
    budget = case["budget_s"]

    def round_losses():
        return losses * np.exp(0.01 * rng.normal(size=losses.shape))

    t0 = time.perf_counter()
    first = solver.solve(TransportProblem(losses, labels, cost, eps))
    first_s = time.perf_counter() - t0
    cold = [first_s]
    while sum(cold) < budget / 3 and len(cold) < 5:
        t0 = time.perf_counter()
        solver.solve(TransportProblem(losses, labels, cost, eps))
        cold.append(time.perf_counter() - t0)
    warm, cpu, iters = [], [], []
    eta = first.eta
    spent = 0.0
    while (spent < budget / 2 and len(warm) < 9) or len(warm) < 2:
        problem = TransportProblem(round_losses(), labels, cost, eps)
        t0, c0 = time.perf_counter(), time.process_time()
        res = solver.solve(problem, eta0=eta if np.isfinite(eta) else None)
        warm.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        spent += warm[-1]
        iters.append(res.n_iter)
        eta = res.eta
    tracemalloc.start()
    solver.solve(TransportProblem(round_losses(), labels, cost, eps), eta0=eta if np.isfinite(eta) else None)
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        **case,
        "first_s": first_s,
        "cold_s": float(np.median(cold)),
        "round_s": float(np.median(warm)),
        "round_cpu_s": float(np.median(cpu)),
        "rounds": len(warm),
        "iters": float(np.median(iters)),
        "traced_mib": traced / 2**20,
        "rss_mib": _peak_rss_mib(),
        "rss_data_mib": rss_data,
        "objective": float(first.objective),
        "source": inst["source"],
    }


def _child(case: dict, timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "_case", json.dumps(case)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {**case, "error": f"over {timeout:.0f} s"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {**case, "error": last[:120]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def speed(args) -> str:
    from budro import registry

    solvers = registry.available("solver")
    if args.solvers:
        unknown = sorted(set(args.solvers) - set(solvers))
        if unknown:
            raise SystemExit(f"unknown solvers {unknown}; registered: {solvers}")
        solvers = [s for s in solvers if s in args.solvers]
    settings = ["german", "compas", "adult"] if not args.quick else ["german", "adult"]
    m_list = M_LIST if not args.quick else (32,)
    for s in settings:
        _instance(s)  # build and cache once (the kNN graph of Adult takes ~15 s)
    rows = []
    for setting in settings:
        n = SETTINGS[setting][1]
        kinds = (["dense"] if n <= 5000 else []) + [f"m={m}" for m in m_list]
        for kind in kinds:
            for name in solvers:
                case = {"setting": setting, "cost": kind, "solver": name, "eps": EPS[setting],
                        "budget_s": 1.0 if args.quick else 4.0}
                if name == "lp" and (n > 400 or kind != "dense"):
                    rows.append({**case, "error": "refused: the LP has n^2 variables (max_n = 400)"})
                    continue
                r = _child(case, timeout=60 if args.quick else 120)
                rows.append(r)
                print(_row(r), flush=True)
    src = sorted({r["source"] for r in rows if "source" in r})
    lines = [
        "| data (n) | cost | solver | cold solve | round (warm) | round CPU | evals/steps | traced peak | peak RSS (before solving) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [_row(r) for r in rows]
    return "\n".join(lines) + "\n\nData: " + "; ".join(src) + "."


def _ms(x: float) -> str:
    return f"{x * 1e3:.0f} ms" if x < 10 else f"{x:.1f} s"


def _row(r: dict) -> str:
    head = f"| {r['setting']} ({SETTINGS[r['setting']][1]}) | {r['cost']} | {r['solver']} |"
    if "error" in r:
        return head + f" {r['error']} | | | | | |"
    return head + (
        f" {_ms(r['cold_s'])} | {_ms(r['round_s'])} | {_ms(r['round_cpu_s'])} | {r['iters']:g} |"
        f" {r['traced_mib']:.0f} MiB | {r['rss_mib']:.0f} MiB ({r['rss_data_mib']:.0f}) |"
    )


# ---------------------------------------------------------------------------- restriction quality


def restriction(args) -> str:
    from budro.solvers.dual import DualSolver
    from budro.transport import EmbeddingCost, NeighborCost, TransportProblem

    inst = _instance("adult")
    rng = np.random.default_rng(args.seed)
    n_all = inst["Z"].shape[0]
    idx = np.sort(rng.choice(n_all, size=min(args.n, n_all), replace=False))
    Z, losses, labels = inst["Z"][idx], inst["losses"][idx], inst["labels"][idx]
    n = Z.shape[0]
    plain = float(losses[np.arange(n), labels].mean())
    full_cost = EmbeddingCost(Z, cache_bytes=0)
    sparse = {m: NeighborCost(Z, m) for m in M_LIST}
    lines = [
        f"| eps | full optimum | gain (optimum - plain loss) | " + " | ".join(f"m = {m}" for m in M_LIST) + " |",
        "| ---: | ---: | ---: | " + " | ".join("---:" for _ in M_LIST) + " |",
    ]
    times = []
    for eps in args.eps:
        # Warm-started from the widest restriction's eta (the full problem's passes are O(n^2)).
        hint = DualSolver().solve(TransportProblem(losses, labels, sparse[M_LIST[-1]], eps)).eta
        t0 = time.perf_counter()
        # The full problem is the oracle here: minutes per solve are expected (no max_dense_n limit).
        full = DualSolver(max_dense_n=None).solve(TransportProblem(losses, labels, full_cost, eps), eta0=hint)
        times.append(time.perf_counter() - t0)
        gain = full.objective - plain
        cells = []
        for m in M_LIST:
            res = DualSolver().solve(TransportProblem(losses, labels, sparse[m], eps))
            cells.append(f"{(res.objective - plain) / gain:.1%} (-{(full.objective - res.objective) / full.objective:.2%})")
        lines.append(f"| {eps:g} | {full.objective:.5f} | {gain:.5f} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    return (
        "\n".join(lines)
        + f"\n\nCells: share of the full problem's adversarial gain kept by the m-neighbour restriction "
        f"(in brackets: objective lost, relative to the full optimum).  {inst['source']}, random subsample of "
        f"n = {n} (seed {args.seed}); plain empirical loss {plain:.5f}; the full problem was solved exactly by "
        f"the dense `dual` on an uncached `EmbeddingCost` ({', '.join(f'{t:.0f} s' for t in times)})."
    )


# ---------------------------------------------------------------------------- dual-sgd gaps


def sgd_gap(args) -> str:
    from budro.solvers.dual import DualSolver
    from budro.solvers.sgd import DualSGDSolver
    from budro.transport import TransportProblem

    out = []
    cases = [("adult", "m=64", (0.1, 0.4, 1.0)), ("compas", "dense", (0.03, 0.12, 0.5)), ("german", "dense", (0.3, 1.0, 3.0))]
    lines = [
        "| data | cost | start | runs | median gap | 90th pct | max | share of runs within 1e-3 (polish not needed) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for setting, kind, budgets in cases:
        inst = _instance(setting)
        cost = _cost(inst, kind)
        gaps = {"cold": [], "warm (eta0 off by 10 %)": []}
        for eps in budgets:
            problem = TransportProblem(inst["losses"], inst["labels"], cost, eps)
            exact = DualSolver().solve(problem)
            for seed in range(args.seeds):
                solver = DualSGDSolver(random_state=seed, polish=False)
                cold = solver.solve(problem)
                warm = solver.solve(problem, eta0=exact.eta * (1.1 if seed % 2 else 1 / 1.1) if exact.eta > 0 else None)
                for key, res in (("cold", cold), ("warm (eta0 off by 10 %)", warm)):
                    gaps[key].append((exact.objective - res.objective) / abs(exact.objective))
                    assert res.transport_cost <= eps * (1 + 1e-12)
        for key, g in gaps.items():
            g = np.maximum(np.array(g), 0.0)
            lines.append(
                f"| {setting} | {kind} | {key} | {g.size} | {np.median(g):.1e} | {np.quantile(g, 0.9):.1e} | "
                f"{g.max():.1e} | {np.mean(g <= 1e-3):.0%} |"
            )
            print(lines[-1], flush=True)
        out.append(inst["source"])
    return (
        "\n".join(lines)
        + "\n\nGap: (dual optimum - dual-sgd objective) / dual optimum, dual-sgd with its defaults "
        f"(batch 200, 100 steps, lr 0.1, momentum 0.9) and polish=False, {args.seeds} seeds per budget; every plan "
        f"met its budget.  Data: {'; '.join(out)}."
    )


# ---------------------------------------------------------------------------- rounds of a fit

ROUNDS = {"german": 60, "compas": 30, "adult": 40}


def _fit_rounds(setting: str, rounds: int) -> dict:
    """Losses of every round of a BuDRO fit in the paper's configuration (cached on disk)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"rounds-{setting}-{rounds}.npz"
    if path.exists():
        f = np.load(path, allow_pickle=False)
        return {k: f[k] for k in f.files}
    sys.path.insert(0, str(REPO / "benchmarks"))
    import training

    from budro import BuDROClassifier

    X, y, cfg, params, _ = training._paper_setting(setting, "xgboost")
    params["nthread"] = 1
    m = training.SETTINGS[setting]["n_neighbors"]
    seen: dict = {"losses": []}

    def keep(info):
        seen["losses"].append(info.problem.losses.copy())
        seen["cost"], seen["labels"] = info.problem.cost, info.problem.labels

    BuDROClassifier(backend="xgboost", backend_params=params, eps=cfg.eps, n_steps=rounds, random_state=0,
                    n_neighbors=m, callbacks=[keep], solver=cfg.solver, solver_params=dict(cfg.solver_params),
                    fair_metric=cfg.fair_metric, fair_metric_params=dict(cfg.fair_metric_params),
                    protected=list(cfg.protected) or None).fit(X, y)
    cost = seen["cost"]
    out = {"losses": np.array(seen["losses"]), "labels": seen["labels"], "eps": np.array(cfg.eps)}
    out.update({"Z": cost.Z} if m is None else {"nb": cost.neighbors, "nc": cost.neighbor_costs})
    np.savez(path, **out)
    return out


def rounds_report(args) -> str:
    from budro.solvers import _dual_lists
    from budro.solvers.dual import DualSolver
    from budro.transport import EmbeddingCost, NeighborCost, TransportProblem

    lines = [
        "| data (n) | cost | rounds | dual ms/round | reference | reference ms/round | speed-up | max rel. diff objective / eta / weights | solve |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | --- | --- |",
    ]
    load = os.getloadavg()[0]
    for setting in args.settings:
        f = _fit_rounds(setting, ROUNDS[setting])
        L, y, eps = f["losses"], f["labels"], float(f["eps"])
        dense = "Z" in f
        if dense:
            cost, kind = EmbeddingCost(f["Z"]), "full problem"
            new, ref, ref_name = DualSolver(), DualSolver(), "column blocks"
        else:
            cost, kind = NeighborCost.from_lists(f["nb"], f["nc"]), f"m = {f['nb'].shape[1]}"
            new, ref, ref_name = DualSolver(), DualSolver(kernel="numpy"), "numpy kernel"
        t_new, t_ref, diff = [], [], np.zeros(3)
        e_new = e_ref = None
        for t in range(L.shape[0]):
            problem = TransportProblem(L[t], y, cost, eps)
            t0 = time.perf_counter()
            a = new.solve(problem, eta0=e_new)
            t1 = time.perf_counter()
            saved = _dual_lists._MAX_PAIRS
            _dual_lists._MAX_PAIRS = 0 if dense else saved  # the reference: no complete lists
            try:
                t2 = time.perf_counter()
                b = ref.solve(problem, eta0=e_ref)
                t3 = time.perf_counter()
            finally:
                _dual_lists._MAX_PAIRS = saved
            e_new, e_ref = a.eta, b.eta
            if t >= 2:  # the first rounds build the caches (lists, kernel compilation)
                t_new.append(t1 - t0)
                t_ref.append(t3 - t2)
            diff = np.maximum(diff, [abs(a.objective - b.objective) / abs(b.objective),
                                     abs(a.eta - b.eta) / max(abs(b.eta), 1e-300),
                                     float(np.abs(a.weights - b.weights).max() / np.abs(b.weights).max())])
            assert a.transport_cost <= eps * (1 + 1e-9) + 1e-12
        red = a.info.get("reduced")
        how = (f"{red[0]} distinct rows x {red[1]} distinct columns" if red else "neighbour lists") + \
            f", {a.n_iter} evaluation(s), {a.info['candidate_pairs']} candidate pairs"
        mn, mr = 1e3 * float(np.median(t_new)), 1e3 * float(np.median(t_ref))
        lines.append(f"| {setting} ({L.shape[1]}) | {kind} | {L.shape[0]} | {mn:.2f} | {ref_name} | {mr:.2f} | "
                     f"{mr / mn:.1f}x | {diff[0]:.0e} / {diff[1]:.0e} / {diff[2]:.0e} | {how} |")
        print(lines[-1], flush=True)
    return ("\n".join(lines) + "\n\nMedians over the rounds after the first two; both solvers see the same "
            "problems in the same process, alternately.  Losses: a BuDRO fit with the paper's configuration "
            "(experiments/<setting>.toml, XGBoost, one thread), cached in $BUDRO_BENCH_CACHE.  Load average "
            f"(other work on the machine) at the start: {load:.1f}, at the end: {os.getloadavg()[0]:.1f}.")


# ---------------------------------------------------------------------------- full


#: The fits whose losses ``full`` replays (``--fit-adversary``): the adversary's n_neighbors, the
#: cache file, how the report names the fit, and its adversary in the report's note on the losses.
_FITS = {"neighbours": (None, "full-adult.npz", "the paper's BuDRO fit", "its n_neighbors = 100 adversary"),
         "exact": ("exact", "full-adult-exact.npz", "the BuDRO fit with the exact full adversary",
                   'n_neighbors = "exact" (the exact full adversary, as experiments/adult-exact-full.toml)')}


def _full_rounds(adversary: str = "neighbours") -> dict:
    """Adult: the losses of every round of the paper's BuDRO fit (experiments/adult.toml as it
    is: n_neighbors = 100 adversary, XGBoost depth 14, lr 0.005, 179 rounds, one booster thread;
    with ``adversary="exact"`` the same fit with n_neighbors = "exact", as
    experiments/adult-exact-full.toml, whose losses drift otherwise), the fair embedding Z and eps
    (cached in $BUDRO_BENCH_CACHE, outside the repository)."""
    n_neighbors, name = _FITS[adversary][:2]
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / name
    if path.exists():
        f = np.load(path, allow_pickle=False)
        return {k: f[k] for k in f.files}
    sys.path.insert(0, str(REPO / "benchmarks"))
    import training

    from budro import BuDROClassifier

    X, y, cfg, params, _ = training._paper_setting("adult", "xgboost")
    params["nthread"] = 1
    seen: dict = {"losses": [], "steps": []}

    def keep(info):
        seen["losses"].append(info.problem.losses.astype(np.float64))
        seen["steps"].append(int(info.record.step))
        seen["Z"], seen["labels"] = info.problem.cost.Z, info.problem.labels

    BuDROClassifier(backend="xgboost", backend_params=params, eps=cfg.eps, n_steps=cfg.n_steps, random_state=0,
                    n_neighbors=n_neighbors or cfg.n_neighbors, callbacks=[keep], solver=cfg.solver,
                    solver_params=dict(cfg.solver_params), fair_metric=cfg.fair_metric,
                    fair_metric_params=dict(cfg.fair_metric_params), protected=list(cfg.protected) or None).fit(X, y)
    out = {"losses": np.array(seen["losses"]), "steps": np.array(seen["steps"]), "labels": seen["labels"],
           "Z": seen["Z"], "eps": np.array(cfg.eps)}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **out)
    os.replace(tmp, path)
    return out


def _full_part(part: str, opts: dict) -> dict:
    """One part of ``full``, in its own process (its peak RSS is its own)."""
    from budro.solvers.dual import DualSolver
    from budro.transport import EmbeddingCost, TransportProblem

    threads = int(opts["threads"])
    out: dict = {}
    if part in ("adult", "adult-fit", "subsample"):
        f = _full_rounds(opts["fit_adversary"])
        L, y, Z, eps = f["losses"], f["labels"], f["Z"], float(f["eps"])
        if part == "subsample":  # a 20000-row subsample, every round, then the dense path on some
            rows = np.sort(np.random.default_rng(0).choice(L.shape[1], size=int(opts["sub_n"]), replace=False))
            L, y, Z = L[:, rows], y[rows], Z[rows]
        cost = EmbeddingCost(Z, cache_bytes=0)
        solver = DualSolver(kernel_threads=threads)
        if part == "adult-fit":  # as a fit calls it: rounds follow (the first solve keeps lists for their drift)
            solver.prepare(L.shape[1], sparse=False)
        rounds, checks = [], []
        check_at = set() if part == "adult-fit" else set(opts["check_sub"] if part == "subsample" else opts["check_full"])
        for t in range(L.shape[0]):
            problem = TransportProblem(L[t], y, cost, eps)
            w0, c0 = time.perf_counter(), time.process_time()
            r = solver.solve(problem)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            assert r.converged and r.info["full"] and r.transport_cost <= eps * (1 + 1e-9)
            rounds.append({"t": t, "wall": wall, "cpu": cpu, "rescanned": r.info["rescanned_columns"],
                           "pairs": r.info["list_pairs"], "eta": r.eta, "g": r.dual_objective,
                           "candidates": r.info["candidate_pairs"], "floor": r.info.get("floor", 0.0),
                           "below_floor": bool(r.info.get("below_floor", False))})
            if t in check_at:
                w0 = time.perf_counter()
                d = DualSolver(full_min_n=None, max_dense_n=None).solve(problem)
                checks.append({"t": t, "dense_s": time.perf_counter() - w0, "eta": r.eta, "eta_dense": d.eta,
                               "rel_obj": abs(r.objective - d.objective) / abs(d.objective),
                               "rel_dual": abs(r.dual_objective - d.dual_objective) / abs(d.dual_objective),
                               "rel_eta": abs(r.eta - d.eta) / max(abs(d.eta), 1e-300)})
                print(json.dumps(checks[-1]), file=sys.stderr, flush=True)
        out = {"n": int(L.shape[1]), "rounds": rounds, "checks": checks}
        if part == "subsample":  # a cold exact solve at this n (last round's losses, fresh solver)
            problem = TransportProblem(L[-1], y, cost, eps)
            w0, c0 = time.perf_counter(), time.process_time()
            r = DualSolver(kernel_threads=threads).solve(problem)
            out["cold"] = {"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0, "eta": r.eta,
                           "agrees": abs(r.dual_objective - rounds[-1]["g"]) <= 1e-9 * abs(rounds[-1]["g"])}
    elif part == "synthetic":  # drifting losses on a synthetic embedding (Adult's rank), as a fit's
        n, steps = int(opts["syn_n"]), int(opts["syn_rounds"])
        rng = np.random.default_rng(0)
        Z = rng.normal(size=(n, 35)) * rng.uniform(0.1, 1.0, size=35)
        margin = Z @ rng.normal(size=35)
        y = (rng.random(n) < 1.0 / (1.0 + np.exp(-margin))).astype(int)
        drift = np.column_stack([margin, -margin]) / np.abs(margin).max() + 0.3 * rng.normal(size=(n, 2))
        cost = EmbeddingCost(Z, cache_bytes=0)
        solver = DualSolver(kernel_threads=threads)
        rounds = []
        for t in range(steps):
            s_t = 0.2 + 0.005 * t * drift  # 0.005 per round at most along the drift direction
            L = np.column_stack([np.logaddexp(0, margin * s_t[:, 0]), np.logaddexp(0, -margin * s_t[:, 1])])
            problem = TransportProblem(L, y, cost, 0.4)
            w0, c0 = time.perf_counter(), time.process_time()
            r = solver.solve(problem)
            rounds.append({"t": t, "wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                           "rescanned": r.info["rescanned_columns"], "pairs": r.info["list_pairs"],
                           "converged": bool(r.converged)})
            print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
        out = {"n": n, "rounds": rounds}
    elif part == "scan-rate":  # time to scan a block of columns at n rows (the cold pass's unit)
        from budro.solvers import _dual_full

        n = int(opts["big_n"])
        rng = np.random.default_rng(0)
        Z = rng.normal(size=(n, 35)) * rng.uniform(0.1, 1.0, size=35)
        margin = Z @ rng.normal(size=35)
        L = np.column_stack([np.logaddexp(0, margin), np.logaddexp(0, -margin)])
        problem = TransportProblem(L, (rng.random(n) < 0.5).astype(int), EmbeddingCost(Z, cache_bytes=0), 0.4)
        solver = DualSolver(kernel_threads=threads)
        st = _dual_full._state(solver, problem)
        cols = np.arange(int(opts["big_cols"]))
        w0, c0 = time.perf_counter(), time.process_time()
        _dual_full._rescan(solver, st, problem, cols, 0.5, 0.05, 0.05, _dual_full._Budget(None, None),
                           scale_eta=1.0)
        out = {"n": n, "cols": int(cols.size), "wall": time.perf_counter() - w0, "cpu": time.process_time() - c0}
    out["rss_mib"] = _peak_rss_mib()
    return out


#: Rows from which a synthetic run or a scan-rate measurement takes the exact full path (the
#: default ``DualSolver.full_min_n``; below it an embedding cost goes the dense way).
_MIN_ROWS = 4000


def _rows(skip: bool = False):
    """argparse type: a number of rows >= _MIN_ROWS (0 too where ``skip``: the part is not run)."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = -1
        if n >= _MIN_ROWS or (skip and n == 0):
            return n
        zero = " or 0 (skip)" if skip else ""
        raise argparse.ArgumentTypeError(
            f"expected a number of rows >= {_MIN_ROWS} (the exact full path's full_min_n){zero}, got {text!r}")
    return parse


def _rows_list(text: str) -> list[int]:
    """argparse type: comma-separated numbers of rows, each >= _MIN_ROWS."""
    return [_rows()(x) for x in text.split(",") if x]


def _full_child(part: str, opts: dict, timeout: float) -> dict:
    proc = subprocess.run([sys.executable, __file__, "_full", part, json.dumps(opts)], capture_output=True, text=True,
                          timeout=timeout, env=os.environ | {"OMP_NUM_THREADS": str(opts["threads"])})
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _stats(rounds: list, key: str) -> tuple[float, float, float]:
    x = np.array([r[key] for r in rounds])
    return float(np.median(x)), float(np.mean(x)), float(np.max(x))


def full_report(args) -> str:
    """The exact full-problem path of ``dual`` (budro.solvers._dual_full) through a fit's rounds."""
    opts = {"threads": args.threads, "sub_n": 20000, "check_sub": args.check_sub, "check_full": args.check_full,
            "syn_n": args.syn_n, "syn_rounds": args.syn_rounds, "big_n": args.big_n, "big_cols": 2048,
            "fit_adversary": args.fit_adversary}
    _full_rounds(args.fit_adversary)  # record the fit's losses first (cached)
    load0 = os.getloadavg()[0]
    speed0 = machine_speed()
    skipped = {"synthetic": args.syn_n == 0, "scan-rate": args.big_n == 0}
    parts = {p: {"error": "skipped"} if skipped.get(p) else _full_child(p, opts, 3 * 3600)
             for p in ("adult", "adult-fit", "subsample", "synthetic", "scan-rate")}
    lines = []
    a = parts["adult"]
    if "error" in a:
        return "adult part failed:\n\n```\n" + a["error"] + "\n```"
    warm = a["rounds"][1:]
    cold = a["rounds"][0]
    mw, aw, xw = _stats(warm, "wall")
    mc, ac, xc = _stats(warm, "cpu")
    mr, ar, xr = _stats(warm, "rescanned")
    zero = sum(r["rescanned"] == 0 for r in warm)
    lines += [
        f"**Adult** (n = {a['n']}, eps = 0.4, the {len(a['rounds'])} rounds of {_FITS[args.fit_adversary][2]}, "
        f"`DualSolver(kernel_threads={args.threads})`, OMP_NUM_THREADS={args.threads}):",
        "",
        "| | median | mean | max |",
        "| --- | ---: | ---: | ---: |",
        f"| wall time per round (rounds 1-{len(warm)}) | {1e3 * mw:.0f} ms | {1e3 * aw:.0f} ms | {xw:.2f} s |",
        f"| CPU time per round (process_time, all threads) | {1e3 * mc:.0f} ms | {1e3 * ac:.0f} ms | {xc:.2f} s |",
        f"| columns rescanned per round | {mr:.0f} | {ar:.0f} | {xr:.0f} |",
        "",
        f"Round 0 (cold: every column scanned once): {cold['wall']:.1f} s wall, {cold['cpu']:.1f} s CPU.  "
        f"Rounds without any rescan: {zero} of {len(warm)}.  Pairs kept on the lists: "
        f"{min(r['pairs'] for r in warm)}-{max(r['pairs'] for r in warm)} "
        f"({max(r['pairs'] for r in warm) / a['n']:.0f} per column at most).  Peak RSS of the process: "
        f"{a['rss_mib']:.0f} MiB.  Every round converged (certified).  The list kernel's candidates exact "
        f"from a floor under the last two eta* (docs/solvers.md) in {sum(r.get('floor', 0.0) > 0 for r in warm)} "
        f"of {len(warm)} warm rounds, eta* below the floor (candidates made again) in "
        f"{sum(r.get('below_floor', False) for r in warm)}; candidate pairs per warm round, median "
        f"{float(np.median([r.get('candidates', 0) for r in warm])):.0f}.",
        "",
    ]
    per = [f"{r['t']}: {1e3 * r['wall']:.0f}/{1e3 * r['cpu']:.0f} ms, {r['rescanned']}" for r in a["rounds"][1:]]
    lines += ["Per round (wall/CPU, columns rescanned): " + "; ".join(per[::10]) + " (every 10th round).", ""]
    f_ = parts["adult-fit"]
    if "error" not in f_:
        fw = f_["rounds"][1:]
        fmw, faw, _ = _stats(fw, "wall")
        fmc, fac, _ = _stats(fw, "cpu")
        diff = max(abs(x["g"] - y["g"]) / abs(y["g"]) for x, y in zip(f_["rounds"], a["rounds"]))
        lines += [f"**As in a fit** (the same rounds, the solver told first that rounds follow, as every fit does: "
                  f"`DualSolver.prepare`, after which the first solve keeps lists for the drift ahead): per warm "
                  f"round median {1e3 * fmw:.0f} ms (CPU {1e3 * fmc:.0f} ms), mean {1e3 * faw:.0f} ms (CPU "
                  f"{1e3 * fac:.0f} ms); round 0 {f_['rounds'][0]['wall']:.1f} s, round 1 {1e3 * fw[0]['wall']:.0f} ms "
                  f"({fw[0]['rescanned']} columns rescanned); every round converged; g(eta*) within {diff:.1e} "
                  f"(relative) of the run above in every round; peak RSS {f_['rss_mib']:.0f} MiB.", ""]
    checks = a["checks"] + parts["subsample"].get("checks", [])
    if checks:
        lines += ["| check | n | dense dual | rel. diff objective | rel. diff g(eta*) | rel. diff eta* |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for c, n in [(c, a["n"]) for c in a["checks"]] + [(c, parts["subsample"]["n"]) for c in
                                                          parts["subsample"].get("checks", [])]:
            lines.append(f"| round {c['t']} | {n} | {c['dense_s']:.0f} s | {c['rel_obj']:.1e} | {c['rel_dual']:.1e} | "
                         f"{c['rel_eta']:.1e} |")
        lines.append("")
    s = parts["subsample"]
    if "error" not in s:
        ms, as_, _ = _stats(s["rounds"][1:], "wall")
        lines += [f"**Subsample** (n = {s['n']}, the same rounds' losses on 20000 random rows): median "
                  f"{1e3 * ms:.0f} ms, mean {1e3 * as_:.0f} ms per round.  **Cold exact solve at n = {s['n']}** "
                  f"(last round's losses, fresh solver): {s['cold']['wall']:.2f} s wall, {s['cold']['cpu']:.2f} s CPU "
                  f"(same g(eta*) as the warm run: {s['cold']['agrees']}).", ""]
    y_ = parts["synthetic"]
    if "error" not in y_:
        wr = y_["rounds"][1:]
        ms, as_, _ = _stats(wr, "wall")
        mcs, acs, _ = _stats(wr, "cpu")
        lines += [f"**Synthetic** (n = {y_['n']}, p = 35, losses drifting by <= 0.005 per round, {len(y_['rounds'])} "
                  f"rounds): cold {y_['rounds'][0]['wall']:.1f} s wall / {y_['rounds'][0]['cpu']:.1f} s CPU; later "
                  f"rounds median {1e3 * ms:.0f} ms (CPU {1e3 * mcs:.0f} ms), mean {1e3 * as_:.0f} ms (CPU "
                  f"{1e3 * acs:.0f} ms); columns rescanned per round: "
                  + ", ".join(str(r["rescanned"]) for r in wr) + f"; peak RSS {y_['rss_mib']:.0f} MiB.", ""]
    b = parts["scan-rate"]
    if "error" not in b:
        per_col = b["cpu"] / b["cols"]
        lines += [f"**n = {b['n']}**: scanning {b['cols']} columns took {b['wall']:.1f} s wall, {b['cpu']:.1f} s CPU "
                  f"({1e3 * per_col:.1f} ms CPU per column), so the cold pass over all {b['n']} columns needs about "
                  f"{per_col * b['n'] / 3600:.1f} CPU hours on this machine: not run.  A warm round costs the "
                  f"restricted solve (linear in the pairs kept) plus {1e3 * per_col:.1f} ms CPU per rescanned column; "
                  f"how many columns need rescans per round at this n was not measured (see the synthetic run "
                  f"above for n = {y_.get('n')}).", ""]
    lines.append(f"Load average (other work on this 2-core machine, shared with other jobs) at the start: {load0:.1f}, "
                 f"at the end: {os.getloadavg()[0]:.1f}; wall times are inflated by it, CPU times less so.  Machine "
                 f"speed (`machine_speed` of benchmarks/_report.py) at the start: {speed_text(speed0)}; at the end: "
                 f"{speed_text(machine_speed())}.  Equality "
                 f"checks: `DualSolver(full_min_n=None, max_dense_n=None)` (the dense column-block path) on the same "
                 f"problem.  Losses: experiments/adult.toml's BuDRO fit (XGBoost, one thread) with "
                 f"{_FITS[args.fit_adversary][3]}, recorded by a callback and cached in $BUDRO_BENCH_CACHE.")
    return "\n".join(lines)


def large_report(args) -> str:
    """The exact full path at large n, where no fit's losses are at hand: drifting synthetic rounds
    at each ``--large-n`` (columns rescanned per round, as a share of n) and the scan rate at
    ``--big-n`` rows, and from the two a projection of a warm round at ``--big-n`` (not a run)."""
    load0 = os.getloadavg()[0]
    speed0 = machine_speed()
    runs = []
    for n in args.large_n:
        opts = {"threads": args.threads, "syn_n": n, "syn_rounds": args.syn_rounds}
        runs.append(_full_child("synthetic", opts, 3 * 3600))
    b = (_full_child("scan-rate", {"threads": args.threads, "big_n": args.big_n, "big_cols": 2048}, 3 * 3600)
         if args.big_n else None)
    lines = ["| n | cold solve (wall / CPU) | warm round, median (wall / CPU) | mean (wall / CPU) | "
             "columns rescanned per warm round, median (share of n) | max | peak RSS |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    share = None
    for r in runs:
        if "error" in r:
            lines.append(f"| failed: {r['error'][-300:]!r} | | | | | | |")
            continue
        warm = r["rounds"][1:]
        mw, aw, _ = _stats(warm, "wall")
        mc, ac, _ = _stats(warm, "cpu")
        mr, _, xr = _stats(warm, "rescanned")
        share = mr / r["n"]
        lines.append(f"| {r['n']:,} | {r['rounds'][0]['wall']:.1f} / {r['rounds'][0]['cpu']:.1f} s | "
                     f"{1e3 * mw:.0f} / {1e3 * mc:.0f} ms | {1e3 * aw:.0f} / {1e3 * ac:.0f} ms | {mr:.0f} "
                     f"({100 * mr / r['n']:.1f} %) | {xr:.0f} | {r['rss_mib']:.0f} MiB |")
    lines += ["", f"Synthetic rounds: p = 35 (Adult's rank), {args.syn_rounds} rounds, losses drifting by at most 0.005 "
              "per round (the paper's learning rate at Adult), eps = 0.4, `DualSolver(kernel_threads="
              f"{args.threads})`; every round converged (certified), else the run stops with an error.", ""]
    if b is not None and "error" in b:  # (b is None: --big-n 0, no scan-rate measurement, no projection)
        lines.append(f"Scan rate at n = {args.big_n}: failed: {b['error'][-500:]!r}")
    elif b is not None:
        per_col = b["cpu"] / b["cols"]
        lines.append(f"**n = {b['n']:,}**: scanning {b['cols']} columns took {b['wall']:.1f} s wall, {b['cpu']:.1f} s "
                     f"CPU ({1e3 * per_col:.1f} ms CPU per column; peak RSS {b['rss_mib']:.0f} MiB), so the cold pass over "
                     f"all {b['n']:,} columns needs about {per_col * b['n'] / 3600:.1f} CPU hours on this machine: not "
                     "run.")
        if share is not None:
            lines.append(f"Projection, not a run: were the share of columns rescanned per warm round the one "
                         f"measured at n = {runs[-1]['n']:,} ({100 * share:.1f} %), a warm round at n = {b['n']:,} "
                         f"would rescan about {share * b['n']:,.0f} columns, {share * b['n'] * per_col:.0f} CPU "
                         "seconds of scans, plus the restricted solve (linear in the pairs kept).")
    lines += ["", f"Load average at the start: {load0:.1f}, at the end: {os.getloadavg()[0]:.1f}.  Machine speed "
              f"(`machine_speed` of benchmarks/_report.py) at the start: {speed_text(speed0)}; at the end: "
              f"{speed_text(machine_speed())}."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- report


def _machine() -> str:
    import numpy

    return (f"{os.cpu_count()} cores ({cpu_model()}), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, numpy {numpy.__version__}")


def _locality_cases(args):
    """(label, cost, labels, eps, losses of round k, rounds) for each size of ``--locality-n`` and
    each setting of ``--locality-data`` (the real lists and per-round losses of the paper's fit)."""
    from budro.transport import NeighborCost

    for n in args.locality_n:
        rng = np.random.default_rng(args.seed)
        Z = rng.normal(size=(n, 5)) @ rng.normal(size=(5, 18)) + 0.05 * rng.normal(size=(n, 18))
        cost = NeighborCost(Z, 16)
        labels = rng.integers(0, 2, n)
        base = rng.normal(size=n)

        def losses(k, Z=Z, base=base):
            margin = base + 0.01 * k + 0.5 * np.sin(Z[:, 0] + 0.1 * k)
            return np.column_stack([np.logaddexp(0.0, margin), np.logaddexp(0.0, -margin)])

        yield f"synthetic {n:,}, m = 16", cost, labels, 0.05, losses, args.locality_rounds
    for setting in args.locality_data:
        r = _fit_rounds(setting, ROUNDS[setting])
        if "nb" not in r:
            raise SystemExit(f"locality: {setting}'s fit uses the full problem, not neighbour lists")
        cost = NeighborCost.from_lists(r["nb"], r["nc"])
        L = r["losses"]
        yield (f"{setting} {L.shape[1]:,}, m = {r['nb'].shape[1]} (the paper's fit, every round)", cost, r["labels"],
               float(r["eps"]), lambda k, L=L: L[k], L.shape[0])


def locality_report(args) -> str:
    """The exact sparse dual with and without the renumbering by locality, side by side in one
    process on the same lists and losses: synthetic rows of a 5-dimensional latent structure in
    18 dimensions, 16 neighbours, logistic losses drifting over ``--locality-rounds`` rounds; and
    real settings (``--locality-data``: the lists and every round's losses of the paper's fit)."""
    from unittest import mock

    from budro.solvers import _dual_sparse
    from budro.solvers.dual import DualSolver
    from budro.transport import NeighborCost, TransportProblem

    lines = ["| points | rounds | renumbering (once) | first solve, given / renumbered | per solve, given numbering "
             "(median) | per solve, renumbered (median) | ratio | largest objective difference | same eta |",
             "|---|---|---|---|---|---|---|---|---|"]
    own = NeighborCost.from_lists(np.arange(1000)[:, None], np.zeros((1000, 1)))  # loads the compiled kernel
    DualSolver().solve(TransportProblem(np.ones((1000, 2)), np.zeros(1000, dtype=int), own, 0.05))
    for label, cost, labels, eps, losses, rounds in _locality_cases(args):
        times = {"given": [], "renumbered": []}
        results = {"given": [], "renumbered": []}
        t0 = time.perf_counter()
        _dual_sparse.locality_order(cost.neighbors)
        t_order = time.perf_counter() - t0
        solvers = {"given": DualSolver(), "renumbered": DualSolver()}
        for k in range(rounds):  # interleaved: the same load on both, each warm started as in a fit
            L = losses(k)
            for name in ("given", "renumbered"):
                limit = 2**62 if name == "given" else 0
                eta0 = results[name][-1][1] if results[name] else None
                with mock.patch.object(_dual_sparse, "LOCALITY_MIN_N", limit):
                    t0 = time.perf_counter()
                    r = solvers[name].solve(TransportProblem(L, labels, cost, eps), eta0=eta0)
                    times[name].append(time.perf_counter() - t0)
                results[name].append((r.objective, r.eta))
        # the first round builds the layout (and the renumbering): left out of the medians
        a, b = np.median(times["given"][1:]), np.median(times["renumbered"][1:])
        diff = max(abs(x[0] - y[0]) for x, y in zip(results["given"], results["renumbered"]))
        same_eta = all(abs(x[1] - y[1]) <= 1e-9 * max(1.0, abs(x[1])) for x, y in zip(results["given"],
                                                                                     results["renumbered"]))
        first = f"{1000 * times['given'][0]:.0f} / {1000 * times['renumbered'][0]:.0f} ms"
        lines.append(f"| {label} | {rounds} | {t_order:.2f} s | {first} | {1000 * a:.1f} ms | {1000 * b:.1f} ms | "
                     f"{a / b:.2f} | {diff:.1e} | {'yes' if same_eta else 'NO'} |")
    return ("Exact `dual` on neighbour lists (compiled kernel, one kernel thread) with the points in their given "
            "numbering and renumbered by locality (reverse Cuthill-McKee, forced on or off whatever "
            f"`LOCALITY_MIN_N`, now {_dual_sparse.LOCALITY_MIN_N:,}), interleaved round by round in one process on the same "
            "losses, each warm started from its previous round's eta as in a fit; medians over rounds 2..T.\n\n"
            + "\n".join(lines))


def _write(section: str, body: str, command: str, output: Path) -> None:
    replace_section(output, section, f"## {section}\n\n`{command}`\n\nMachine: {_machine()}; "
                    f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n{body}",
                    new_file="# Transport-solver benchmarks\n\nMade by `benchmarks/solvers.py`.\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_case":
        print(json.dumps(run_case(json.loads(argv[1]))))
        return 0
    if argv and argv[0] == "_full":
        print(json.dumps(_full_part(argv[1], json.loads(argv[2]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["speed", "restriction", "sgd-gap", "rounds", "full", "large", "locality", "all"])
    ap.add_argument("--settings", type=lambda v: v.split(","), default=["german", "compas", "adult"],
                    help="rounds: comma list of german, compas, adult")
    ap.add_argument("--quick", action="store_true", help="speed: German and Adult m=32 only, short timings")
    ap.add_argument("--solvers", type=lambda v: v.split(","), default=None,
                    help="speed: comma list of registered solvers (default: all registered)")
    ap.add_argument("--n", type=int, default=8000, help="restriction: subsample size")
    ap.add_argument("--eps", type=lambda v: [float(x) for x in v.split(",")], default=[0.1, 0.4, 1.0],
                    help="restriction: budgets, comma separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=10, help="sgd-gap: seeds per budget")
    ap.add_argument("--threads", type=int, default=2, help="full: kernel and BLAS threads")
    ap.add_argument("--check-full", type=lambda v: [int(x) for x in v.split(",") if x], default=[178],
                    help="full: rounds checked against the dense dual at Adult's full n (minutes each)")
    ap.add_argument("--check-sub", type=lambda v: [int(x) for x in v.split(",") if x], default=[30, 100, 178],
                    help="full: rounds checked against the dense dual on the 20000-row subsample")
    ap.add_argument("--fit-adversary", choices=sorted(_FITS), default="neighbours",
                    help="full: replay the losses of adult.toml's fit with its 100-neighbour adversary, or of the "
                         "same fit with the exact full adversary (its own section)")
    ap.add_argument("--syn-n", type=_rows(skip=True), default=100_000,
                    help=f"full: rows of the synthetic run (>= {_MIN_ROWS}; 0 skips it)")
    ap.add_argument("--syn-rounds", type=int, default=12, help="full: rounds of the synthetic run")
    ap.add_argument("--big-n", type=_rows(skip=True), default=1_000_000,
                    help=f"full, large: rows of the scan-rate measurement (>= {_MIN_ROWS}; 0 skips it)")
    ap.add_argument("--large-n", type=_rows_list, default=[100_000, 300_000],
                    help=f"large: rows of the synthetic runs, comma separated (each >= {_MIN_ROWS})")
    ap.add_argument("--locality-n", type=lambda v: [int(x) for x in v.split(",")], default=[100_000, 300_000, 1_000_000],
                    help="locality: numbers of points")
    ap.add_argument("--locality-rounds", type=int, default=8, help="locality: rounds per size")
    ap.add_argument("--locality-data", type=lambda v: [x for x in v.split(",") if x], default=[],
                    help="locality: real settings too (e.g. adult: its lists and every round's losses of the paper's fit)")
    ap.add_argument("--output", default=str(REPO / "docs" / "solvers-benchmark.md"))
    args = ap.parse_args(argv)
    command = "python benchmarks/solvers.py " + shlex.join(argv)  # quoted: empty values show
    todo = ["speed", "restriction", "sgd-gap", "rounds"] if args.what == "all" else [args.what]
    titles = {"speed": "Time and memory per solve",
              "restriction": f"Sparse restriction quality (Adult, n = {args.n})",
              "sgd-gap": "dual-sgd gap to the exact dual",
              "rounds": "Rounds of a BuDRO fit",
              "full": "Exact full problem (dual on an EmbeddingCost, warm lists)"
                      + ("" if args.fit_adversary == "neighbours" else ", on the exact-full fit's losses"),
              "large": "Exact full problem at large n (synthetic)",
              "locality": "Neighbour lists renumbered by locality"}
    for what in todo:
        body = {"speed": speed, "restriction": restriction, "sgd-gap": sgd_gap, "rounds": rounds_report,
                "full": full_report, "large": large_report, "locality": locality_report}[what](args)
        _write(titles[what], body, command, Path(args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
