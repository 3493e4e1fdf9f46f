"""End-to-end training benchmark: BuDRO versus plain boosting, per backend, on the paper's settings.

    BUDRO_DATA_HOME=../shared/data python benchmarks/training.py                 # everything (~25 min)
    python benchmarks/training.py --settings adult --backends xgboost --exactness 2
    python benchmarks/training.py --settings none --whole-fit none --scaling 10000,100000,1000000
    python benchmarks/training.py --settings none --whole-fit adult              # the config as a user runs it
    python benchmarks/training.py --settings none --whole-fit none --tree-cost adult

Three measurements, each case in its own child process:

* paper settings (``--settings``): for each setting and backend, plain boosting (the library's own
  multi-round training, same parameters and number of trees) and then BuDRO, side by side, with
  the issue's round counts: time per round of each and their ratio (the headline), BuDRO's
  per-round breakdown (losses = margins + per-label losses, transport solve, tree, the loop's
  bookkeeping, and the work outside the loop: the booster's start with f_0, finish, input
  checks), the first solve (numba's start where it runs the compiled kernel), set-up time (fair metric and
  neighbour graph), whole-fit times and peak resident memory; then both fits again in the same
  process, ``--later-fits`` times (default 3; the pair with the median ratio is reported, with
  the range: what every fit after a process's first costs, numba and the boosters initialised),
  beside the first.  With ``--exactness K`` the full
  (dense) transport problem is solved exactly at K rounds of the sparse run and the objective
  the sparse adversary keeps is reported, so speed is never bought with a silent change of the
  problem;
* whole fits (``--whole-fit``): ``experiments/<setting>.toml`` as ``budro experiment`` runs it
  (its first split, its BuDRO method with every parameter of the config: its neighbours, rounds,
  eps), against the plain baseline with the same booster parameters and trees
  (``GBDTClassifier``), in one process: plain, BuDRO, plain again;
* tree cost (``--tree-cost``): why a BuDRO tree costs more than a plain one: the library's own
  round, a driven round with the empirical weights (the same tree), one with an adversary's
  weights, and one after the caches were evicted (as the solve does), interleaved round by round,
  with leaves per tree.

The issue's targets are checked at the end (met / NOT met), and the thread counts budro chose
are printed.  Writes a markdown report (default docs/performance.md) with the machine, versions
and command.  Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _report import cpu_model, machine_speed, replace_section, speed_text  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]

#: The paper's three settings: data, fair metric, solver, eps and booster parameters are those of
#: the BuDRO method in experiments/<setting>.toml (the paper's Tables 4, 6 and 9, as our results
#: use them), with the issue's round counts; Adult uses the sparse nearest-neighbour adversary.
SETTINGS = {
    "german": {"config": "german.toml", "rounds": 500, "n_neighbors": None},
    "compas": {"config": "compas.toml", "rounds": 200, "n_neighbors": None},
    "adult": {"config": "adult.toml", "rounds": 200, "n_neighbors": 32},
}
#: Configs ``--whole-fit`` knows: the three settings' and Adult with the exact full adversary
#: (issue 14's whole-fit target, ``experiments/adult-exact-full.toml``).
WHOLE_FITS = (*SETTINGS, "adult-exact-full")

#: Each backend's name for its thread count.
THREADS_KEY = {"xgboost": "nthread", "lightgbm": "num_threads", "catboost": "thread_count"}

#: The synthetic scaling runs' booster parameters (per backend spelling).
SYNTHETIC_PARAMS = {
    "xgboost": {"max_depth": 6, "learning_rate": 0.1},
    "lightgbm": {"num_leaves": 63, "learning_rate": 0.1},
    "catboost": {"depth": 6, "learning_rate": 0.1},
}


def _collected() -> float:
    """``time.perf_counter()`` after a full garbage collection.  Every timed fit starts from a
    collected heap: Python runs a full collection of every tracked object (about 130 000 once
    numpy, scipy, scikit-learn and the boosters are imported: 55-60 ms on this machine) when
    enough long-lived objects have accumulated -- in these processes after the first fit's
    imports -- and it landed in whichever fit ran then (53 ms inside German's second LightGBM
    fit of 0.5 s, a tenth of it).  A BuDRO fit itself keeps about 400 objects per 500 rounds, so
    it does not bring one on; the plain fits are timed the same way."""
    gc.collect()
    return time.perf_counter()


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _paper_setting(setting: str, backend: str):
    """(X, y, config, backend parameters, dropped keys) of a paper setting: the training split
    (80 %, seed 0, standardised on it) of the data set and the config's BuDRO method."""
    from budro.compare import backend_params_for
    from budro.config import load_config

    cfg = load_config(REPO / "experiments" / SETTINGS[setting]["config"])
    data = cfg.load_dataset()
    train, _ = data.train_test_split(test_size=0.2, random_state=0)
    params, dropped = backend_params_for(cfg, backend)
    if backend == "lightgbm" and "max_depth" in params and "num_leaves" not in params:
        # LightGBM's default of 31 leaves would cap a depth-14 tree at 31 leaves: let max_depth
        # mean what it means for XGBoost (the paper's trees).
        params["num_leaves"] = min(2 ** int(params["max_depth"]), 131072)
    return train.X, np.asarray(train.y), cfg, params, dropped


def _synthetic(n: int, d: int = 20, seed: int = 0):
    """Tabular-like synthetic data: d features driven by 5 latent factors plus a little noise
    (a low intrinsic dimension, as real tabular data have; exact k-d tree neighbour search is
    practical there, where it is not on isotropic Gaussian noise in 19 dimensions), a binary
    protected attribute f0 and a proxy of it (f1)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    F = rng.normal(size=(n, 5))
    X = F @ (rng.normal(size=(5, d)) / np.sqrt(5)) + 0.02 * rng.normal(size=(n, d))
    X[:, 0] = rng.integers(0, 2, n)  # a binary protected attribute
    X[:, 1] += 0.8 * X[:, 0]  # a proxy for it
    logits = X[:, 1:6] @ np.array([1.0, -0.7, 0.5, 0.3, -0.2]) + 0.5 * X[:, 0]
    y = (rng.random(n) < 1 / (1 + np.exp(-logits))).astype(int)
    return pd.DataFrame(X, columns=[f"f{i}" for i in range(d)]), y, ["f0"]


def _thread_param(backend: str, backend_obj, given: dict) -> Any:
    """The booster's thread count for this fit: the user's, else the one budro chooses."""
    key = THREADS_KEY[backend]
    if key in given:
        return given[key]
    with_threads = getattr(backend_obj, "_with_threads", None)
    if callable(with_threads):
        return with_threads({}).get(key, "library default")
    return f"library default ({backend_obj.params.get(key, 'unset')})"


def _thread_choice() -> dict:
    """What budro sees of this machine's cores, and the environment that steers the thread pools."""
    info: dict[str, Any] = {"os.cpu_count()": os.cpu_count()}
    try:
        from budro import _threads

        info["budro available_cores()"] = _threads.available_cores()
        info["budro default_threads()"] = _threads.default_threads()
    except (ImportError, AttributeError):
        info["budro available_cores()"] = "not in this budro"
    for var in ("BUDRO_NUM_THREADS", "OMP_WAIT_POLICY", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "LOKY_MAX_CPU_COUNT"):
        info[var] = os.environ.get(var, "unset")
    return info


def _with_thread_param(backend: str, params: dict, threads: int | None) -> dict:
    return {**params, THREADS_KEY[backend]: threads} if threads is not None else dict(params)


def run_case(case: dict) -> dict:
    """One setting x backend, in its own process (so peak memory is its own)."""
    from budro import BuDROClassifier

    if case["kind"] == "paper":
        X, y, cfg, params, dropped = _paper_setting(case["setting"], case["backend"])
        rounds, eps = SETTINGS[case["setting"]]["rounds"], cfg.eps
        m = case["n_neighbors"] if case["n_neighbors"] != "config" else SETTINGS[case["setting"]]["n_neighbors"]
        estimator = dict(solver=cfg.solver, solver_params=dict(cfg.solver_params), fair_metric=cfg.fair_metric,
                         fair_metric_params=dict(cfg.fair_metric_params), protected=list(cfg.protected) or None)
    else:
        X, y, protected = _synthetic(case["n"])
        rounds, eps, m, params, dropped = case["rounds"], 0.1, case["n_neighbors"], dict(SYNTHETIC_PARAMS[case["backend"]]), []
        estimator = dict(solver="dual", protected=protected)
    rounds = max(2, int(round(rounds * case["rounds_scale"])))
    backend_params = _with_thread_param(case["backend"], params, case["threads"])
    Xa = np.asarray(X, dtype=np.float64)
    out = {**case, "n": int(Xa.shape[0]), "d": int(Xa.shape[1]),
           "rounds": rounds, "eps": eps, "n_neighbors": m, "backend_params": backend_params, "dropped": dropped,
           "solver": estimator["solver"], "thread_choice": _thread_choice()}
    rss0 = _peak_rss_mib()

    import budro.registry as registry

    plain_backend = registry.create("backend", case["backend"], **backend_params)
    out["booster_threads"] = _thread_param(case["backend"], plain_backend, backend_params)
    t0 = _collected()
    plain_model = plain_backend.fit_native(Xa, y, 2, rounds, random_state=0)
    out["plain_s"] = time.perf_counter() - t0
    out["plain_rss_mib"] = _peak_rss_mib()

    # K evenly spaced rounds ending with the last one (K = 1: the last round).
    k = case["exactness_rounds"]
    keep_rounds = set(np.linspace(-1, rounds - 2, k + 1)[1:].round().astype(int).tolist()) if k else set()
    kept_problems = []
    trainers = []

    caps = []

    def keep(info):
        if not trainers:
            trainers.append(info.trainer)  # for its time_start_ / time_rounds_
            if not caps:  # LightGBM's leaf cap of this fit (budro.backends._lightgbm_leaves), if any
                caps.append(getattr(info.trainer.backend, "_cap", None))
        if info.record.step in keep_rounds:
            kept_problems.append((info.record.step, info.problem.losses.copy(), info.result.objective))

    clf = BuDROClassifier(backend=case["backend"], backend_params=backend_params, eps=eps, n_steps=rounds - 1,
                          random_state=0, n_neighbors=m, callbacks=[keep], **estimator)
    t0 = _collected()
    clf.fit(X, y)
    out["budro_s"] = time.perf_counter() - t0
    out["budro_rss_mib"] = _peak_rss_mib()
    out["rss_before_mib"] = rss0
    out.update(_breakdown(clf, trainers[0] if trainers else None, out["budro_s"], rounds))
    out["plain_round_ms"] = 1000 * out["plain_s"] / rounds
    out["ratio"] = out["budro_round_ms"] / out["plain_round_ms"]
    out["fit_ratio"] = out["budro_s"] / out["plain_s"]
    cap = caps[0] if caps else None
    plain_capped = None
    if cap is not None:
        # BuDRO's LightGBM trees grew under a leaf cap below num_leaves (the same trees, cheaper
        # splits); the library's own training under that cap, timed too, is the plain fit with
        # the same advantage (its trees checked against the plain fit's)
        out["leaf_cap"] = cap.cap
        plain_capped = registry.create("backend", case["backend"], **{**backend_params, "num_leaves": cap.cap})
        t0 = _collected()
        capped_model = plain_capped.fit_native(Xa, y, 2, rounds, random_state=0)
        out["plain_capped_s"] = time.perf_counter() - t0
        out["plain_capped_same_trees"] = _tree_text(capped_model) == _tree_text(plain_model)
        out["capped_ratio"] = out["budro_round_ms"] / (1000 * out["plain_capped_s"] / rounds)
        del capped_model
    del plain_model
    later = int(case.get("later_fits", 0))
    if later > 0 and case["kind"] == "paper":
        # Both fits again in the same process, ``later`` times, alternating: what every fit after
        # the process's first costs (numba, XGBoost and LightGBM initialised, the compiled kernels
        # loaded; a notebook, a service, a cross-validation or an experiment's later splits).  The
        # pair with the median ratio is reported, with the range of all pairs' ratios: a 50 ms
        # plain fit (German) is one scheduler hiccup away from another ratio.
        from sklearn.base import clone

        pairs = []
        for _ in range(later):
            t0 = _collected()
            plain_backend.fit_native(Xa, y, 2, rounds, random_state=0)
            plain2_s = time.perf_counter() - t0
            if plain_capped is not None:
                t0 = _collected()
                plain_capped.fit_native(Xa, y, 2, rounds, random_state=0)
                plain_capped2_s = time.perf_counter() - t0
            trainers.clear()
            clf2 = clone(clf)  # the same parameters, unfitted
            keep_rounds.clear()
            t0 = _collected()
            clf2.fit(X, y)
            budro2_s = time.perf_counter() - t0
            second = _breakdown(clf2, trainers[0] if trainers else None, budro2_s, rounds)
            pair = {"budro_s": budro2_s, "plain_s": plain2_s, **second, "plain_round_ms": 1000 * plain2_s / rounds}
            pair["ratio"] = pair["budro_round_ms"] / pair["plain_round_ms"]
            if plain_capped is not None:
                pair["plain_capped_s"] = plain_capped2_s
                pair["capped_ratio"] = pair["budro_round_ms"] / (1000 * plain_capped2_s / rounds)
            pairs.append(pair)
            del clf2
        out["second"] = {"pairs": pairs}  # summarised over the case's processes (_median_of_processes)
    if kept_problems:
        out["exactness"] = _exactness(clf, Xa, y, eps, kept_problems)
    return out


def _tree_text(backend) -> str:
    """A finished LightGBM backend's trees, as their model text has them."""
    text = backend.to_native_bytes().decode("utf-8")
    return text[text.find("Tree="):text.find("end of trees")]


def _breakdown(clf, trainer, budro_s: float, rounds: int) -> dict:
    """BuDRO's time per round (over its ``rounds`` trees, f_0 included, set-up excluded), split so
    that the parts add up: mean losses, solve and tree per round, the loop's bookkeeping (checks,
    records, callbacks), and the work outside the loop (the booster's start and f_0, finish, the
    estimator's input checks) spread over the rounds.  Medians and the first solve besides."""
    h = clf.history_
    out = {"setup_s": clf.time_setup_, "budro_round_ms": 1000 * (budro_s - clf.time_setup_) / rounds,
           "solver_iterations_median": float(np.median([r.solver_iterations for r in h])) if h else 0.0}
    phases = 0.0
    for phase in ("time_losses", "time_solve", "time_tree"):
        values = [getattr(r, phase) for r in h]
        out[phase + "_ms"] = 1000 * float(np.median(values)) if h else 0.0  # medians (earlier tables)
        out[phase + "_mean_ms"] = 1000 * float(np.sum(values)) / rounds
        phases += float(np.sum(values))
    out["first_solve_ms"] = 1000 * h[0].time_solve if h else float("nan")
    loop = getattr(trainer, "time_rounds_", None)
    if loop is not None:
        out["start_s"] = trainer.time_start_
        out["bookkeeping_ms"] = 1000 * (loop - phases) / rounds
        out["outside_loop_ms"] = 1000 * (budro_s - clf.time_setup_ - loop) / rounds
    else:  # a budro without the loop's timers: everything besides the phases is "other"
        out["bookkeeping_ms"] = float("nan")
        out["outside_loop_ms"] = out["budro_round_ms"] - 1000 * phases / rounds
    return out


def run_whole_fit(case: dict) -> dict:
    """``experiments/<setting>.toml`` as ``budro experiment`` runs it (first split, its BuDRO
    method), against the plain baseline with the same booster and trees, in this one process."""
    from budro.baselines import make_method
    from budro.config import load_config

    cfg = load_config(REPO / "experiments" / f"{case['setting']}.toml")
    exp = cfg.experiment or {}
    dataset = cfg.load_dataset()
    train, _ = dataset.train_test_split(float(exp.get("test_size", 0.2)), random_state=int(exp.get("seed", 0)),
                                        stratify=bool(exp.get("stratify", True)))
    labels = [label for label in cfg.method_labels() if cfg.method_spec(label)[0] == "budro"]
    if not labels:
        return {**case, "error": f"experiments/{case['setting']}.toml has no budro method"}
    _, spec = cfg.method_spec(labels[0])
    backend_params = _with_thread_param(spec["backend"], spec["backend_params"] or {}, case["threads"])
    trees = int(spec["n_steps"]) + 1
    trainers = []
    budro = cfg.make_method(labels[0], backend_params=backend_params,
                            callbacks=[lambda info: trainers.append(info.trainer) if not trainers else None])

    def plain():
        return make_method("gbdt", backend=spec["backend"], backend_params=dict(backend_params), n_rounds=trees,
                           random_state=spec.get("random_state"))

    times = {}
    for name, est in (("plain_1", plain()), ("budro", budro), ("plain_2", plain())):
        t0 = _collected()
        est.fit(train.X, train.y)
        times[name] = time.perf_counter() - t0
    import budro.registry as registry

    plain_s = (times["plain_1"] + times["plain_2"]) / 2
    out = {**case, "method": labels[0], "backend": spec["backend"], "n": int(len(train.y)), "trees": trees,
           "eps": spec.get("eps"), "n_neighbors": spec.get("n_neighbors"), "solver": spec.get("solver"),
           "backend_params": backend_params, "budro_s": times["budro"], "plain_1_s": times["plain_1"],
           "plain_2_s": times["plain_2"], "plain_s": plain_s, "fit_ratio": times["budro"] / plain_s,
           "booster_threads": _thread_param(spec["backend"], registry.create("backend", spec["backend"], **backend_params),
                                            backend_params),
           "thread_choice": _thread_choice(), "peak_rss_mib": _peak_rss_mib()}
    out.update(_breakdown(budro, trainers[0] if trainers else None, times["budro"], trees))
    out["plain_round_ms"] = 1000 * plain_s / trees
    return out


def run_tree_cost(case: dict) -> dict:
    """Why a BuDRO tree costs more than a plain one, on one paper setting and backend: four
    variants grown round by round, interleaved (so the machine's load falls on all alike):

    * ``plain``: the library's own round on the labels (what ``fit_native`` repeats);
    * ``empirical``: budro's driven round (``step``) with the empirical weights (the same trees:
      the difference is the per-round API work: weights, labels, objective);
    * ``adversary``: ``step`` with the weights of a real BuDRO run's rounds (their trees);
    * ``adversary, caches evicted``: the same after reading 32 MB, as the transport solve does
      between two trees.

    One thread (CPU time of the calling thread) unless ``--threads`` says otherwise."""
    import budro.registry as registry
    from budro import BuDROClassifier

    X, y, cfg, params, _ = _paper_setting(case["setting"], case["backend"])
    threads = case["threads"] or 1
    params = {**params, THREADS_KEY[case["backend"]]: threads}
    Xa, y = np.asarray(X, dtype=np.float64), np.asarray(y)
    n, R = len(y), case["rounds"]
    estimator = dict(solver=cfg.solver, solver_params=dict(cfg.solver_params), fair_metric=cfg.fair_metric,
                     fair_metric_params=dict(cfg.fair_metric_params), protected=list(cfg.protected) or None)
    weights = []
    BuDROClassifier(backend=case["backend"], backend_params=params, eps=cfg.eps, n_steps=R, random_state=0,
                    n_neighbors=SETTINGS[case["setting"]]["n_neighbors"],
                    callbacks=[lambda info: weights.append(np.array(info.result.weights))], **estimator).fit(X, y)
    empirical = np.zeros((n, 2))
    empirical[np.arange(n), y] = 1.0 / n
    evict = np.random.default_rng(0).random(4_000_000)
    clock = time.thread_time if threads == 1 else time.perf_counter

    def driven():
        b = registry.create("backend", case["backend"], **params)
        b.start(Xa, y, 2, random_state=0)
        return b

    plain_round, plain_leaves = _native_rounds(case["backend"], driven(), Xa, y)
    variants = {"plain": None, "empirical": driven(), "adversary": driven(), "adversary, caches evicted": driven()}
    times = {k: [] for k in variants}
    for r in range(R):
        for name, b in variants.items():
            if "evicted" in name:
                evict.sum()
            t0 = clock()
            if b is None:
                plain_round()
            else:
                b.step(empirical if name == "empirical" else weights[r % len(weights)])
            times[name].append(clock() - t0)
    rows = []
    for name, b in variants.items():
        leaves = plain_leaves() if b is None else _leaves(case["backend"], b.model)
        ms = 1000 * float(np.median(times[name]))
        rows.append({"variant": name, "ms": ms, "mean_ms": 1000 * float(np.mean(times[name])), "leaves": leaves,
                     "us_per_leaf": 1000 * ms / leaves if leaves else float("nan")})
    return {**case, "n": n, "threads": threads, "clock": clock.__name__, "rows": rows}


def _leaves(backend: str, model) -> float:
    """Mean leaves per tree after f_0."""
    if backend == "xgboost":
        return float(np.mean([t.count("leaf=") for t in model.get_dump()[1:]]))
    if backend == "lightgbm":
        return float(np.mean([t["num_leaves"] for t in model.dump_model()["tree_info"][1:]]))
    return float("nan")


def _native_rounds(backend: str, template, X, y):
    """(one native round, mean leaves) of the library's own training on the labels, with the
    backend's parameters and weight scale (the rounds ``fit_native`` runs)."""
    from budro.backends.base import native_sample_weights

    weight = native_sample_weights(None, len(y), template.weight_scale)
    if backend == "xgboost":
        from budro.backends import xgboost as bx

        xgb = bx._xgb()
        params = template._train_params(2, 0)
        dtrain = bx._dmatrix(xgb, X, (), params, label=y, weight=weight)
        booster = xgb.Booster(params, [dtrain])
        booster.update(dtrain, 0)
        state = {"i": 1}

        def one():
            booster.update(dtrain, state["i"])
            state["i"] += 1

        return one, lambda: _leaves(backend, booster)
    if backend == "lightgbm":
        from budro.backends import lightgbm as bl

        lgb = bl._lgb()
        params = template._train_params(2, 0, native=True)
        booster = lgb.Booster(params=params, train_set=bl._dataset(lgb, X, (), params, label=y, weight=weight))
        booster.update()
        return booster.update, lambda: _leaves(backend, booster)
    raise SystemExit(f"--tree-cost: backend {backend!r} is not supported (xgboost, lightgbm)")


def _exactness(clf, X, y, eps, kept):
    """Objective of the sparse adversary / full problem's optimum, at a few rounds (exact, dense dual in blocks)."""
    from budro import TransportProblem
    from budro.registry import create

    cost = clf.fair_metric_.cost(X, cache_bytes=0)
    solver = create("solver", "dual", max_dense_n=None)  # the full problem on purpose, in column blocks
    rows = []
    for step, losses, sparse_obj in kept:
        t0 = time.perf_counter()
        full = solver.solve(TransportProblem(losses, y, cost, eps))
        plain = float(np.mean(losses[np.arange(len(y)), y]))
        gain_full = full.objective - plain
        rows.append({"step": int(step), "sparse_objective": sparse_obj, "full_objective": full.objective,
                     "plain_loss": plain, "objective_kept": sparse_obj / full.objective,
                     "adversary_gain_kept": (sparse_obj - plain) / gain_full if gain_full > 0 else 1.0,
                     "full_solve_s": time.perf_counter() - t0})
    return rows


def _kernel() -> str:
    from budro.solvers import _sparse_kernels

    return "compiled (numba)" if _sparse_kernels.available() else "numpy (numba not installed)"


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("budro", "numpy", "scipy", "scikit-learn", "xgboost", "lightgbm", "catboost", "numba"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def _header(command: str, speed: tuple[dict, dict]) -> list[str]:
    """The reports' common header; ``speed``: the machine's speed before and after the runs
    (:func:`_report.machine_speed`)."""
    import numpy

    return [f"Command: `{command}`", "",
            f"Machine: {platform.machine()}, {os.cpu_count()} CPUs ({cpu_model()}), {platform.platform()}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average before the run "
            f"{os.getloadavg()[0]:.2f}", "",
            f"Machine speed (`machine_speed` of benchmarks/_report.py, a reading of this shared machine at the "
            f"moment) before the runs: {speed_text(speed[0])}; after: {speed_text(speed[1])}.", "",
            "Versions: " + ", ".join(f"{k} {v}" for k, v in _versions().items()) + f" (numpy {numpy.__version__})", "",
            f"Solver kernel for sparse costs: {_kernel()}.", ""]


def _threads_line(results: list[dict]) -> list[str]:
    for r in results:
        if "thread_choice" in r:
            choice = ", ".join(f"{k} = {v}" for k, v in r["thread_choice"].items())
            return [f"Threads (in the child processes): {choice}.", ""]
    return []


def _fmt(value, spec: str = ".2f") -> str:
    try:
        return "n/a" if value is None or value != value else format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def _report(results: list[dict], command: str, speed: tuple[dict, dict]) -> str:
    lines = _header(command, speed) + _threads_line(results) + [
        "Plain boosting (the library's own multi-round training, same parameters and trees) and BuDRO ran side "
        "by side in one process; peak RSS is the process's high-water mark after BuDRO (which ran "
        "second, so it includes the plain run's peak).  Each paper setting ran in `--processes` fresh processes "
        "(default 3): the row is the process with the median ratio, the range over all of them in brackets.", "",
        "Columns: plain / BuDRO ms/round = fit time / trees (BuDRO's without the set-up: fair metric, budget "
        "check and neighbour graph).  BuDRO ms/round = losses + solve + tree + loop + outside, each per tree: "
        "the means of the three phases (margins and per-label losses; transport solve, the first included; "
        "one tree on D0), the loop's bookkeeping (checks, round records, callbacks), and the work outside the "
        "loop (the booster's training structures and f_0, finish, input checks).  solve med. = median solve; "
        "1st solve = the first round's (with numba's start where the compiled kernel runs: the sparse lists; "
        "the complete lists of German and COMPAS are pruned in numpy until numba has started).  fit ratio = whole BuDRO fit (set-up "
        "included) / plain fit.", "",
        "| setting | backend | n x d | trees | eps | m | booster threads | plain ms/round | BuDRO ms/round | ratio | "
        "losses | solve | tree | loop | outside | solve med. | 1st solve ms | set-up s | plain fit s | BuDRO fit s | "
        "fit ratio | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        name = r.get("setting") or f"synthetic n={r.get('n')}"
        if "error" in r:
            lines.append(f"| {name} | {r['backend']} | error: {r['error']} |")
            continue
        lines.append(
            f"| {name} | {r['backend']} | {r['n']} x {r['d']} | {r['rounds']} | {r['eps']:g} | {r['n_neighbors'] or 'full'} | "
            f"{r.get('booster_threads')} | {r['plain_round_ms']:.2f} | {r['budro_round_ms']:.2f} | **{r['ratio']:.2f}**{_range_cell(r)} | "
            f"{r['time_losses_mean_ms']:.2f} | {r['time_solve_mean_ms']:.2f} | {r['time_tree_mean_ms']:.2f} | "
            f"{_fmt(r['bookkeeping_ms'])} | {r['outside_loop_ms']:.2f} | {r['time_solve_ms']:.2f} | "
            f"{r['first_solve_ms']:.0f} | {r['setup_s']:.2f} | {r['plain_s']:.2f} | {r['budro_s']:.2f} | "
            f"{r['fit_ratio']:.1f} | {r['budro_rss_mib']:.0f} |")
    seconds = [r for r in results if "second" in r]
    if seconds:
        lines += ["", "The same two fits again in the same process, plain then BuDRO, the pair repeated (`--later-fits`, "
                  "default 3): every fit after a process's first (numba and the boosters initialised, the compiled "
                  "kernels loaded).  The pair with the median ratio is shown, and the range of all pairs' ratios:", "",
                  "| setting | backend | trees | pairs | plain ms/round | BuDRO ms/round | ratio | ratio range | losses | "
                  "solve | tree | loop | outside | solve med. | 1st solve ms | plain fit s | BuDRO fit s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in seconds:
            q = r["second"]
            lo, hi = q["ratio_range"]
            lines.append(
                f"| {r.get('setting')} | {r['backend']} | {r['rounds']} | {q['fits']} | {q['plain_round_ms']:.2f} | "
                f"{q['budro_round_ms']:.2f} | **{q['ratio']:.2f}** | {lo:.2f}-{hi:.2f} | {q['time_losses_mean_ms']:.2f} | {q['time_solve_mean_ms']:.2f} | "
                f"{q['time_tree_mean_ms']:.2f} | {_fmt(q['bookkeeping_ms'])} | {q['outside_loop_ms']:.2f} | "
                f"{q['time_solve_ms']:.2f} | {q['first_solve_ms']:.1f} | {q['plain_s']:.2f} | {q['budro_s']:.2f} |")
    lines += ["", "Parameters (the BuDRO method of experiments/<setting>.toml, translated by name as `budro compare` "
              "does; LightGBM's num_leaves = 2^max_depth):", ""]
    for r in results:
        if "error" not in r:
            dropped = f" (dropped: {', '.join(r['dropped'])})" if r.get("dropped") else ""
            lines.append(f"- {r.get('setting') or 'synthetic n=%d' % r['n']} / {r['backend']}: "
                         f"`{json.dumps(r['backend_params'])}`{dropped}; solver {r['solver']}")
    ex = [(r, e) for r in results for e in r.get("exactness", [])]
    if ex:
        lines += ["", "Exactness of the sparse adversary (full problem solved exactly by the dense dual in column blocks):", "",
                  "| setting | backend | m | round | sparse objective | full optimum | objective kept | adversary gain kept |",
                  "|---|---|---|---|---|---|---|---|"]
        for r, e in ex:
            lines.append(f"| {r.get('setting') or r['n']} | {r['backend']} | {r['n_neighbors']} | {e['step']} | "
                         f"{e['sparse_objective']:.6f} | {e['full_objective']:.6f} | {e['objective_kept']:.4%} | "
                         f"{e['adversary_gain_kept']:.2%} |")
    return "\n".join(lines) + "\n"


def _whole_fit_report(results: list[dict], command: str, speed: tuple[dict, dict]) -> str:
    lines = _header(command, speed) + _threads_line(results) + [
        "`experiments/<config>.toml` as `budro experiment` runs it: its first split (test_size, seed, "
        "stratify of [experiment]), its BuDRO method with every parameter of the config (neighbours, "
        "rounds, eps, booster), and the plain baseline with the same booster parameters and trees "
        "(`GBDTClassifier`, weight scale included), in one process: plain, BuDRO, plain again; ratio = "
        "BuDRO fit / mean of the two plain fits.  The BuDRO breakdown is per tree, as in the paper-settings "
        "table.  Each config ran in `--processes` fresh processes (default 3): the row is the one with the median "
        "ratio, the range over all of them in brackets.", "",
        "| config | method | backend | n | trees | eps | m | booster threads | plain fit s (1st, 2nd) | BuDRO fit s | "
        "ratio | set-up s | losses | solve | tree | loop | outside | 1st solve ms | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['setting']} | error: {r['error']} |")
            continue
        lines.append(
            f"| {r['setting']} | {r['method']} | {r['backend']} | {r['n']} | {r['trees']} | {_fmt(r['eps'], 'g')} | "
            f"{r['n_neighbors'] or 'full'} | {r['booster_threads']} | {r['plain_1_s']:.2f}, {r['plain_2_s']:.2f} | "
            f"{r['budro_s']:.2f} | **{r['fit_ratio']:.1f}**{_range_cell(r, '.1f')} | {r['setup_s']:.2f} | {r['time_losses_mean_ms']:.2f} | "
            f"{r['time_solve_mean_ms']:.2f} | {r['time_tree_mean_ms']:.2f} | {_fmt(r['bookkeeping_ms'])} | "
            f"{r['outside_loop_ms']:.2f} | {r['first_solve_ms']:.0f} | {r['peak_rss_mib']:.0f} |")
    lines += ["", "Booster parameters:", ""]
    for r in results:
        if "error" not in r:
            lines.append(f"- {r['setting']}: `{json.dumps(r['backend_params'])}`; solver {r['solver']}")
    return "\n".join(lines) + "\n"


def _tree_cost_report(results: list[dict], command: str, speed: tuple[dict, dict]) -> str:
    lines = _header(command, speed) + [
        "Four ways of growing trees, round by round and interleaved (so the machine's load falls on all "
        "alike): plain = the library's own round on the labels; empirical = budro's `step` with the empirical "
        "weights (the same trees: what differs is the per-round API work); adversary = `step` with the weights "
        "of a BuDRO run's rounds; evicted = the same after reading 32 MB, as the transport solve does between "
        "two trees.  Median time per tree (clock: CPU time of the thread with one booster thread), mean "
        "leaves per tree (after f_0).", "",
        "| setting | backend | n | threads | variant | ms per tree | mean ms | leaves per tree | us per leaf |",
        "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['setting']} | {r['backend']} | error: {r['error']} |")
            continue
        for row in r["rows"]:
            lines.append(f"| {r['setting']} | {r['backend']} | {r['n']} | {r['threads']} ({r['clock']}) | {row['variant']} | "
                         f"{row['ms']:.2f} | {row['mean_ms']:.2f} | {row['leaves']:.0f} | {row['us_per_leaf']:.2f} |")
    return "\n".join(lines) + "\n"


def _second_fit(r: dict, limit: float, full: bool) -> str:
    """The verdict on the per-round ratio of the second fit in the same process, if measured."""
    q = r.get("second")
    if not q:
        return ""
    ok = "met" if q["ratio"] <= limit else "NOT met"
    n, (lo, hi) = q["fits"], q["ratio_range"]  # (every summary has them: _median_of_processes)
    spread = f"median of {n} pairs, range {lo:.2f}-{hi:.2f}; " if n > 1 else ""
    return (f"; later fits in the same process {q['ratio']:.2f} ({ok}{'' if full else ' (not a full run)'}; "
            f"{spread}plain {q['plain_round_ms']:.2f}, BuDRO {q['budro_round_ms']:.2f} ms per round)")


def _capped_note(r: dict) -> str:
    """Where BuDRO's LightGBM trees grew under a leaf cap: the ratio to the library's own training
    under the same cap (not a target: the plain fit with the same advantage)."""
    if "capped_ratio" not in r:
        return ""
    same = "the same trees as the plain fit's" if r.get("plain_capped_same_trees") else "NOT the plain fit's trees"
    q = r.get("second") or {}
    later = ""
    if "capped_ratio_median" in q:
        lo, hi = q["capped_ratio_range"]
        later = f", later fits {q['capped_ratio_median']:.2f} (range {lo:.2f}-{hi:.2f})"
    return (f". BuDRO grew its trees under a leaf cap of {r['leaf_cap']} (num_leaves {r['backend_params'].get('num_leaves')}; "
            f"the same trees, budro.backends._lightgbm_leaves); against plain {r['backend']} trained with num_leaves = "
            f"{r['leaf_cap']} ({same}; {1000 * r['plain_capped_s'] / r['rounds']:.2f} ms per round) the ratio is "
            f"{r['capped_ratio']:.2f}{later}")


#: The issue's targets (issue 13): (what, which results, test, limit).
def _targets(paper: list[dict], whole: list[dict]) -> list[str]:
    lines = []

    def verdict(ok: bool, full: bool = True) -> str:
        return ("met" if ok else "NOT met") if full else ("met" if ok else "NOT met") + " (not a full run)"

    for r in paper:  # German and COMPAS at the paper's settings, exact on the full problem
        if r.get("setting") not in ("german", "compas") or "error" in r or r.get("kind") != "paper":
            continue
        full = r["rounds_scale"] == 1.0
        lines.append(f"- {dict(german='German', compas='COMPAS')[r['setting']]}, {r['backend']}: whole fit at the paper's settings {r['budro_s']:.2f} s "
                     f"(target <= 1 s: {verdict(r['budro_s'] <= 1.0, full)}); BuDRO / plain time per round, "
                     f"first fit of a fresh process {r['ratio']:.1f}{_spread(r, '.1f')} (target <= 10: {verdict(r['ratio'] <= 10, full)}; "
                     f"the first solve, {r['first_solve_ms']:.0f} ms (numba's start included where it runs), "
                     f"is {r['first_solve_ms'] / r['rounds']:.2f} ms of the {r['budro_round_ms']:.2f} ms per round)"
                     + _second_fit(r, 10.0, full))
    for r in paper:
        if r.get("kind") == "synthetic" and "error" not in r and r.get("n", 0) >= 1_000_000:
            lines.append(f"- {r['n']:,} x {r['d']} synthetic, {r['rounds']} rounds: whole fit {r['budro_s']:.1f} s "
                         f"(target <= 60 s: {verdict(r['budro_s'] <= 60)}), of which set-up {r['setup_s']:.1f} s; peak RSS "
                         f"{r['budro_rss_mib']:.0f} MiB (target <= 4096: {verdict(r['budro_rss_mib'] <= 4096)})")
    for r in paper:
        if r.get("setting") != "adult" or "error" in r:
            continue
        limit = {"xgboost": 3.0, "lightgbm": 1.5}.get(r["backend"])
        full = r["rounds_scale"] == 1.0
        if limit is not None:
            lines.append(f"- Adult, {r['backend']}: BuDRO / plain time per round, first fit of a fresh process "
                         f"{r['ratio']:.2f}{_spread(r)} (target <= {limit:g}: {verdict(r['ratio'] <= limit, full)})"
                         + _second_fit(r, limit, full) + _capped_note(r))
        lines.append(f"- Adult, {r['backend']}: end to end {r['budro_s']:.1f} s (earlier target <= 30 s: "
                     f"{verdict(r['budro_s'] <= 30, full)}); peak RSS {r['budro_rss_mib']:.0f} MiB (earlier target "
                     f"<= 2048: {verdict(r['budro_rss_mib'] <= 2048, full)})")
    for r in whole:
        if "error" in r:
            continue
        if r["setting"] == "adult":
            lines.append(f"- experiments/adult.toml whole fit: BuDRO {r['budro_s']:.1f} s = {r['fit_ratio']:.1f} x the plain "
                         f"{r['backend']} fit with the same trees ({r['plain_s']:.2f} s){_spread(r, '.1f')} (target <= 4 x: "
                         f"{verdict(r['fit_ratio'] <= 4)})")
        elif r["setting"] == "adult-exact-full":
            lines.append(f"- experiments/adult-exact-full.toml whole fit (the exact full adversary, issue 14): BuDRO "
                         f"{r['budro_s']:.1f} s ({r['trees']} trees; the solves {r['time_solve_mean_ms'] * r['trees'] / 1000:.1f} s, "
                         f"the first {r['first_solve_ms'] / 1000:.1f} s) (target <= 90 s: {verdict(r['budro_s'] <= 90.0)})")
        elif r["setting"] in ("german", "compas"):
            lines.append(f"- experiments/{r['setting']}.toml whole fit: BuDRO {r['budro_s']:.2f} s ({r['trees']} trees; plain "
                         f"{r['plain_s']:.2f} s) (target <= 1 s: {verdict(r['budro_s'] <= 1.0)})")
    return lines


def _write(section: str, body: str, output: Path) -> None:
    """Put the report in ``output`` between the section's markers (replaced in place, so the
    prose around it stays; appended the first time)."""
    replace_section(output, section, f"### {section}\n\n{body}",
                    new_file="# Performance\n\nMade by `benchmarks/training.py`.\n")


HEADLINE = ("<!-- performance-headline -->", "<!-- /performance-headline -->")


def _headline(paper: list[dict], wholes: list[dict], command: str) -> str | None:
    """README's performance section, from a full run's Adult rows (None without them)."""
    adult = {r["backend"]: r for r in paper if r.get("setting") == "adult" and "error" not in r
             and r["rounds_scale"] == 1.0}
    if "xgboost" not in adult:
        return None
    backends = [b for b in ("xgboost", "lightgbm") if b in adult]
    names = {"xgboost": "XGBoost", "lightgbm": "LightGBM"}
    paper_note = {"ratio": " (paper: 36x)", "fit": " (paper: 1456 s on 4 CPUs + GPU)", "rss": " (paper: dense n x n matrices)"}

    def cell(b: str, what: str) -> str:
        r, note = adult[b], paper_note[what] if b == "xgboost" else ""
        if what == "ratio":
            capped = (f"; {r['capped_ratio']:.2f}x against plain {names[b]} with num_leaves = {r['leaf_cap']}, the leaf "
                      "cap budro grows the same trees under" if "capped_ratio" in r else "")
            return f"{r['ratio']:.2f}x: {r['budro_round_ms']:.1f} vs {r['plain_round_ms']:.1f} ms{note}{capped}"  # (1.54, not 1.5: the targets' scale)
        if what == "fit":
            return f"{r['budro_s']:.1f} s{note}"
        return f"{r['budro_rss_mib']:.0f} MiB{note}"

    r0 = adult["xgboost"]
    lines = [HEADLINE[0], "## Performance", "",
             f"On Adult ({r0['n']} x {r0['d']}, the paper's configuration: {r0['rounds']} depth-14 trees, eps "
             f"{r0['eps']:g}, the exact `{r0['solver']}` solver on a {r0['n_neighbors']}-nearest-neighbour adversary), "
             f"on a {os.cpu_count()}-core machine ({cpu_model()}, {time.strftime('%Y-%m-%d', time.gmtime())}), with "
             "`pip install -e \".[fast]\"` (the compiled solver kernel)"
             + (f"; the figures of the process with the median ratio among {r0['processes']} fresh ones" if r0.get("processes", 1) > 1 else "")
             + ":", "",
             "| | " + " | ".join(names[b] for b in backends) + " |", "|---|" + "---|" * len(backends),
             "| BuDRO / plain boosting, time per round | " + " | ".join(cell(b, "ratio") for b in backends) + " |",
             f"| whole fit: fair metric, neighbour graph, {r0['rounds']} rounds | " + " | ".join(cell(b, "fit") for b in backends) + " |",
             "| peak memory | " + " | ".join(cell(b, "rss") for b in backends) + " |", ""]
    fits = [r for r in wholes if "error" not in r]
    if fits:
        lines += ["The paper's configs as `budro experiment` runs them (one fit, set-up included; the plain fit "
                  "has the same booster and trees): " + "; ".join(
                      f"{r['setting']} {r['budro_s']:.1f} s ({r['fit_ratio']:.1f}x plain)" for r in fits) + ".", ""]
    lines += ["```bash", f"BUDRO_DATA_HOME=../shared/data {command}", "```", "",
              "[docs/performance.md](docs/performance.md) has the per-round breakdown, German, COMPAS, a million",
              "rows, how much of the full adversary the 32-neighbour restriction keeps, and what is still slow.",
              HEADLINE[1]]
    return "\n".join(lines)


def _write_headline(text: str, readme: Path) -> bool:
    old = readme.read_text() if readme.exists() else ""
    start, end = old.find(HEADLINE[0]), old.find(HEADLINE[1])
    if start < 0 or end < start:
        return False
    readme.write_text(old[:start] + text + old[end + len(HEADLINE[1]):])
    return True


def _median_of_processes(runs: list[dict]) -> dict:
    """One case run in several fresh processes: the process whose ratio (per round for the paper
    settings, whole fit for the experiments) is the median, with the range over the processes;
    the later fits of every process pooled, the pair with the median ratio, with their range."""
    ok = [r for r in runs if "error" not in r]
    if not ok or ok[0]["kind"] not in ("paper", "whole"):  # (the other kinds run once)
        return runs[0]
    key = "ratio" if ok[0]["kind"] == "paper" else "fit_ratio"
    ordered = sorted(ok, key=lambda r: r[key])
    out = dict(ordered[(len(ordered) - 1) // 2])
    out["processes"] = len(ok)
    out["process_errors"] = [r["error"] for r in runs if "error" in r]  # reported, not hidden
    out["process_ratios"] = [r[key] for r in ok]
    out["process_range"] = (ordered[0][key], ordered[-1][key])
    pairs = [q for r in ok for q in r.get("second", {}).get("pairs", [])]
    out.pop("second", None)
    if pairs:
        by_ratio = sorted(pairs, key=lambda q: q["ratio"])
        out["second"] = {**by_ratio[(len(by_ratio) - 1) // 2], "fits": len(pairs), "ratios": [q["ratio"] for q in pairs],
                         "ratio_range": (by_ratio[0]["ratio"], by_ratio[-1]["ratio"])}
        capped = sorted(q["capped_ratio"] for q in pairs if "capped_ratio" in q)
        if capped:
            out["second"]["capped_ratio_median"] = capped[(len(capped) - 1) // 2]
            out["second"]["capped_ratio_range"] = (capped[0], capped[-1])
    return out


def _spread(r: dict, fmt: str = ".2f") -> str:
    """`` (median of N processes, range a-b)`` for a case run in several processes, else empty."""
    errors = r.get("process_errors") or []
    failed = f"; {len(errors)} more failed: {errors[0]}" if errors else ""
    if r.get("processes", 1) < 2:
        return f" ({failed[2:]})" if failed else ""
    lo, hi = r["process_range"]
    return f" (median of {r['processes']} processes, range {lo:{fmt}}-{hi:{fmt}}{failed})"


def _range_cell(r: dict, fmt: str = ".2f") -> str:
    """A table cell's `` (a-b)``: the range over the processes, where there were several."""
    failed = f", {len(r['process_errors'])} failed" if r.get("process_errors") else ""
    if r.get("processes", 1) < 2:
        return f" ({failed[2:]})" if failed else ""
    lo, hi = r["process_range"]
    return f" ({lo:{fmt}}-{hi:{fmt}}{failed})"


def _run_child(case: dict) -> dict:
    """Run one case in a fresh interpreter (its own peak memory; not a daemonic pool worker, where
    scikit-learn's neighbour search would be limited to one job)."""
    env = dict(os.environ)
    if case.get("threads"):
        # Every library in the child gets the same thread count: the booster (its parameter), the
        # compiled solver kernel (numba), the neighbour search (joblib) and budro's own pools.
        threads = str(case["threads"])
        env.update(NUMBA_NUM_THREADS=threads, LOKY_MAX_CPU_COUNT=threads, BUDRO_NUM_THREADS=threads)
    proc = subprocess.run([sys.executable, __file__, "_case", json.dumps(case)], capture_output=True, text=True, env=env)
    if proc.returncode == 0:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return {**case, "error": (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]}


CASE_RUNNERS = {"paper": "run_case", "synthetic": "run_case", "whole": "run_whole_fit", "tree": "run_tree_cost"}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_case":
        case = json.loads(argv[1])
        print(json.dumps(globals()[CASE_RUNNERS[case["kind"]]](case), default=str))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", default="german,compas,adult", help="comma list of german,compas,adult, or 'none'")
    ap.add_argument("--backends", default="xgboost,lightgbm", help="comma list of registered backends")
    ap.add_argument("--whole-fit", default="german,compas,adult,adult-exact-full",
                    help="configs experiments/<name>.toml fitted as a user runs them, BuDRO vs plain; 'none' to skip")
    ap.add_argument("--tree-cost", default="", help="settings on which to compare plain and BuDRO trees (e.g. adult)")
    ap.add_argument("--tree-rounds", type=int, default=40, help="rounds per variant of --tree-cost")
    ap.add_argument("--scaling", default="", help="synthetic sizes, e.g. 10000,100000,1000000 (100 rounds each, m=16)")
    ap.add_argument("--scaling-rounds", type=int, default=100)
    ap.add_argument("--rounds-scale", type=float, default=1.0, help="multiply every setting's rounds (quick runs)")
    ap.add_argument("--threads", default="auto",
                    help="'auto' (budro chooses: budro._threads) or a count given to every library")
    ap.add_argument("--exactness", type=int, default=0,
                    help="rounds at which to solve the full problem (sparse settings, first backend only; "
                         "about 100 s per round at Adult)")
    ap.add_argument("--neighbors", default="config",
                    help="n_neighbors of the sparse settings (Adult): an integer, or 'config' for SETTINGS' value")
    ap.add_argument("--processes", type=int, default=3,
                    help="fresh processes per paper setting and experiment config; the one with the median ratio is "
                         "reported, with the range (default 3)")
    ap.add_argument("--later-fits", type=int, default=3,
                    help="paper settings: pairs of fits (plain, BuDRO) after the first in the same process; the pair "
                         "with the median ratio is reported with the range (0: none; default 3)")
    ap.add_argument("--second-fit", action=argparse.BooleanOptionalAction, default=True,
                    help="paper settings: fit plain and BuDRO a second time in the same process and report that "
                         "too (every fit after a process's first; default on)")
    ap.add_argument("--output", default=str(REPO / "docs" / "performance.md"))
    ap.add_argument("--json", help="also write raw results here")
    ap.add_argument("--readme", default="auto",
                    help="README whose performance headline a full Adult run rewrites: a path, 'none', or 'auto' "
                         "(the repository's README.md when --output is the default docs/performance.md)")
    args = ap.parse_args(argv)
    if args.neighbors != "config" and not (args.neighbors.isdigit() and int(args.neighbors) >= 1):
        ap.error(f"--neighbors must be an integer >= 1 or 'config', got {args.neighbors!r}")
    if args.processes < 1:
        ap.error(f"--processes must be an integer >= 1, got {args.processes}")
    if args.later_fits < 0:
        ap.error(f"--later-fits must be an integer >= 0, got {args.later_fits}")
    if args.threads != "auto" and not (args.threads.isdigit() and int(args.threads) >= 1):
        ap.error(f"--threads must be 'auto' or an integer >= 1, got {args.threads!r}")
    threads = None if args.threads == "auto" else int(args.threads)

    def names(value: str, known, option: str) -> list[str]:
        out = [] if value in ("none", "") else [s for s in value.split(",") if s]
        for s in out:
            if s not in known:
                ap.error(f"{option}: unknown setting {s!r}; choose from {', '.join(known)}")
        return out

    settings = names(args.settings, SETTINGS, "--settings")
    whole = names(args.whole_fit, WHOLE_FITS, "--whole-fit")
    tree = names(args.tree_cost, SETTINGS, "--tree-cost")
    backends = [b for b in args.backends.split(",") if b]
    cases = []
    for s in settings:
        for b in backends:
            cases.append({"kind": "paper", "setting": s, "backend": b, "threads": threads,
                          "rounds_scale": args.rounds_scale, "later_fits": args.later_fits if args.second_fit else 0,
                          "n_neighbors": (args.neighbors if args.neighbors == "config" else int(args.neighbors))
                          if SETTINGS[s]["n_neighbors"] else None,
                          "exactness_rounds": args.exactness if SETTINGS[s]["n_neighbors"] and b == backends[0] else 0})
    for n in [int(float(v)) for v in args.scaling.split(",") if v]:
        cases.append({"kind": "synthetic", "setting": None, "n": n, "backend": backends[0], "threads": threads,
                      "rounds": args.scaling_rounds, "rounds_scale": 1.0, "n_neighbors": 16, "exactness_rounds": 0})
    cases += [{"kind": "whole", "setting": s, "threads": threads} for s in whole]
    cases += [{"kind": "tree", "setting": s, "backend": b, "threads": threads, "rounds": args.tree_rounds}
              for s in tree for b in backends if b in ("xgboost", "lightgbm")]
    if not cases:
        ap.error("nothing to run: give --settings, --whole-fit, --tree-cost or --scaling")

    results = []
    speed_before = machine_speed()
    for case in cases:
        label = case.get("setting") or f"synthetic n={case['n']}"
        print(f"running {case['kind']} {label} / {case.get('backend', 'config')} ...", file=sys.stderr, flush=True)
        repeats = args.processes if case["kind"] in ("paper", "whole") else 1
        r = _median_of_processes([_run_child(case) for _ in range(repeats)])
        results.append(r)
        print(json.dumps({k: v for k, v in r.items() if k not in ("exactness", "rows", "thread_choice", "second")}, default=str),
              file=sys.stderr, flush=True)
    speed = (speed_before, machine_speed())
    command = ("python benchmarks/training.py " + shlex.join(argv)).strip()  # quoted: empty values show
    paper = [r for r in results if r["kind"] in ("paper", "synthetic")]
    wholes = [r for r in results if r["kind"] == "whole"]
    trees = [r for r in results if r["kind"] == "tree"]
    sections = []
    if paper:
        kinds = {r["kind"] for r in paper}
        name = {frozenset({"paper"}): "Paper settings", frozenset({"synthetic"}): "Scaling (synthetic)"}.get(
            frozenset(kinds), "Paper settings and scaling")
        sections.append((name, _report(paper, command, speed)))
    if wholes:
        sections.append(("Whole fits (experiments)", _whole_fit_report(wholes, command, speed)))
    if trees:
        sections.append(("Tree cost", _tree_cost_report(trees, command, speed)))
    targets = _targets([r for r in paper if r["kind"] in ("paper", "synthetic")], wholes)
    if targets:
        sections.append(("Targets (issue 13)", "\n".join([f"Command: `{command}`", ""] + targets) + "\n"))
    for name, body in sections:
        _write(name, body, Path(args.output))
        print(f"### {name}\n\n{body}")
    readme = {"none": None, "auto": REPO / "README.md" if Path(args.output).resolve() == (REPO / "docs" / "performance.md").resolve()
              else None}.get(args.readme, Path(args.readme))
    text = _headline([r for r in paper if r["kind"] == "paper"], wholes, command) if readme is not None else None
    if text is not None and _write_headline(text, readme):
        print(f"updated the performance headline of {readme}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
