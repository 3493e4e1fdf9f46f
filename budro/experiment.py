"""Repeated-split experiments: the paper's Tables 1-3 and its accuracy-fairness trade-off plots.

``budro experiment CONFIG --splits 10`` runs every configured method on the same random 80/20
(stratified) splits of the data, evaluates each fitted model on the test part with
:func:`budro.evaluation.evaluate`, and writes, under the output folder:

* ``runs/<method>/split-<k>.json``: one file per (method, split), written atomically as soon as
  that fit is evaluated.  Re-running the command skips every unit whose file exists with the same
  fingerprint, so an interrupted run (Ctrl-C keeps every finished split) resumes.  The
  fingerprint covers the method and its parameters, the ``[data]`` section, the split seed, the
  SHA-256 of every input file the config reads (a CSV/parquet ``data.path``; the raw files of a
  built-in data set in the data home) and the budro version: a result computed from other data or
  by another budro version is never reported, it is recomputed and the run says why;
* ``splits.csv``: every metric of every (method, split), for BuDRO methods also the budget its
  adversary used per round (``budget_used_mean``/``budget_used_max`` of ``transport_cost / eps``
  and ``rounds_over_budget``: :func:`budget_used`);
* ``summary.csv`` and ``results.md``: mean and standard deviation (over splits, ``ddof=1``) of
  every metric per method; the markdown table has the paper's layout (accuracy, consistency
  scores, Gap_Max and Gap_RMS per protected group, training time).  A metric that is NaN on some
  splits (a group gap on a test split holding one group only) is averaged over the others, marked
  ``(k/n)`` in its cell and named in a note under the table.

With ``--grid`` the methods named in the config's ``[grid]`` section are run at every point of
their parameter grid (e.g. ``eps``), the other methods once, and ``grid.csv``, ``grid.md`` and
``tradeoff.png`` (accuracy against each group's Gap_RMS and each consistency score, one standard
deviation error bars: the paper's Figures 3-4) are written.

A config (TOML) for an experiment::

    eps = 1.0
    n_steps = 89
    protected = ["age"]
    [data]
    source = "german"
    [backend]
    name = "xgboost"
    weight_scale = "unit"
    max_depth = 4

    [experiment]
    splits = 10
    methods = ["BuDRO", "Baseline"]

    [methods.BuDRO]
    method = "budro"            # every key not set here is inherited from the top level

    [methods.Baseline]
    method = "gbdt"
    n_rounds = 105
    backend = { name = "xgboost", max_depth = 10, reg_lambda = 1000 }

    [grid.BuDRO]
    eps = [0.1, 0.3, 1.0]
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import os
import re
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TextIO

import numpy as np

from budro.config import Config, grid_overrides, parse_grid_params
from budro.exceptions import ConfigError, ValidationError

__all__ = [
    "ExperimentResult",
    "ExperimentInterrupted",
    "Unit",
    "run_experiment",
    "summarize",
    "markdown_table",
    "write_csv",
    "plot_tradeoff",
    "parse_grid_arguments",
    "metric_columns",
    "format_mean_std",
    "missing_metric_notes",
    "budget_used",
]

#: Bumped when the content of a per-split result changes meaning (old files are then recomputed).
RESULT_VERSION = 3  # 3: the per-split budget columns (budget_used_mean/max, rounds_over_budget)

#: Short column titles of the markdown tables.
TITLES = {
    "accuracy": "Acc",
    "balanced_accuracy": "BAcc",
    "certificate": "Certificate",
    "fit_seconds": "Train (s)",
    "budget_used_mean": "Budget used (mean)",
    "budget_used_max": "Budget used (max)",
    "rounds_over_budget": "Rounds over budget",
    "rounds_not_converged": "Rounds not converged",
    "largest_round_gap": "Largest round gap",
}


# ---------------------------------------------------------------------------------- units


@dataclass(frozen=True)
class Unit:
    """One fit and evaluation: a method (at a grid point) on one split."""

    label: str
    split: int
    seed: int
    point: tuple[tuple[str, Any], ...] = ()

    @property
    def point_dict(self) -> dict[str, Any]:
        return dict(self.point)

    @property
    def point_name(self) -> str:
        return ",".join(f"{k}={_fmt_value(v)}" for k, v in self.point)


@dataclass
class ExperimentResult:
    """What :func:`run_experiment` produced."""

    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    output: Path
    files: dict[str, Path] = field(default_factory=dict)
    n_computed: int = 0
    n_reused: int = 0
    columns: list[str] = field(default_factory=list)
    grid: bool = False
    #: Why finished results were recomputed (a changed input file, another budro version), and which
    #: metrics could not be computed on some splits (:func:`missing_metric_notes`), one line each.
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        """The summary as markdown (the paper's layout; with a Parameters column for a grid)."""
        return markdown_table(self.summary, self.columns, with_point=self.grid)


class ExperimentInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_experiment`: the finished splits are kept (their files are complete),
    and the same call resumes from them.  ``str()`` is the one-line message the CLI prints."""

    def __init__(self, kept: int, output: Path):
        super().__init__(f"interrupted; {kept} finished split(s) kept in {output} (run the same command again to resume)")
        self.kept = kept
        self.output = output

    def __str__(self) -> str:
        return str(self.args[0])


# ---------------------------------------------------------------------------------- running


def run_experiment(
    cfg: Config,
    *,
    splits: int | None = None,
    output: str | os.PathLike | None = None,
    methods: Sequence[str] | None = None,
    grid: bool | Mapping[str, Mapping[str, list]] = False,
    fresh: bool = False,
    progress: bool | TextIO = True,
    command: str | None = None,
    log: Any = None,
) -> ExperimentResult:
    """Run the experiment described by ``cfg`` (see the module docstring).

    Parameters
    ----------
    cfg : Config
        From :func:`budro.config.load_config`.
    splits : int, optional
        Number of random splits (default: ``experiment.splits`` of the config, 10).
    output : path, optional
        Output folder (default: ``experiment.output`` of the config, else ``results/experiment``).
    methods : sequence of str, optional
        Labels of the methods to run (default: the config's).
    grid : bool or mapping
        False: every method once.  True: the config's ``[grid]``.  A mapping ``label -> {param:
        [values]}`` (see :func:`parse_grid_arguments`): that grid.
    fresh : bool
        Recompute every unit even where a result file exists.
    progress : bool or stream
        Progress bar on stderr (or the given stream).
    command : str, optional
        The command line, written into the markdown files.
    log : callable, optional
        Called with each note: why finished results are recomputed (before any fit starts), and
        after the run which metrics were NaN on some splits; the notes are also in
        :attr:`ExperimentResult.notes` (the second kind also under the markdown tables).

    Raises
    ------
    ValidationError
        The output folder cannot be used (an existing file, not writable, an output file that is a
        folder), before any data is loaded or any model trained.
    ExperimentInterrupted
        On Ctrl-C (a :class:`KeyboardInterrupt`): every finished split is kept on disk.
    """
    exp = cfg.experiment or {}
    n_splits = int(splits if splits is not None else exp.get("splits", 10))
    if n_splits < 1:
        raise ConfigError(f"splits must be >= 1, got {n_splits}")
    labels = list(methods) if methods else cfg.method_labels()
    known = cfg.method_labels() if not cfg.methods else list(cfg.methods)
    for label in labels:
        if label not in known:
            raise ConfigError(f"no method labelled {label!r}; the config defines: {', '.join(known)}")
    grids: dict[str, dict[str, list]] = {}
    if grid is True:
        grids = dict((cfg.grid or {}).get("params", {}))
        if not grids:
            raise ConfigError("--grid: the config has no [grid.<method>] section (e.g. [grid.BuDRO] eps = [0.1, 0.5])")
    elif grid:
        grids = {label: parse_grid_params(cfg, label, table) for label, table in grid.items()}
    for label in grids:
        if label not in labels:
            raise ConfigError(f"grid for {label!r}, which is not among the methods run: {', '.join(labels)}")

    out = _output_dir(cfg, output)
    seed0 = int(exp.get("seed", 0))
    units: list[Unit] = []
    for k in range(n_splits):
        for label in labels:
            for point in _grid_points(grids.get(label)):
                units.append(Unit(label, k, seed0 + k, point))
    paths = [_unit_path(out, _canonical(cfg, unit)) for unit in units]
    outputs = ["grid-splits.csv", "grid.csv", "grid.md", "tradeoff.png"] if grids else ["splits.csv", "summary.csv", "results.md"]
    check_output_dir(out, files=outputs, folders={p.parent for p in paths})

    dataset = cfg.load_dataset()
    inputs = input_digests(cfg)
    # Which finished results can be reused; why the others (if any) are recomputed.
    plan: list[tuple[Unit, Path, dict[str, Any], dict[str, Any] | None]] = []
    stale: dict[str, int] = {}
    for unit, path in zip(units, paths):
        stamp = _fingerprint(cfg, unit, inputs)
        row, why = (None, None) if fresh else _read_unit(path, stamp)
        if why:
            stale[why] = stale.get(why, 0) + 1
        plan.append((unit, path, stamp, row))
    notes = [f"recomputing {count} finished split(s): {why}" for why, count in stale.items()]
    for note in notes:
        if log is not None:
            log(note)

    bar = _Progress(len(units), progress, cached=sum(1 for *_, row in plan if row is not None))
    rows: list[dict[str, Any]] = []
    computed = reused = 0
    split_cache: dict[int, Any] = {}
    client = close_client = None  # the [cluster] client, opened for the first BuDRO fit computed
    try:
        for unit, path, stamp, row in plan:
            if row is not None:
                reused += 1
                bar.update(unit, cached=True)
            else:
                if cfg.cluster is not None and client is None and cfg.method_spec(unit.label)[0] == "budro":
                    from budro.dask._cluster import client_from_config

                    client, close_client = client_from_config(cfg.cluster)
                if unit.split not in split_cache:
                    split_cache.clear()
                    split_cache[unit.split] = dataset.train_test_split(
                        float(exp.get("test_size", 0.2)), random_state=unit.seed, stratify=bool(exp.get("stratify", True)))
                train, test = split_cache[unit.split]
                row = _run_unit(cfg, unit, train, test, **({"client": client} if client is not None else {}))
                _write_unit(path, stamp, unit, row)
                computed += 1
                bar.update(unit, seconds=row.get("fit_seconds"))
            rows.append({"method": unit.label, "split": unit.split, "seed": unit.seed, "point": unit.point_name,
                         **{f"param:{k}": v for k, v in unit.point}, **row})
    except KeyboardInterrupt:
        bar.close()
        kept = sum(1 for _, path, stamp, _ in plan if _read_unit(path, stamp)[0] is not None)
        raise ExperimentInterrupted(kept, out) from None
    finally:
        if close_client is not None:
            close_client()
    bar.close()

    columns = metric_columns(rows)
    summary = summarize(rows)
    missing = missing_metric_notes(rows)
    for note in missing:
        if log is not None:
            log(note)
    notes += missing
    footer = "".join(f"\n* {note}" for note in missing) + ("\n" if missing else "")
    files: dict[str, Path] = {}
    files["splits.csv"] = write_csv(out / ("grid-splits.csv" if grids else "splits.csv"), rows)
    header = _header(cfg, dataset, n_splits, seed0, command)
    if grids:
        files["grid.csv"] = write_csv(out / "grid.csv", summary)
        files["grid.md"] = write_text(out / "grid.md", header + markdown_table(summary, columns, with_point=True) + "\n"
                                      + footer)
        opts = (cfg.grid or {}).get("options", {})
        files["tradeoff.png"] = plot_tradeoff(summary, out / "tradeoff.png", x=opts.get("x") or "balanced_accuracy",
                                              bin_width=opts.get("bin_width"), gridded=list(grids),
                                              title=exp.get("title") or dataset.name)
    else:
        files["summary.csv"] = write_csv(out / "summary.csv", summary)
        files["results.md"] = write_text(out / "results.md", header + markdown_table(summary, columns) + "\n" + footer)
    return ExperimentResult(rows=rows, summary=summary, output=out, files=files, n_computed=computed,
                            n_reused=reused, columns=columns, grid=bool(grids), notes=notes)


def check_output_dir(out: Path, *, files: Iterable[str] = (), folders: Iterable[Path] = ()) -> Path:
    """Create the output folder ``out`` (and ``folders`` under it) and make sure it can be written,
    raising a :class:`~budro.exceptions.ValidationError` that names the path otherwise.

    ``files`` are names of files to be written in ``out``; one that exists as a folder is an error.
    Called before any data is loaded or model trained, so a bad output path fails in seconds.
    """
    out = Path(out)
    hint = "choose another folder with --output/-o (or experiment.output in the config)"
    for folder in [out, *sorted(set(folders))]:
        existing = next((p for p in [folder, *folder.parents] if p.exists()), None)
        if existing is not None and not existing.is_dir():
            if existing == out:
                raise ValidationError(f"the output folder {str(out)!r} is an existing file, not a folder: {hint}")
            raise ValidationError(f"{str(existing)!r} is an existing file where the experiment needs a folder (for "
                                  f"{str(folder)!r}, output folder {str(out)!r}): remove it or {hint}")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValidationError(f"cannot create the output folder {str(folder)!r}: {exc.strerror or exc}; {hint}") from None
    for name in files:
        target = out / name
        if target.is_dir():
            raise ValidationError(f"the output file {str(target)!r} is an existing folder: remove it or {hint}")
    for folder in [out, *sorted(set(folders))]:
        try:
            fd, probe = tempfile.mkstemp(prefix=".budro-write-test-", dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise ValidationError(f"the output folder {str(folder)!r} is not writable ({exc.strerror or exc}); {hint}") from None
    return out


def input_files(cfg: Config) -> dict[str, Path]:
    """Every input file the config's ``[data]`` section reads: name -> path.

    A file path in the section (``path``, e.g. a CSV or parquet file) is named as written in the
    config; the raw files of a built-in data set (``german``, ``adult``, ``compas``) by their path
    in the data home (e.g. ``german/german.data``), those present there.
    """
    from budro.datasets import DATA_FILES, get_data_home

    data = cfg.data or {}
    found: dict[str, Path] = {}
    for key, value in data.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        if key == "path" or key.endswith("_path") or key == "paths":
            for v in values:
                if isinstance(v, str):
                    path = Path(os.path.expandvars(v)).expanduser()  # as the data sources read it
                    found[v] = path if path.is_absolute() else cfg.base_dir / path
    source = data.get("source")
    if isinstance(source, str) and any(name.startswith(source + "/") for name in DATA_FILES):
        home = get_data_home(data.get("data_home"))
        for name in DATA_FILES:
            if name.startswith(source + "/"):
                path = home.joinpath(*name.split("/"))
                if path.is_file():
                    found[name] = path
    return found


def input_digests(cfg: Config) -> dict[str, str]:
    """SHA-256 (hex, read in 1 MiB chunks) of every file of :func:`input_files`."""
    from budro.datasets._home import sha256_of

    out = {}
    for name, path in sorted(input_files(cfg).items()):
        try:
            out[name] = sha256_of(path)
        except OSError as exc:
            raise ConfigError(f"cannot read the input file {str(path)!r} (data section): {exc.strerror or exc}") from None
    return out


def _output_dir(cfg: Config, output: Any) -> Path:
    if output is not None:
        return Path(output)
    configured = (cfg.experiment or {}).get("output")
    if configured:
        path = Path(configured)
        return path if path.is_absolute() else cfg.base_dir / path
    return Path("results") / "experiment"


def _grid_points(grid: Mapping[str, list] | None) -> list[tuple[tuple[str, Any], ...]]:
    if not grid:
        return [()]
    keys = list(grid)
    return [tuple(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def _run_unit(cfg: Config, unit: Unit, train: Any, test: Any, client: Any = None) -> dict[str, Any]:
    """One fit and its evaluation; with a ``client`` (config ``[cluster]``) BuDRO is fitted by
    :class:`budro.dask.DaskBuDROClassifier` on it and evaluated as its single-machine model."""
    from budro.estimator import BuDROClassifier
    from budro.evaluation import GroupGapWarning, evaluate

    overrides = grid_overrides(cfg, unit.label, unit.point_dict) if unit.point else {}
    est = cfg.make_method(unit.label, **overrides)
    t0 = time.perf_counter()
    if client is not None and type(est) is BuDROClassifier:
        from budro.dask._cluster import fit_on_cluster

        est = fit_on_cluster(est, train.X, train.y, client, cfg.cluster).to_local()
    else:
        est.fit(train.X, train.y)
    fit_seconds = time.perf_counter() - t0
    exp = cfg.experiment or {}
    metric = eps = None
    cert_params: dict[str, Any] = {}
    if exp.get("certificate"):
        metric, embedding, nn_scale = _certificate_metric(cfg, train)
        eps = exp.get("certificate_eps")
        if eps is None:
            eps = cfg.eps if nn_scale is None else cfg.eps * nn_scale
        cert_params = {"solver": exp.get("certificate_solver") or "dual", "random_state": unit.seed,
                       "loss": exp.get("certificate_loss") or "log_loss"}
        if embedding is not None:
            cert_params["metric_X"] = embedding(test.X)
        if exp.get("certificate_n_neighbors"):
            cert_params["n_neighbors"] = exp["certificate_n_neighbors"]
        if exp.get("certificate_max_samples"):
            cert_params["max_samples"] = exp["certificate_max_samples"]
    t1 = time.perf_counter()
    with warnings.catch_warnings():
        # a gap that cannot be computed on this split is NaN; the run reports it once (_gap_notes)
        warnings.simplefilter("ignore", GroupGapWarning)
        row = evaluate(est, test, metric=metric, eps=eps, certificate_params=cert_params or None)
    row = {k: _plain(v) for k, v in row.items()}
    row["fit_seconds"] = fit_seconds
    row["eval_seconds"] = time.perf_counter() - t1
    row.update(budget_used(est))
    return row


def budget_used(est: Any) -> dict[str, Any]:
    """The budget a BuDRO fit's adversary actually used, from its rounds (``history_``):
    ``budget_used_mean`` / ``budget_used_max``, the mean and largest ``transport_cost / eps`` over
    the rounds, and ``rounds_over_budget``, the rounds whose cost exceeds ``eps`` beyond rounding
    (``1e-9 eps``).  An exact solver uses at most the budget (1.0 where it binds); the paper's
    argmax adversary (solver ``paper``) may use more or less.  Also ``rounds_not_converged``, the
    rounds whose solver did not meet its own stopping rule (an exact solver stopped by a time or
    memory budget: its plan is feasible but not certified optimal), and ``largest_round_gap``,
    the largest gap a round reported (``record.gap``: how far its robust loss may lie below the
    optimum, where the solver bounds it).  Empty for a model without transport rounds (the
    baselines); the ratios are NaN at ``eps = 0``."""
    history = getattr(est, "history_", None)
    eps = getattr(est, "eps_effective_", None)
    if not history or eps is None:
        return {}
    eps = float(eps)
    costs = np.array([float(r.transport_cost) for r in history])
    ratios = costs / eps if eps > 0.0 else np.full(costs.size, math.nan)
    gaps = np.array([float(getattr(r, "gap", math.nan)) for r in history])
    return {"budget_used_mean": float(ratios.mean()), "budget_used_max": float(ratios.max()),
            "rounds_over_budget": int(np.count_nonzero(costs > eps * (1.0 + 1e-9) + 1e-12)),
            "rounds_not_converged": int(sum(not bool(getattr(r, "converged", True)) for r in history)),
            "largest_round_gap": float(np.nanmax(gaps)) if np.isfinite(gaps).any() else math.nan}


def _certificate_metric(cfg: Config, train: Any):
    """``(metric, embedding, nn_scale)``: the configured fair metric fitted on the training split
    (the same for every method), the function giving new rows in its coordinates (None: the rows
    themselves, numeric), and the split's nearest-neighbour scale when ``eps_unit = "nn"`` (the
    default certificate eps is then ``eps`` of those units, as BuDRO trains with, else ``eps``).

    A raw table (strings, categories, missing values) is embedded as BuDRO embeds it: a
    :class:`budro.tables.TableEncoder` fitted on the training rows, the metric learned on its
    ``metric_matrix`` (numerics imputed and standardised, categoricals one-hot, every one-hot column
    of a protected column protected), so the certificate measures every method with BuDRO's own
    fair metric.  Prepared numeric data is used as it is."""
    from budro import registry
    from budro.tables import TableEncoder, table_needs_encoding

    protected = list(cfg.protected) or list(train.protected)
    learner = registry.create("fair_metric", cfg.fair_metric, **dict(cfg.fair_metric_params))
    embedding = None
    if table_needs_encoding(train.X):
        encoder = TableEncoder().fit(train.X, protected=protected, native_categorical=False)
        X_metric, idx = encoder.metric_matrix(train.X), list(encoder.protected_metric_indices_)
        embedding = encoder.metric_matrix
        y = np.unique(np.asarray(train.y), return_inverse=True)[1]
    else:
        names = list(train.X.columns)
        idx = [names.index(p) if isinstance(p, str) else int(p) for p in protected]
        X_metric, y = train.X.to_numpy(dtype=float), np.asarray(train.y)
    metric = learner.fit(X_metric, idx, y=y)
    nn_scale = None
    if cfg.eps_unit == "nn":
        from budro.budget import diagnose_budget

        # the unit BuDRO itself converts eps with (its sample seeded by random_state or 0)
        nn_scale = diagnose_budget(metric, X_metric, np.asarray(train.y), random_state=cfg.random_state or 0).nn_scale
    return metric, embedding, nn_scale


# ---------------------------------------------------------------------------------- result files


def _canonical(cfg: Config, unit: Unit) -> Unit:
    """A grid point equal to the method's configured parameters shares the plain run's files."""
    if not unit.point:
        return unit
    _, params = cfg.method_spec(unit.label)
    changed = {**params, **grid_overrides(cfg, unit.label, unit.point_dict)}
    return Unit(unit.label, unit.split, unit.seed) if changed == params else unit


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", text).strip("_") or "_"


def _unit_path(out: Path, unit: Unit) -> Path:
    base = out / "runs" / _slug(unit.label)
    if unit.point:
        name = unit.point_name
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        base = base / "grid" / f"{_slug(name)[:80]}-{digest}"
    return base / f"split-{unit.split:03d}.json"


def _fingerprint(cfg: Config, unit: Unit, inputs: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What a result file must match to be reused: ``config`` (a digest of the method, its
    parameters, the data section and the split), the input files' digests and the budro version."""
    from budro import __version__

    name, params = cfg.method_spec(unit.label)
    if unit.point:
        params.update(grid_overrides(cfg, unit.label, unit.point_dict))
    exp = cfg.experiment or {}
    payload = {
        "version": RESULT_VERSION,
        "method": name,
        "params": params,
        "data": cfg.data,
        "test_size": exp.get("test_size", 0.2),
        "stratify": exp.get("stratify", True),
        "seed": unit.seed,
        "certificate": {k: v for k, v in exp.items() if k.startswith("certificate")} | (
            {"eps": cfg.eps, "fair_metric": cfg.fair_metric, "fair_metric_params": cfg.fair_metric_params,
             "protected": cfg.protected} if exp.get("certificate") else {}) | (
            {"eps_unit": cfg.eps_unit} if exp.get("certificate") and cfg.eps_unit != "raw" else {}),
    }
    if cfg.cluster is not None and name == "budro":  # a distributed fit depends on its partitions
        from budro.dask._cluster import fingerprint_params

        payload["cluster"] = fingerprint_params(cfg.cluster)
    text = json.dumps(payload, sort_keys=True, default=repr)
    config = hashlib.sha256(text.encode()).hexdigest()
    inputs = dict(sorted((inputs or {}).items()))
    whole = json.dumps({"config": config, "inputs": inputs, "budro_version": __version__}, sort_keys=True)
    return {"fingerprint": hashlib.sha256(whole.encode()).hexdigest(), "config": config, "inputs": inputs,
            "budro_version": __version__}


def _read_unit(path: Path, stamp: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """``(metrics, None)`` when ``path`` holds a reusable result; ``(None, why)`` when it holds a
    result of the same configuration that is stale (changed input file, other budro version);
    ``(None, None)`` when there is none (or it belongs to another configuration)."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, None
    if not isinstance(payload, dict) or not isinstance(payload.get("metrics"), dict):
        return None, None
    if payload.get("fingerprint") == stamp["fingerprint"]:
        return payload["metrics"], None
    if payload.get("config") != stamp["config"]:
        if "config" not in payload and "fingerprint" in payload:
            return None, "they were written by an older budro without input checksums"
        return None, None  # another configuration (a changed parameter): recomputed without comment
    old, new = payload.get("inputs") or {}, stamp["inputs"]
    changed = [name for name in new if name in old and old[name] != new[name]]
    added = [name for name in new if name not in old]
    removed = [name for name in old if name not in new]
    reasons = []
    if changed:
        reasons.append(f"input file(s) changed since they were computed: {', '.join(changed)}")
    if added or removed:
        reasons.append(f"the input files differ ({', '.join([*(f'+{a}' for a in added), *(f'-{r}' for r in removed)])})")
    if payload.get("budro_version") != stamp["budro_version"]:
        reasons.append(f"budro version changed ({payload.get('budro_version')} -> {stamp['budro_version']})")
    return None, "; ".join(reasons) or "their fingerprint differs"


def _write_unit(path: Path, stamp: Mapping[str, Any], unit: Unit, row: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**stamp, "method": unit.label, "split": unit.split, "seed": unit.seed,
               "point": unit.point_dict, "metrics": dict(row)}
    # atomic: an interrupted write never leaves a half file that a later resume would trust
    write_text(path, json.dumps(payload, indent=1, default=_plain, allow_nan=True))


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically
    (:func:`budro._archive.write_atomic`); an interruption leaves the old file (or none), never
    half a file."""
    from budro._archive import write_atomic

    return write_atomic(path, text.encode("utf-8"))


# ---------------------------------------------------------------------------------- summaries


def metric_columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The metric columns in table order: accuracy, balanced accuracy, consistency scores, gaps per
    group (Gap_Max then Gap_RMS), certificate, training time."""
    seen: list[str] = []
    for row in rows:
        for key, value in row.items():
            if key not in seen and _is_number(value) and key not in ("split", "seed", "n_samples") and not key.startswith("param:"):
                seen.append(key)
    groups = [k[len("gap_max["):-1] for k in seen if k.startswith("gap_max[")]
    order = [k for k in ("accuracy", "balanced_accuracy") if k in seen]
    order += [k for k in seen if k.startswith("consistency[")]
    for g in groups:
        order += [k for k in (f"gap_max[{g}]", f"gap_rms[{g}]") if k in seen]
    order += [k for k in ("certificate",) if k in seen]
    order += [k for k in ("fit_seconds",) if k in seen]
    order += [k for k in seen if k not in order and k not in ("eval_seconds",) and not k.startswith(("certificate_", "robust_loss", "empirical_loss"))]
    return order


def missing_metric_notes(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per (method, grid point, metric) that is NaN on some split, e.g. a group gap on a
    test split holding only one of the two groups: how many splits, and that the tables average
    over the others.  A group's ``gap_max``/``gap_rms`` pair is one line."""
    shown = set(metric_columns(rows))  # the tables' columns (not the optional interval bounds)
    counts: dict[tuple[str, str, bool], list[int]] = {}  # -> [splits with a NaN, splits]
    for row in rows:
        label = str(row.get("method")) + (f" [{row['point']}]" if row.get("point") else "")
        seen: dict[tuple[str, str, bool], bool] = {}
        for key, value in row.items():
            if key not in shown or not _is_number(value):
                continue
            m = re.fullmatch(r"gap_(?:max|rms)\[(.+)\]", key)
            what = (label, f"the gaps of group {m.group(1)!r}" if m else repr(key), bool(m))
            seen[what] = seen.get(what, False) or math.isnan(float(value))
        for what, nan in seen.items():
            entry = counts.setdefault(what, [0, 0])
            entry[0] += nan
            entry[1] += 1
    notes = []
    for (label, name, is_gap), (bad, total) in counts.items():
        if not bad:
            continue
        why = " (the test part held only one of the two groups, or a group had no row of some label)" if is_gap else ""
        rest = (f"mean and std over the other {total - bad}, marked ({total - bad}/{total}) in the tables"
                if bad < total else "no mean, '-' in the tables")
        notes.append(f"{label}: {name} could not be computed on {bad} of {total} split(s){why}; {rest}")
    return notes


def summarize(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard deviation (``ddof=1``; NaN for one split) of every numeric metric,
    per method and grid point, in the order of first appearance.

    A metric that is NaN on some splits (a group gap on a test split holding one group only) is
    averaged over the splits where it is a number; ``<metric>_n`` then says over how many (present
    only when that is fewer than ``n_splits`` and more than 0), and :func:`markdown_table` shows
    ``(k/n)`` in the cell.  :func:`missing_metric_notes` words it for the run's notes."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["method"], row.get("point", "")), []).append(row)
    out = []
    for (label, point), members in groups.items():
        entry: dict[str, Any] = {"method": label, "point": point, "n_splits": len(members)}
        for key, value in members[0].items():
            if key.startswith("param:"):
                entry[key] = value
        keys = [k for k in members[0] if k not in ("method", "point", "split", "seed") and not k.startswith("param:")]
        for key in keys:
            values = np.array([m.get(key, math.nan) for m in members], dtype=float) if all(
                _is_number(m.get(key)) for m in members) else None
            if values is None:
                continue
            finite = values[np.isfinite(values)]
            entry[f"{key}_mean"] = float(finite.mean()) if finite.size else math.nan
            entry[f"{key}_std"] = float(finite.std(ddof=1)) if finite.size > 1 else math.nan
            if 0 < finite.size < values.size:
                entry[f"{key}_n"] = int(finite.size)
        out.append(entry)
    return out


def format_mean_std(mean: float, std: float, digits: int = 3) -> str:
    if mean is None or not math.isfinite(mean):
        return "-"
    if std is None or not math.isfinite(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _title(key: str) -> str:
    if key in TITLES:
        return TITLES[key]
    m = re.fullmatch(r"consistency\[(.+)\]", key)
    if m:
        return m.group(1)
    m = re.fullmatch(r"gap_(max|rms)\[(.+)\]", key)
    if m:
        return f"{m.group(2)} Gap_{m.group(1).capitalize() if m.group(1) == 'max' else 'RMS'}"
    return key


def markdown_table(summary: Sequence[Mapping[str, Any]], columns: Sequence[str], *, with_point: bool = False,
                   first: str = "Method") -> str:
    """A markdown table, one row per method (and grid point), cells ``mean ± std``; ``(k/n)`` after
    a cell: the metric is a number on k of the n splits only, and averaged over those."""
    head = [first] + (["Parameters"] if with_point else []) + [_title(c) for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    for entry in summary:
        cells = [str(entry["method"])] + ([entry.get("point") or "(config)"] if with_point else [])
        for c in columns:
            digits = 1 if c in ("fit_seconds", "rounds_over_budget", "rounds_not_converged") else 3
            cell = format_mean_std(entry.get(f"{c}_mean", math.nan), entry.get(f"{c}_std", math.nan), digits)
            if f"{c}_n" in entry:  # a number on only some of the splits
                cell += f" ({entry[f'{c}_n']}/{entry['n_splits']})"
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write dicts as CSV (the union of their keys, in first-seen order)."""
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=keys)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_value(row.get(k)) for k in keys})
    return write_text(path, buffer.getvalue())


def _header(cfg: Config, dataset: Any, n_splits: int, seed0: int, command: str | None) -> str:
    exp = cfg.experiment or {}
    title = exp.get("title") or f"{dataset.name or 'data'}"
    test = float(exp.get("test_size", 0.2))
    lines = [f"# {title}", ""]
    lines.append(f"Mean ± standard deviation (ddof = 1) over {n_splits} random {round(100 * (1 - test))}/{round(100 * test)} "
                 f"splits{' (stratified by label)' if exp.get('stratify', True) else ''}, split seeds {seed0}..{seed0 + n_splits - 1}; "
                 f"metrics on the test part.")
    if command:
        lines += ["", f"Command: `{command}`"]
    return "\n".join(lines) + "\n\n"


# ---------------------------------------------------------------------------------- trade-off plot


def plot_tradeoff(summary: Sequence[Mapping[str, Any]], path: str | os.PathLike, *, x: str = "balanced_accuracy",
                  bin_width: float | None = None, gridded: Sequence[str] = (), title: str | None = None) -> Path:
    """Accuracy against every group's Gap_RMS and every consistency score (paper, Figures 3-4).

    Each gridded method is a line through its grid points sorted by accuracy (with ``bin_width``:
    the accuracy axis is cut into bins of that width and in each bin only the point with the best
    value of the panel's metric is kept, as in the paper); each other method is one point.  Error
    bars are one standard deviation over the splits.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    keys = [k[: -len("_mean")] for k in (summary[0] if summary else {}) if k.endswith("_mean")]
    panels = [k for k in keys if k.startswith("gap_rms[")] + [k for k in keys if k.startswith("consistency[")]
    if not panels:
        panels = [k for k in keys if k not in (x, "fit_seconds", "eval_seconds", "n_samples")][:1]
    ncols = min(2, max(1, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 4.0 * nrows), squeeze=False)
    labels = list(dict.fromkeys(e["method"] for e in summary))
    colors = {label: f"C{i}" for i, label in enumerate(labels)}
    for ax, key in zip(axes.flat, panels):
        lower_is_better = key.startswith("gap")
        for label in labels:
            members = [e for e in summary if e["method"] == label]
            pts = [(e.get(f"{x}_mean"), e.get(f"{x}_std"), e.get(f"{key}_mean"), e.get(f"{key}_std"), e.get("point") or "")
                   for e in members]
            pts = [p for p in pts if p[0] is not None and p[2] is not None and math.isfinite(p[0]) and math.isfinite(p[2])]
            if not pts:
                continue
            if label in gridded and bin_width:
                best: dict[int, tuple] = {}
                for p in pts:
                    b = int(math.floor(p[0] / bin_width))
                    if b not in best or (p[2] < best[b][2] if lower_is_better else p[2] > best[b][2]):
                        best[b] = p
                pts = list(best.values())
            pts.sort(key=lambda p: p[0])
            xs, xe, ys, ye = (np.array([p[i] for p in pts], dtype=float) for i in range(4))
            style = "-o" if label in gridded and len(pts) > 1 else "s"
            ax.errorbar(xs, ys, yerr=np.nan_to_num(ye), xerr=None if label in gridded else np.nan_to_num(xe),
                        fmt=style, color=colors[label], label=label, capsize=3, markersize=5)
            if label in gridded and len(pts) <= 12:
                for p in pts:  # name each grid point (e.g. eps=0.3)
                    ax.annotate(p[4], (p[0], p[2]), textcoords="offset points", xytext=(4, 4), fontsize=7,
                                color=colors[label])
        ax.set_xlabel(_title(x))
        ax.set_ylabel(_title(key))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(f"{title}: accuracy vs fairness")
    fig.tight_layout()
    from budro._archive import save_figure

    try:
        return save_figure(fig, path, dpi=120)  # atomic, like every result file
    finally:
        plt.close(fig)


# ---------------------------------------------------------------------------------- CLI helpers


def parse_grid_arguments(cfg: Config, specs: Sequence[str]) -> dict[str, dict[str, list]]:
    """``["BuDRO.eps=0.1,0.2", "eps=0.5,1"]`` -> ``{"BuDRO": {"eps": [...]}}``.

    ``LABEL.PARAM=V1,V2,...`` sets the grid of one method; ``PARAM=...`` without a label applies to
    every ``budro`` method of the experiment.  Plugin parameters are dotted:
    ``BuDRO.backend.max_depth=2,4``.  Values are read as int, float, true/false or text.
    """
    labels = cfg.method_labels()
    out: dict[str, dict[str, list]] = {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not key or not values:
            raise ConfigError(f"--grid {spec!r}: expected LABEL.PARAM=V1,V2,... or PARAM=V1,V2,...")
        head, _, rest = key.partition(".")
        if head in labels and rest:
            targets, param = [head], rest
        else:
            targets = [label for label in labels if cfg.method_spec(label)[0] == "budro"]
            param = key
            if not targets:
                raise ConfigError(f"--grid {spec!r}: no budro method to apply it to; write LABEL.{key}=... with one of: {', '.join(labels)}")
        parsed = [_parse_value(v) for v in values.split(",")]
        for label in targets:
            out.setdefault(label, {})[param] = parsed
    return out


def _parse_value(text: str) -> Any:
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


class _Progress:
    """The experiment's progress bar, drawn by :mod:`tqdm` on stderr (or the given stream), as
    :class:`budro.progress.ProgressBar` draws training's: units done of all, elapsed time and
    tqdm's estimate of the time left (from the computed units; cached ones are counted at once),
    and the unit just finished::

        experiment:  42%|████▏     | 5/12 [00:03<00:05, split=2, method=BuDRO [eps=0.3], fit=0.6 s]

    Units reused from earlier runs (``cached``) count as done from the start, so the rate and the
    time left come from the units computed now.  Not on a terminal (a log file) it writes a line
    at most every 5 s, and the final one.
    """

    def __init__(self, total: int, progress: bool | TextIO, cached: int = 0):
        from tqdm import tqdm

        enabled = progress is not False and progress is not None
        stream = sys.stderr if progress is True or not enabled else progress
        params: dict[str, Any] = {}
        if not bool(getattr(stream, "isatty", lambda: False)()):
            params["mininterval"] = 5.0
        self._bar = tqdm(total=max(int(total), 1), initial=int(cached), desc="experiment", unit="fit", file=stream,
                         disable=not enabled, dynamic_ncols=True, **params)

    def update(self, unit: Unit, *, cached: bool = False, seconds: float | None = None) -> None:
        what = unit.label + (f" [{unit.point_name}]" if unit.point else "")
        info = "cached" if cached else (f"{seconds:.1f} s" if seconds is not None else "")
        self._bar.set_postfix({"split": unit.split, "method": what, "fit": info}, refresh=False)
        if cached:
            self._bar.refresh()  # counted at the start
        else:
            self._bar.update(1)

    def close(self) -> None:
        self._bar.close()


def _fmt_value(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


def _csv_value(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return ""
    return value
