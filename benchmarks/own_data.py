"""Own-data benchmark: Adult from the raw UCI files (budro's csv source + table encoding) against
the prepared loader (``budro.datasets.load_adult``), on the same rows and the same splits.

    BUDRO_DATA_HOME=../shared/data python benchmarks/own_data.py                 # 2 splits, 60 trees
    BUDRO_DATA_HOME=../shared/data python benchmarks/own_data.py --splits 1 --n-steps 19   # smoke run
    BUDRO_DATA_HOME=../shared/data python benchmarks/own_data.py --budget-table  # budget diagnosis only

Both paths start from ``adult.data`` + ``adult.test``:

* **prepared**: ``load_adult()`` (rows with a ``?`` dropped: 45222; 5 continuous columns
  standardised on each training split, sex and race binary, 4 categoricals one-hot: 41 numeric
  columns) and ``Dataset.train_test_split(0.2, random_state=s)``;
* **raw file**: the two files read by the ``csv`` data source of a config (``header = false``,
  ``separator = ", "``, ``na_values = ["?"]``, ``skip_rows = 1`` and ``label_strip = "."`` for
  adult.test), the same rows with a missing value dropped (so the row sets are equal: checked),
  then the columns the paper drops (fnlwgt, education, native_country), strings kept: ``BuDROClassifier`` encodes the table
  itself (``table_``: the booster gets category codes, the fair metric one-hot columns and
  standardised numerics, race with its 5 values).  The split is the same stratified
  ``train_test_split`` of the row positions with the same seed (the labels are checked equal).

Each split fits the same BuDRO settings on both paths, interleaved (prepared, then raw): the Adult
experiment config's booster (max depth 14, learning rate 0.005, lambda 1e-4, min child weight
0.1 / 36177, scale_pos_weight 27211 / 8966, weights summing to 1), eps = 0.4 (raw units), 100
neighbours, protected ``sex`` and ``race`` with the sensitive-subspace metric's defaults (one
logistic model per protected attribute; the config's ``fit_linear_models = [5]`` names a column
position of the prepared encoding, which the raw table does not have), ``--n-steps`` BuDRO rounds
(default 59: 60 trees instead of the config's 180, to keep the run short on 2 shared cores), one
booster thread.  Reported per path: balanced accuracy on the test part, whole ``fit`` wall time
(the raw path's includes fitting the table encoder), and the time to load the data.

Writes the report between the markers ``<!-- own-data-benchmark:start -->`` and ``:end -->`` of
``docs/your-own-data.md`` (``--report``), and prints it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from _report import replace_section  # benchmarks/ is the script's folder, first on sys.path

ADULT_NAMES = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
               "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country",
               "income"]
MARK_SECTION = "own-data-benchmark"
MARK_START, MARK_END = f"<!-- {MARK_SECTION}:start -->", f"<!-- {MARK_SECTION}:end -->"


def raw_adult(data_home: Path):
    """adult.data + adult.test through budro's csv data source, rows with a missing value dropped."""
    import pandas as pd

    from budro.config import parse_config

    frames, labels = [], []
    for name, skip in (("adult.data", 0), ("adult.test", 1)):
        cfg = parse_config({"data": {
            "source": "csv", "path": str(data_home / "adult" / name), "header": False, "names": ADULT_NAMES,
            "separator": ", ", "na_values": ["?"], "skip_rows": skip, "label": "income", "label_strip": ".",
        }})
        X, y = cfg.load_data()
        frames.append(X)
        labels.append(np.asarray(y))
    X = pd.concat(frames, ignore_index=True)
    y = np.concatenate(labels)
    keep = ~X.isna().any(axis=1).to_numpy()  # as the prepared loader: a '?' anywhere drops the row
    return X[keep].drop(columns=["fnlwgt", "education", "native_country"]).reset_index(drop=True), y[keep]


def settings(n_steps: int) -> dict:
    return dict(
        backend="xgboost",
        backend_params={"weight_scale": "unit", "max_depth": 14, "reg_lambda": 1e-4,
                        "min_child_weight": 0.1 / 36177, "learning_rate": 0.005,
                        "scale_pos_weight": 27211 / 8966, "nthread": 1},
        solver="dual", fair_metric="sensitive-subspace", protected=["sex", "race"],
        eps=0.4, n_steps=n_steps, n_neighbors=100, random_state=0,
    )


#: (config, budgets) of the budget table: the paper's configs, at budgets that worked and failed (docs/results.md).
BUDGET_CASES = (("german", (1.0, 3.0, 10.0)), ("compas", (0.001, 0.003, 0.03, 0.12)), ("adult", (0.4, 2.0)))


def budget_table() -> str:
    """The budget diagnosis (budro.budget) of each paper config's fair metric on its split-0 training part."""
    import warnings as _w

    from budro import registry
    from budro.budget import RELABEL_SHARE, diagnose_budget
    from budro.config import load_config
    from budro.datasets import make_synthetic

    lines = ["| data (config) | eps | nn scale | pairs at distance 0 | free relabel | relabel share | of the rest | warns |",
             "|---|---|---|---|---|---|---|---|"]
    cases = [("demo (budro demo)", None, (0.01,))] + [(f"{n} (experiments/{n}.toml)", n, e) for n, e in BUDGET_CASES]
    for label, name, budgets in cases:
        if name is None:
            X, y, _ = make_synthetic(random_state=0)
            metric = registry.create("fair_metric", "sensitive-subspace", fit_linear_models=False).fit(X, [0], y=y)
        else:
            cfg = load_config(f"experiments/{name}.toml")
            train, _ = cfg.load_dataset().train_test_split(0.2, random_state=0)
            X, y = train.X.to_numpy(float), train.y
            with _w.catch_warnings():
                _w.simplefilter("ignore")
                metric = registry.create("fair_metric", cfg.fair_metric, **cfg.fair_metric_params).fit(
                    X, train.protected_indices, y=y)
        d = diagnose_budget(metric, X, y)
        for eps in budgets:
            warns = "yes" if d.paid_relabel_share(eps) >= RELABEL_SHARE else "no"
            lines.append(f"| {label} | {eps:g} | {d.nn_scale:.4g} | {100 * d.zero_pair_share:.1f}% | "
                         f"{100 * d.free_relabel_share:.1f}% | {100 * d.relabel_share(eps):.1f}% | "
                         f"{100 * d.paid_relabel_share(eps):.1f}% | {warns} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-table", action="store_true",
                    help="only print the budget diagnosis of the paper's configs (seconds) and exit")
    ap.add_argument("--splits", type=int, default=2, help="random 80/20 splits, seeds 0.. (default: %(default)s)")
    ap.add_argument("--n-steps", type=int, default=59, help="BuDRO rounds after f_0 (default: %(default)s)")
    ap.add_argument("--report", default="docs/your-own-data.md", help="markdown file with the markers ('' = none)")
    args = ap.parse_args(argv)
    if args.budget_table:
        print(budget_table())
        return 0
    if args.splits < 1 or args.n_steps < 0:
        ap.error("--splits must be >= 1 and --n-steps >= 0")

    from sklearn.metrics import balanced_accuracy_score
    from sklearn.model_selection import train_test_split

    import budro
    from budro import BuDROClassifier
    from budro.datasets import get_data_home, load_adult

    data_home = Path(get_data_home())
    t0 = time.perf_counter()
    prepared = load_adult(download=False)
    t_prepared = time.perf_counter() - t0
    t0 = time.perf_counter()
    X_raw, y_raw = raw_adult(data_home)
    t_raw = time.perf_counter() - t0
    y_raw01 = (y_raw == ">50K").astype(int)
    if len(y_raw01) != prepared.n_samples or not np.array_equal(y_raw01, prepared.y):
        raise SystemExit(f"row sets differ: raw {len(y_raw01)} rows, prepared {prepared.n_samples}")
    if not np.array_equal(X_raw["age"].to_numpy(float), prepared.X["age"].to_numpy(float)):
        raise SystemExit("row order differs between the raw and the prepared path")

    rows = []
    for seed in range(args.splits):
        train, test = prepared.train_test_split(0.2, random_state=seed)
        tr, te = train_test_split(np.arange(len(y_raw)), test_size=0.2, random_state=seed, stratify=prepared.y)
        for path in ("prepared", "raw file"):
            est = BuDROClassifier(**settings(args.n_steps))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # both paths warn alike; the numbers are the point here
                t0 = time.perf_counter()
                if path == "prepared":
                    est.fit(train.X, train.y)
                    elapsed = time.perf_counter() - t0
                    pred = est.predict(test.X)
                    y_test = test.y
                else:
                    est.fit(X_raw.iloc[tr].reset_index(drop=True), y_raw[tr])
                    elapsed = time.perf_counter() - t0
                    pred = (est.predict(X_raw.iloc[te].reset_index(drop=True)) == ">50K").astype(int)
                    y_test = y_raw01[te]
            bacc = balanced_accuracy_score(y_test, pred)
            rows.append({"seed": seed, "path": path, "bacc": bacc, "fit_s": elapsed,
                         "features": est.n_features_in_, "eps_scale": est.eps_scale_})
            print(f"split {seed} {path:9s} BAcc {bacc:.4f}  fit {elapsed:.1f} s  ({est.n_features_in_} columns,"
                  f" eps_scale_ {est.eps_scale_:.4g})", flush=True)

    def mean(path, key):
        return float(np.mean([r[key] for r in rows if r["path"] == path]))

    d_bacc = [r["bacc"] - q["bacc"] for r, q in zip(rows[1::2], rows[0::2])]
    ratio = mean("raw file", "fit_s") / mean("prepared", "fit_s")
    command = "BUDRO_DATA_HOME=../shared/data python benchmarks/own_data.py" + (
        "" if argv is None and len(sys.argv) == 1 else " " + " ".join(sys.argv[1:] if argv is None else argv))
    lines = [
        f"Command: `{command}` (budro {budro.__version__}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs shared with other jobs; {args.splits} split(s), {args.n_steps + 1} trees, one booster thread).",
        "",
        "| split | path | columns | BAcc | whole fit (s) | eps_scale_ |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {r['seed']} | {r['path']} | {r['features']} | {r['bacc']:.4f} | {r['fit_s']:.1f} | {r['eps_scale']:.4g} |"
              for r in rows]
    lines += [
        "",
        f"- (a) balanced accuracy, raw file minus prepared, per split: {', '.join(f'{d:+.4f}' for d in d_bacc)} "
        f"(target: within 0.01: **{'met' if max(abs(d) for d in d_bacc) <= 0.01 else 'not met'}**).",
        f"- (b) whole-fit time, raw file / prepared (means): {ratio:.3f} "
        f"(target: at most 1.10: **{'met' if ratio <= 1.10 else 'not met'}**).",
        f"- Loading: prepared loader {t_prepared:.1f} s, both raw files through the csv source {t_raw:.1f} s.",
    ]
    body = "\n".join(lines)
    print("\n".join([MARK_START, body, MARK_END]))
    if args.report:
        replace_section(Path(args.report), MARK_SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
