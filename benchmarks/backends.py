"""Backend benchmark: a round of budro's driven loop versus a round of the library's own training.

    BUDRO_DATA_HOME=../shared/data python benchmarks/backends.py                  # everything
    BUDRO_DATA_HOME=../shared/data python benchmarks/backends.py --quick          # smoke run
    python benchmarks/backends.py --settings adult --backends xgboost,lightgbm --reps 5
    python benchmarks/backends.py --case-rounds adult:catboost=50                 # fewer rounds for one case

For every setting (the paper's three training sets: German 800 x 61, COMPAS 4222 x 7, Adult
36177 x 41; 80/20 split with random_state=0) and backend, one child process times, side by side
and interleaved over ``--reps`` repetitions (medians reported):

(a) **native**: the library's own multi-round training, ``backend.fit_native(X, y, 2, R)``;
(b) **driven, eps = 0**: ``start`` + ``R - 1`` rounds of ``losses()`` and ``step(P)`` with the
    empirical weights ``P[i, y_i] = 1/n``, then ``finish()``: budro's loop with an adversary that
    moves nothing.  This model must be the native one (same trees), so the ratio (b) / (a) is the
    cost of driving the library round by round and nothing else; the driven margins are checked
    against the native model's (``predict_margin``) and the maximum difference is reported
    (the case fails if it exceeds ``--tol``);
(c) **driven, changing weights**: the same loop with adversarial-like weights, every round a
    random 5-20 % of each row's mass moved to the other label (seeded, the same in every
    repetition).  Such rounds grow different (usually larger) trees, so (c) is reported separately,
    next to (d) **native on D0**: ``fit_native`` on the ``2n`` rows of D0 (each row once per label)
    with one fixed weight vector of that kind (rescaled by ``fit_native`` to sum to ``2n``), which
    shows how much of (c)'s cost is the size of the trees rather than the driving.

The headline is (b)'s ms/round over (a)'s ms/round, both whole fits divided by the ``R`` trees
(the library's data structure built once, ``start``/``finish`` included for (b)), in wall-clock
time.  Next to it: the same ratio in process CPU time (all threads; on a shared machine it does not
count the time the process waited for a core); the ratio without budro's per-label losses (the
library's side of the loop alone: ``Backend.losses()`` is ``label_losses(margins())``, and the two
parts are timed separately); the per-round ratio without the once-per-fit work (native:
``(T(R) - T(1)) / (R - 1)`` from a second, one-round ``fit_native``; driven: the mean of
``losses() + step()``); and the median ``step()``, ``margins()`` and per-label-loss times of a
driven round.

Parameters are the paper's (German: max_depth 4, learning rate 0.005, 500 rounds; COMPAS: max_depth 4,
learning rate 0.05, 200 rounds; Adult: max_depth 14, learning rate 0.005, 200 rounds), translated per
backend as in benchmarks/training.py (CatBoost depth capped at 16, LightGBM num_leaves = 2**depth),
``weight_scale="n"``, everything else budro's defaults, ``--threads`` threads (default 2).
Without the data (``BUDRO_DATA_HOME``) a synthetic set of the same shape is used and the report says so.

Writes a markdown report (default docs/backends-benchmark.md) with the machine, versions, command,
date and the load average around each case.  Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _report import cpu_model  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]

#: The paper's three settings (training split sizes) with its hyperparameters, as benchmarks/training.py.
SETTINGS = {
    "german": {"loader": "load_german", "shape": (800, 61), "rounds": 500,
               "params": {"max_depth": 4, "learning_rate": 0.005}},
    "compas": {"loader": "load_compas", "shape": (4222, 7), "rounds": 200,
               "params": {"max_depth": 4, "learning_rate": 0.05}},
    "adult": {"loader": "load_adult", "shape": (36177, 41), "rounds": 200,
              "params": {"max_depth": 14, "learning_rate": 0.005}},
}

#: How the common parameters are spelled per backend (as benchmarks/training.py).
BACKEND_PARAMS = {
    "xgboost": lambda p, threads: {"max_depth": p["max_depth"], "learning_rate": p["learning_rate"], "nthread": threads},
    "lightgbm": lambda p, threads: {"max_depth": p["max_depth"], "num_leaves": min(2 ** p["max_depth"], 131072),
                                    "learning_rate": p["learning_rate"], "num_threads": threads},
    "catboost": lambda p, threads: {"depth": min(p["max_depth"], 16), "learning_rate": p["learning_rate"],
                                    "thread_count": threads},
}


# ---------------------------------------------------------------------------- data


def _synthetic(n: int, d: int, seed: int = 0):
    """A stand-in of the same shape: a few continuous columns, two binary ones, one-hot groups."""
    rng = np.random.default_rng(seed)
    n_cont = min(5, d)
    cols = [rng.normal(size=(n, n_cont))]
    if d > n_cont:
        cols.append((rng.random((n, min(2, d - n_cont))) < [0.67, 0.85][: min(2, d - n_cont)]).astype(float))
    left = d - sum(c.shape[1] for c in cols)
    while left > 0:
        k = min(left, int(rng.integers(3, 10)))
        cols.append(np.eye(k)[rng.integers(0, k, size=n)])
        left -= k
    X = np.column_stack(cols)[:, :d]
    y = (X @ rng.normal(size=d) + rng.logistic(size=n) > 0).astype(int)
    return X, y


def _load(setting: str):
    """The training split (test_size=0.2, random_state=0) as float64 X and int y, and its source."""
    import budro.datasets as ds

    cfg = SETTINGS[setting]
    try:
        data = getattr(ds, cfg["loader"])(download=False)
        train, _ = data.train_test_split(test_size=0.2, random_state=0)
        X, y = np.asarray(train.X, dtype=np.float64), np.asarray(train.y).astype(int)
        return np.ascontiguousarray(X), y, "real"
    except Exception as exc:  # no data: a synthetic stand-in of the same shape
        X, y = _synthetic(*cfg["shape"])
        return X, y, f"synthetic {cfg['shape'][0]} x {cfg['shape'][1]} (data not loadable: {type(exc).__name__})"


# ---------------------------------------------------------------------------- one case


def _mean_leaves(model) -> float | None:
    """Mean leaves per tree of an XGBoost, LightGBM or CatBoost model (outside every timing)."""
    kind = type(model).__module__.split(".")[0]
    try:
        if kind == "xgboost":
            dump = model.get_dump()
            return float(np.mean([t.count("leaf=") for t in dump]))
        if kind == "lightgbm":
            text = model.model_to_string(num_iteration=-1)
            counts = [int(line.split("=", 1)[1]) for line in text.split("\n") if line.startswith("num_leaves=")]
            return float(np.mean(counts)) if counts else None
        if kind == "catboost":
            return float(np.mean(model.get_tree_leaf_counts()))
    except Exception:  # informational only
        return None
    return None


class _AdversarialWeights:
    """Every round, a random 5-20 % of each row's mass moved to the other label (seeded)."""

    def __init__(self, y: np.ndarray, seed: int) -> None:
        self.y = y
        self.n = y.shape[0]
        self.rows = np.arange(self.n)
        self.rng = np.random.default_rng(seed)

    def __call__(self) -> np.ndarray:
        moved = self.rng.uniform(0.05, 0.20, size=self.n)
        P = np.empty((self.n, 2))
        P[self.rows, self.y] = (1.0 - moved) / self.n
        P[self.rows, 1 - self.y] = moved / self.n
        return P


def _driven(backend, X, y, rounds: int, weights, *, random_state: int = 0) -> dict:
    """start + (rounds - 1) x (losses, step) + finish; per-piece times.  ``weights()`` gives each
    round's P (built outside the timed pieces).  Returns times and the margins before finish."""
    from budro.backends.base import Backend
    from budro.losses import label_losses

    wall, cpu = time.perf_counter, time.process_time
    split = type(backend).losses is Backend.losses  # losses() == label_losses(margins()): time both parts
    steps, margins_t, losses_t = [], [], []
    cpu_s = 0.0
    t0, c0 = wall(), cpu()
    backend.start(X, y, 2, random_state=random_state)
    start_s = wall() - t0
    cpu_s += cpu() - c0
    for _ in range(rounds - 1):
        P = weights()
        c0 = cpu()
        if split:
            t0 = wall()
            m = backend.margins()
            t1 = wall()
            label_losses(m, 2)
            t2 = wall()
        else:
            t0 = wall()
            backend.losses()
            t1 = t2 = wall()
        backend.step(P)
        t3 = wall()
        cpu_s += cpu() - c0
        margins_t.append(t1 - t0)
        losses_t.append(t2 - t1)
        steps.append(t3 - t2)
    final_margins = backend.margins()
    leaves = _mean_leaves(backend.model)
    n_trees = backend.n_rounds
    t0, c0 = wall(), cpu()
    backend.finish()
    finish_s = wall() - t0
    cpu_s += cpu() - c0
    loop_s = float(np.sum(steps) + np.sum(margins_t) + np.sum(losses_t))
    return {"start_s": start_s, "finish_s": finish_s, "loop_s": loop_s, "total_s": start_s + loop_s + finish_s,
            "cpu_s": cpu_s, "label_losses_s": float(np.sum(losses_t)),
            "step_ms": 1e3 * float(np.median(steps)) if steps else 0.0,
            "margins_ms": 1e3 * float(np.median(margins_t)) if steps else 0.0,
            "losses_ms": 1e3 * float(np.median(losses_t)) if steps else 0.0,
            "split": split, "leaves": leaves, "n_trees": n_trees, "margins": final_margins}


def _native(make, X, y, rounds: int, sample_weight=None) -> tuple[float, float, object]:
    """``fit_native`` for ``rounds`` rounds: wall seconds, CPU seconds (all threads), the model."""
    backend = make()
    t0, c0 = time.perf_counter(), time.process_time()
    model = backend.fit_native(X, y, 2, rounds, random_state=0, sample_weight=sample_weight)
    return time.perf_counter() - t0, time.process_time() - c0, model


def run_case(case: dict) -> dict:
    """One setting x backend, in a fresh process: (a)-(d) of the module docstring, interleaved."""
    import budro.registry as registry

    load_before = os.getloadavg()[0]
    X, y, source = _load(case["setting"])
    n, d = X.shape
    rounds = case["rounds"]
    params = BACKEND_PARAMS[case["backend"]](SETTINGS[case["setting"]]["params"], case["threads"])

    def make():
        return registry.create("backend", case["backend"], **params)

    empirical = np.zeros((n, 2))
    empirical[np.arange(n), y] = 1.0 / n
    # (d): D0 = every row once per label, with one fixed weight vector of the adversarial kind.
    P_fixed = _AdversarialWeights(y, seed=12345)()
    X_d0, y_d0, w_d0 = np.vstack([X, X]), np.repeat([0, 1], n), np.concatenate([P_fixed[:, 0], P_fixed[:, 1]])

    # Warm-up, untimed: imports, first-call costs of the library and of numpy.
    _native(make, X, y, 2)
    _driven(make(), X, y, 3, lambda: empirical)

    reps = {k: [] for k in ("native", "native_cpu", "native_1", "driven", "adversarial", "native_d0")}
    max_diff = None
    leaves: dict[str, float | None] = {}
    trees: dict[str, int] = {}
    for rep in range(case["reps"]):
        # Alternate the order, so that neither side always runs first (warm caches, load drift).
        order = ["native", "driven"] if rep % 2 == 0 else ["driven", "native"]
        for what in order:
            if what == "native":
                t, c, native = _native(make, X, y, rounds)
                reps["native"].append(t)
                reps["native_cpu"].append(c)
                if rep == 0:
                    leaves["native"] = _mean_leaves(native.model)
                    trees["native"] = native.n_rounds
            else:
                r = _driven(make(), X, y, rounds, lambda: empirical)
                reps["driven"].append({k: v for k, v in r.items() if k != "margins"})
                if rep == 0:
                    leaves["driven"] = r["leaves"]
                    trees["driven"] = r["n_trees"]
                    driven_margins = r["margins"]
            if rep == 0 and what == order[-1]:
                ref = native.predict_margin(X)
                max_diff = float(np.max(np.abs(driven_margins - ref)))
                assert max_diff <= case["tol"], (
                    f"eps = 0: driven margins differ from fit_native's by {max_diff:.3g} > {case['tol']:g} "
                    f"({trees['driven']} vs {trees['native']} trees)")
        reps["native_1"].append(_native(make, X, y, 1)[0])
        if case["adversarial"]:
            r = _driven(make(), X, y, rounds, _AdversarialWeights(y, seed=0))
            reps["adversarial"].append({k: v for k, v in r.items() if k != "margins"})
            if rep == 0:
                leaves["adversarial"], trees["adversarial"] = r["leaves"], r["n_trees"]
        if case["d0"]:
            t, _, d0 = _native(make, X_d0, y_d0, rounds, sample_weight=w_d0)
            reps["native_d0"].append(t)
            if rep == 0:
                leaves["native_d0"], trees["native_d0"] = _mean_leaves(d0.model), d0.n_rounds

    med = lambda xs: float(np.median(xs))  # noqa: E731
    out = {**case, "n": n, "d": d, "source": source, "params": params, "max_margin_diff": max_diff,
           "leaves": leaves, "trees": trees, "raw": reps}
    out["native_ms"] = 1e3 * med(reps["native"]) / rounds
    out["native_1_ms"] = 1e3 * med(reps["native_1"])
    out["native_marginal_ms"] = 1e3 * (med(reps["native"]) - med(reps["native_1"])) / max(rounds - 1, 1)
    dr = reps["driven"]
    out["driven_ms"] = 1e3 * med([r["total_s"] for r in dr]) / rounds
    out["driven_marginal_ms"] = 1e3 * med([r["loop_s"] for r in dr]) / max(rounds - 1, 1)
    for k in ("step_ms", "margins_ms", "losses_ms"):
        out["driven_" + k] = med([r[k] for r in dr])
    out["driven_start_ms"] = 1e3 * med([r["start_s"] for r in dr])
    out["driven_finish_ms"] = 1e3 * med([r["finish_s"] for r in dr])
    out["ratio"] = out["driven_ms"] / out["native_ms"]
    # The library's part alone: without budro's per-label losses computed from the margins.
    out["driven_lib_ms"] = 1e3 * med([r["total_s"] - r["label_losses_s"] for r in dr]) / rounds
    out["lib_ratio"] = out["driven_lib_ms"] / out["native_ms"]
    out["native_cpu_ms"] = 1e3 * med(reps["native_cpu"]) / rounds
    out["driven_cpu_ms"] = 1e3 * med([r["cpu_s"] for r in dr]) / rounds
    out["cpu_ratio"] = out["driven_cpu_ms"] / out["native_cpu_ms"]
    out["marginal_ratio"] = out["driven_marginal_ms"] / out["native_marginal_ms"] if out["native_marginal_ms"] > 0 else float("nan")
    if reps["adversarial"]:
        ad = reps["adversarial"]
        out["adversarial_ms"] = 1e3 * med([r["total_s"] for r in ad]) / rounds
        out["adversarial_step_ms"] = med([r["step_ms"] for r in ad])
        out["adversarial_losses_ms"] = med([r["margins_ms"] + r["losses_ms"] for r in ad])
    if reps["native_d0"]:
        out["native_d0_ms"] = 1e3 * med(reps["native_d0"]) / rounds
    out["load_before"], out["load_after"] = load_before, os.getloadavg()[0]
    return out


# ---------------------------------------------------------------------------- driver


def _child(case: dict, timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "_case", json.dumps(case)]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {**case, "error": f"over {timeout:.0f} s"}
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines() or ["?"]
        last = next((line for line in reversed(lines) if "Error" in line), lines[-1])
        return {**case, "error": last[:300]}
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["wall_s"] = time.perf_counter() - t0
    return r


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("budro", "numpy", "scipy", "xgboost", "lightgbm", "catboost"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def _machine() -> str:
    return f"{os.cpu_count()} cores ({cpu_model()}), {platform.system()} {platform.release()}"


def _f(x, fmt="{:.2f}") -> str:
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else fmt.format(x)


def _case_name(r: dict) -> str:
    return f"{r['setting']}/{r['backend']}/{r['threads']}t"


def _report(results: list[dict], runs: list[dict], args) -> str:
    lines = [
        "# Backend benchmark: driven rounds versus native training", "",
        "Made by `benchmarks/backends.py` (its docstring defines every column).", "",
        "Run" + ("s" if len(runs) > 1 else "") + ": " + "; ".join(f"`{r['command']}` ({r['date']})" for r in runs), "",
        f"Machine: {_machine()}.  "
        "Each case ran in its own process, its repetitions interleaved (native and driven alternating "
        "which goes first); medians over the repetitions.", "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in _versions().items()), "",
        "## Driving cost at eps = 0 (same trees as native training)", "",
        "native: `fit_native` for R rounds, total / R; driven: `start` + (R - 1) x (`losses()` + `step()`) + "
        "`finish()`, total / R; **ratio** = driven / native (wall clock, the headline); CPU ratio: the same in "
        "process CPU time (all threads; insensitive to time the process spent descheduled); w/o losses: the "
        "driven total without budro's per-label losses (`label_losses(margins)`, the `losses` column), i.e. only "
        "the library's side of the loop, over native.  Per round only: "
        "without the once-per-fit work (native (T(R) - T(1)) / (R - 1), driven mean of `losses()` + `step()`).  "
        "step, margins, losses: medians per driven round.  max |dm|: largest difference between the driven "
        "margins and the native model's at the training points.", "",
        "| setting | backend | threads | n x d | R | reps | native ms/round | driven ms/round | ratio | CPU ratio | w/o losses "
        "| per round only: native / driven / ratio | step ms | margins ms | losses ms | start ms | finish ms "
        "| max \\|dm\\| | leaves/tree |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        head = f"| {r['setting']} | {r['backend']} | {r['threads']} |"
        if "error" in r:
            lines.append(head + f" error: {r['error']} |" + " |" * 15)
            continue
        lines.append(
            head + f" {r['n']} x {r['d']} | {r['rounds']} | {r['reps']} | {r['native_ms']:.3f} | {r['driven_ms']:.3f} | "
            f"**{r['ratio']:.2f}** | {r['cpu_ratio']:.2f} | {r['lib_ratio']:.2f} | {r['native_marginal_ms']:.3f} / {r['driven_marginal_ms']:.3f} / "
            f"{_f(r['marginal_ratio'])} | {r['driven_step_ms']:.3f} | {r['driven_margins_ms']:.3f} | "
            f"{r['driven_losses_ms']:.3f} | {r['driven_start_ms']:.1f} | {r['driven_finish_ms']:.1f} | "
            f"{r['max_margin_diff']:.1e} | {_f(r['leaves'].get('native'), '{:.1f}')} |")
    if any("adversarial_ms" in r for r in results):
        lines += [
            "", "## Changing weights (adversarial-like) and native training on D0", "",
            "driven, changing weights: the same loop, every round a random 5-20 % of each row's mass moved to "
            "the other label (seeded: the same weights in every repetition).  native on D0: `fit_native` on the "
            "2n rows of D0 with one fixed weight vector of that kind (rescaled to sum to 2n), total / R.  "
            "Leaves: mean per tree.", "",
            "| setting | backend | threads | driven ms/round | step ms | margins + losses ms | leaves/tree | "
            "native on D0 ms/round | leaves/tree | driven / native on D0 | driven / native on (X, y) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in results:
            if "adversarial_ms" not in r:
                continue
            d0 = r.get("native_d0_ms")
            lines.append(
                f"| {r['setting']} | {r['backend']} | {r['threads']} | {r['adversarial_ms']:.3f} | "
                f"{r['adversarial_step_ms']:.3f} | {r['adversarial_losses_ms']:.3f} | "
                f"{_f(r['leaves'].get('adversarial'), '{:.1f}')} | {_f(d0, '{:.3f}')} | "
                f"{_f(r['leaves'].get('native_d0'), '{:.1f}')} | {_f(r['adversarial_ms'] / d0 if d0 else None)} | "
                f"{r['adversarial_ms'] / r['native_ms']:.2f} |")
    ok = [r for r in results if "error" not in r]
    sources = sorted({f"{r['setting']}: {r['source']}" for r in ok})
    params = {}
    for r in ok:
        params.setdefault(f"{r['setting']}/{r['backend']}", (r["rounds"], {k: v for k, v in r["params"].items()
                                                                           if k not in ("nthread", "num_threads", "thread_count")}))
    lines += ["", "Data: " + ("; ".join(sources) if sources else "-") + ".",
              "", "Parameters (budro's names, `weight_scale=\"n\"`, everything else budro's defaults; threads as in "
              "the tables): " + "; ".join(f"{k}: R = {R}, " + ", ".join(f"{a}={v}" for a, v in p.items())
                                          for k, (R, p) in params.items()) + ".",
              "", "Load average (1 min) before / after each case, and the case's wall time: "
              + "; ".join(f"{_case_name(r)} {r['load_before']:.2f} / {r['load_after']:.2f} ({r['wall_s']:.0f} s)"
                          for r in ok) + "."]
    for note in args.note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_case":
        r = run_case(json.loads(argv[1]))
        print(json.dumps(r, default=float))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", default="german,compas,adult",
                    help="comma list of german,compas,adult, or 'none' (with --include: only write the report)")
    ap.add_argument("--backends", default="xgboost,lightgbm,catboost", help="comma list of registered backends")
    ap.add_argument("--rounds-scale", type=float, default=None, help="multiply every setting's rounds (quick runs)")
    ap.add_argument("--case-rounds", default="",
                    help="explicit rounds for single cases, e.g. adult:catboost=50 (comma separated)")
    ap.add_argument("--reps", type=int, default=None, help="interleaved repetitions per case (default 3)")
    ap.add_argument("--threads", default="2", help="threads per library; a comma list runs every case per value")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest eps = 0 margin difference accepted")
    ap.add_argument("--no-adversarial", dest="adversarial", action="store_false", help="skip (c)")
    ap.add_argument("--no-d0", dest="d0", action="store_false", help="skip (d), native training on D0")
    ap.add_argument("--quick", action="store_true", help="smoke run: rounds x 0.1, one repetition")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per case")
    ap.add_argument("--include", action="append", default=[],
                    help="a --json file of an earlier run whose results (and command) go into this report first")
    ap.add_argument("--note", action="append", default=[], help="a paragraph added to the report (repeatable)")
    ap.add_argument("--output", default=str(REPO / "docs" / "backends-benchmark.md"))
    ap.add_argument("--json", help="also write this run's raw results (and command) here")
    args = ap.parse_args(argv)
    if args.rounds_scale is None:
        args.rounds_scale = 0.1 if args.quick else 1.0
    if args.reps is None:
        args.reps = 1 if args.quick else 3

    settings = [s for s in args.settings.split(",") if s and s != "none"]
    for s in settings:
        if s not in SETTINGS:
            ap.error(f"unknown setting {s!r}; choose from {', '.join(SETTINGS)}")
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in BACKEND_PARAMS:
            ap.error(f"no parameter translation for backend {b!r}; known: {', '.join(BACKEND_PARAMS)}")
    threads = [int(t) for t in args.threads.split(",") if t]
    explicit = {}
    for item in [v for v in args.case_rounds.split(",") if v]:
        try:
            key, value = item.split("=")
            setting, backend = key.split(":")
            explicit[(setting, backend)] = int(value)
        except ValueError:
            ap.error(f"--case-rounds: expected SETTING:BACKEND=ROUNDS, got {item!r}")

    runs, results = [], []
    for path in args.include:
        earlier = json.loads(Path(path).read_text())
        runs.append({"command": earlier["command"], "date": earlier["date"]})
        results.extend(earlier["results"])
    this_run = {"command": ("python benchmarks/backends.py " + " ".join(argv)).strip(),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    mine = []
    for t in threads:
        for s in settings:
            for b in backends:
                rounds = explicit.get((s, b), max(2, int(round(SETTINGS[s]["rounds"] * args.rounds_scale))))
                case = {"setting": s, "backend": b, "rounds": rounds, "reps": args.reps, "threads": t,
                        "tol": args.tol, "adversarial": args.adversarial, "d0": args.d0}
                print(f"running {s} / {b} / {t} threads (R = {rounds}) ...", file=sys.stderr, flush=True)
                r = _child(case, args.timeout)
                mine.append(r)
                print(json.dumps({k: v for k, v in r.items() if k not in ("raw", "params")}, default=str),
                      file=sys.stderr, flush=True)
    results.extend(mine)
    if mine:
        runs.append(this_run)
    report = _report(results, runs, args)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(report)
    if args.json:
        Path(args.json).write_text(json.dumps({**this_run, "results": mine}, indent=2, default=str))
    print(report)
    return 1 if any("error" in r for r in mine) else 0


if __name__ == "__main__":
    sys.exit(main())
