"""Audit any saved classifier on one of budro's data sets: accuracy, consistency, group gaps and the
fairness certificate (:func:`budro.evaluation.evaluate`).

``budro audit MODEL --data german`` accepts

* a budro model file (:func:`budro.persist.save_model`, e.g. from ``budro fit``);
* a scikit-learn-style classifier (``predict``, and ``predict_proba`` for the certificate) saved
  by skops (``.skops``, default trusted types only), or pickled / joblib-dumped (only with
  ``--trust-pickle``): a scikit-learn random forest, an ``xgboost.XGBClassifier``, a pipeline, ...;
* an XGBoost model file (``.json`` / ``.ubj``, binary logistic), e.g. ``budro fit --native``.

The model must take the data set's encoding (the columns of ``budro.datasets.load_<name>()``),
standardised as budro standardises it: with ``--split-seed S`` the test part of the 80/20 split
that ``Dataset.train_test_split(0.2, random_state=S)`` draws (as ``budro experiment`` does),
standardised with the training part's statistics; otherwise every row, standardised with the
statistics of all rows (``standardize=False`` for a model trained on the raw encoding).  The fair
metric of the certificate is learned on the training part (or on all rows).

Loading runs no code stored in the file, except for pickles, which are read only with
``trust_pickle=True`` (``budro audit --trust-pickle``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from budro.exceptions import ValidationError

__all__ = ["AuditReport", "audit", "audit_dataset", "audit_table", "load_any_model", "DATASETS", "PAPER_EPS"]

#: Data sets an audit can name.
DATASETS = ("german", "adult", "compas", "synthetic")
#: The transport budget the paper used per data set (the certificate's default eps for models
#: that do not carry their own).
PAPER_EPS = {"german": 1.0, "adult": 0.4, "compas": 0.12, "synthetic": 0.01}


@dataclass
class AuditReport:
    """What :func:`audit` found."""

    metrics: dict[str, float]
    model: str
    data: str
    rows: str
    eps: float | None
    eps_source: str = ""
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        lines = [f"model: {self.model}", f"data:  {self.data} ({self.rows})"]
        if self.eps is not None:
            lines.append(f"certificate eps: {self.eps:g} ({self.eps_source})")
        lines += self.notes
        width = max(len(k) for k in self.metrics) if self.metrics else 0
        lines.append("")
        for key, value in self.metrics.items():
            shown = f"{value:.4f}" if isinstance(value, float) else str(value)
            lines.append(f"  {key.ljust(width)}  {shown}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "data": self.data, "rows": self.rows, "eps": self.eps,
                "eps_source": self.eps_source, "notes": list(self.notes),
                "metrics": {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.metrics.items()}}


# ---------------------------------------------------------------------------------- loading models


class XGBoostBoosterClassifier:
    """A plain ``xgboost.Booster`` (binary logistic or multi-class softprob) as a classifier."""

    def __init__(self, booster: Any):
        self.booster = booster
        self.n_features_in_ = int(booster.num_features())
        objective = _xgb_objective(booster)
        self.multiclass = objective.startswith("multi:")
        if not (self.multiclass or objective in ("binary:logistic", "reg:logistic", "")):
            raise ValidationError(f"XGBoost model with objective {objective!r} is not a probabilistic classifier")
        n_classes = int(_xgb_num_class(booster)) if self.multiclass else 2
        self.classes_ = np.arange(n_classes)

    def predict_proba(self, X: Any) -> np.ndarray:
        p = np.asarray(self.booster.inplace_predict(np.asarray(X, dtype=np.float64)), dtype=np.float64)
        if self.multiclass:
            return p.reshape(p.shape[0], -1)
        p = p.reshape(-1)
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def __repr__(self) -> str:
        return f"xgboost.Booster({len(self.classes_)} classes, {self.n_features_in_} features)"


def _xgb_objective(booster: Any) -> str:
    import json

    try:
        return str(json.loads(booster.save_config())["learner"]["objective"]["name"])
    except Exception:  # pragma: no cover - defensive, old model formats
        return ""


def _xgb_num_class(booster: Any) -> int:
    import json

    return int(json.loads(booster.save_config())["learner"]["learner_model_param"]["num_class"])


def load_any_model(path: str | Path, *, trust_pickle: bool = False) -> Any:
    """A classifier from a model file; no code stored in the file runs unless ``trust_pickle``.

    * a budro model archive (:func:`budro.persist.save_model`): read by :func:`budro.persist.load_model`;
    * an XGBoost model, ``.json`` or ``.ubj``: its trees are checked (split and child indices in
      range, :func:`budro.backends.xgboost.check_xgboost_json`) before it predicts anything;
    * a skops file (``.skops``, :func:`skops.io.dump`): loaded with skops's default trusted types
      only; a file holding other types is refused with the list of them;
    * a pickle or joblib file (a scikit-learn model, or a budro model saved before the archive
      format): only with ``trust_pickle=True`` (``budro audit --trust-pickle``), because unpickling
      runs code stored in the file.

    Every failure raises :class:`~budro.exceptions.ValidationError` naming the file.
    """
    import zipfile

    from budro._archive import MANIFEST, is_zip
    from budro.exceptions import ModelFileError
    from budro.persist import load_model, load_pickle

    path = Path(path)
    label = str(path)
    if not path.is_file():
        raise ValidationError(f"model file {label!r} does not exist")
    if path.suffix.lower() in (".json", ".ubj"):
        return _load_xgboost_file(path)
    try:
        zipped = is_zip(path)
        names = set(zipfile.ZipFile(path).namelist()) if zipped else set()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, NotImplementedError) as exc:
        raise ModelFileError(f"{label!r} cannot be read as a model file: {exc}") from None
    if MANIFEST in names:
        return load_model(path)
    if "schema.json" in names:
        model = _load_skops(path)
    elif zipped:
        raise ModelFileError(f"{label!r} is a zip file but neither a budro model archive ({MANIFEST}) nor a skops file "
                             "(schema.json)")
    elif not trust_pickle:
        raise ModelFileError(
            f"{label!r} is not a budro model archive, an XGBoost .json/.ubj or a skops file; if it is a pickle or joblib "
            "file, note that unpickling runs code stored in the file, so budro audit does not read pickles by default. "
            "If you trust the file's author, pass --trust-pickle (Python: load_any_model(path, trust_pickle=True)); "
            "safer formats: budro's own model files, XGBoost JSON, or skops (skops.io.dump)"
        )
    else:
        model = load_pickle(path)  # runs code stored in the file: the caller trusts its author
    if not callable(getattr(model, "predict", None)):
        raise ValidationError(f"{label!r} holds a {type(model).__name__}, not a classifier with predict()")
    return model


def _load_xgboost_file(path: Path) -> "XGBoostBoosterClassifier":
    """An XGBoost JSON/UBJ model whose trees pass :func:`check_xgboost_json` (XGBoost does not
    bounds-check the indices of a model file when it predicts).  JSON is checked before XGBoost
    reads it; UBJ is read by XGBoost, converted to JSON and checked before it predicts."""
    import json

    import xgboost

    from budro.backends.xgboost import check_xgboost_json
    from budro.exceptions import ModelFileError

    label = str(path)
    try:
        if path.suffix.lower() == ".json":
            raw = path.read_bytes()
            try:
                check_xgboost_json(json.loads(raw), None)
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                if isinstance(exc, ValidationError):
                    raise
                raise ValidationError(f"not JSON ({exc})") from None
            booster = xgboost.Booster()
            booster.load_model(bytearray(raw))
        else:
            raw = _ubj_to_json(path)
            check_xgboost_json(json.loads(raw), None)
            booster = xgboost.Booster()
            booster.load_model(bytearray(raw))
    except (ValidationError, xgboost.core.XGBoostError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelFileError(f"{label!r} is not a usable XGBoost model file: {text}") from None
    return XGBoostBoosterClassifier(booster)


#: Converts an XGBoost UBJ model file to JSON on stdout (run in a child process, see _ubj_to_json).
_UBJ_TO_JSON = (
    "import sys, xgboost\n"
    "b = xgboost.Booster(model_file=sys.argv[1])\n"
    "sys.stdout.buffer.write(bytes(b.save_raw('json')))\n"
)


def _ubj_to_json(path: Path, timeout: float = 120.0) -> bytes:
    """The JSON form of an XGBoost UBJ file, converted by XGBoost in a child process.

    XGBoost's UBJ parser does not bounds-check a damaged or crafted file and can crash the process
    that reads it; budro has no UBJ parser of its own, so the file is parsed in a child process and
    only the JSON it prints (checked by :func:`check_xgboost_json` before XGBoost loads it here)
    reaches budro's process.  A child that dies or fails gives a ValidationError.
    """
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", _UBJ_TO_JSON, str(path)], capture_output=True, timeout=timeout,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        raise ValidationError(f"XGBoost did not finish reading the UBJ file within {timeout:g} s") from None
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = err[-1] if err else (f"the reader died with signal {-done.returncode}" if done.returncode < 0
                                   else f"exit status {done.returncode}")
        raise ValidationError(f"XGBoost could not read the UBJ file: {why}")
    return done.stdout


def _load_skops(path: Path) -> Any:
    """A skops file, with skops's default trusted types only."""
    import skops.io as sio

    from budro.exceptions import ModelFileError

    label = str(path)
    try:
        untrusted = sio.get_untrusted_types(file=path)
    except Exception as exc:  # skops raises many types on a damaged file
        raise ModelFileError(f"{label!r} is not a readable skops file: {type(exc).__name__}: {exc}") from None
    if untrusted:
        raise ModelFileError(
            f"{label!r} is a skops file holding types that skops does not trust by default: {', '.join(untrusted)}. "
            "budro audit loads skops files with the default trusted types only; if you have reviewed these types, "
            "load the model yourself (skops.io.load(path, trusted=[...])) and pass it to budro.audit.audit()"
        )
    try:
        return sio.load(path)
    except Exception as exc:  # skops raises many types on a damaged file
        raise ModelFileError(f"{label!r} is not a readable skops file: {type(exc).__name__}: {exc}") from None


class _Adapter:
    """Feeds the data set's DataFrames to a model the way it was trained: by column name when it
    knows its feature names, as a plain array otherwise."""

    def __init__(self, model: Any, columns: Sequence[str]):
        self.model = model
        names = getattr(model, "feature_names_in_", None)
        self.names = None if names is None else [str(c) for c in names]
        if self.names is not None:
            missing = [c for c in self.names if c not in columns]
            if missing:
                raise ValidationError(
                    f"the model was trained on columns this data set does not have: {missing[:5]!r}"
                    f"{' ...' if len(missing) > 5 else ''}; was it trained on this data set's encoding?"
                )
        else:
            n = getattr(model, "n_features_in_", None)
            if n is not None and int(n) != len(columns):
                raise ValidationError(
                    f"the model expects {int(n)} features, the data set has {len(columns)}; "
                    "was it trained on this data set's encoding (budro.datasets)?"
                )
        if hasattr(model, "classes_"):
            self.classes_ = model.classes_

    def _X(self, X: Any) -> Any:
        if self.names is not None:
            return X[self.names]
        return np.asarray(X, dtype=np.float64)

    def predict(self, X: Any) -> np.ndarray:
        return np.asarray(self.model.predict(self._X(X)))

    def predict_proba(self, X: Any) -> np.ndarray:
        return np.asarray(self.model.predict_proba(self._X(X)))


# ---------------------------------------------------------------------------------- audit


def _load_dataset(data: Any, data_home: str | None):
    from budro import datasets
    from budro.datasets import Dataset

    if isinstance(data, Dataset):
        return data
    if data not in DATASETS:
        raise ValidationError(f"unknown data set {data!r}; choose one of: {', '.join(DATASETS)}")
    loader = getattr(datasets, f"load_{data}")
    return loader() if data == "synthetic" or data_home is None else loader(data_home=data_home)


#: Suffixes read as parquet; every other file is read as delimited text (the config's csv source).
PARQUET_SUFFIXES = (".parquet", ".pq")
#: Options of the csv data source that :func:`audit` passes through ``read_options``.
READ_OPTIONS = ("header", "names", "separator", "na_values", "skip_rows", "strip_whitespace", "drop", "label_strip",
                "label_map")


def audit(
    model: Any,
    data: Any = None,
    *,
    label: str | None = None,
    read_options: Mapping[str, Any] | None = None,
    config: Any = None,
    counterfactuals: Mapping[str, Any] | None = None,
    groups: Mapping[str, Any] | None = None,
    trust_pickle: bool = False,
    **options: Any,
) -> AuditReport:
    """Evaluate ``model`` (a classifier, or a path for :func:`load_any_model`) on data ``data``:
    one of budro's data sets, or any table file.

    Parameters
    ----------
    model : classifier or path
    data : str, path or Dataset, optional
        A built-in data set name (:data:`DATASETS`) or :class:`~budro.datasets.Dataset`: see
        :func:`audit_dataset` for the options.  Or a table file, CSV/text or parquet (``.parquet``):
        read by the config's data sources (:mod:`budro.config`), then see :func:`audit_table`.
        Optional with ``config``, whose ``[data]`` section names the file.
    label : str, optional
        The label column of a table file (default: the config's ``data.label``).
    read_options : mapping, optional
        Options of the csv source (:data:`READ_OPTIONS`: ``header``, ``names``, ``separator``,
        ``na_values``, ``skip_rows``, ...), over the config's.
    config : path or Config, optional
        A config whose ``[data]`` section (and ``protected``, ``[counterfactuals]``, ``[groups]``)
        the audit reuses; ``data`` then only replaces the file's path.
    counterfactuals, groups : mapping, optional
        Flips and group definitions in the config's form (:func:`budro.evaluation.flips_from_config`,
        :func:`budro.evaluation.groups_from_config`), over the config's.
    trust_pickle : bool, default False
        Passed to :func:`load_any_model` when ``model`` is a path.
    **options :
        ``split_seed``, ``test_size``, ``certificate``, ``eps``, ``fair_metric``,
        ``fair_metric_params``, ``protected``, ``solver``, ``n_neighbors``, ``max_samples``,
        ``n_bootstrap``, ``random_state``; for built-in data sets also ``standardize`` and ``data_home``.
    """
    from budro.config import Config, load_config

    if isinstance(model, (str, Path)):
        model = load_any_model(model, trust_pickle=trust_pickle)
    cfg = None
    if config is not None:
        cfg = config if isinstance(config, Config) else load_config(config)
    builtin = cfg.data.get("source") if cfg is not None and cfg.data and cfg.data.get("source") in DATASETS else None
    if data is None and cfg is None:
        raise ValidationError("audit needs data: a data set name, a table file, or a config with a [data] section")
    table_args = (label, read_options, counterfactuals, groups)
    if _is_builtin(data) or (data is None and builtin is not None):
        if any(v is not None for v in table_args):
            raise ValidationError("label, read_options, counterfactuals and groups apply to table files, not to the "
                                  f"built-in data set {data if data is not None else builtin!r}")
        if cfg is not None and options.get("protected") is None and cfg.protected:
            options["protected"] = [p for p in cfg.protected if isinstance(p, str)] or None
        return audit_dataset(model, data if data is not None else builtin, **options)
    for key in ("standardize", "data_home"):
        if options.pop(key, None) not in (None, True):
            raise ValidationError(f"{key} applies to the built-in data sets, not to table files")
    table_cfg = _table_config(data, cfg, label, read_options, counterfactuals, groups, options.get("protected"))
    return audit_table(model, table_cfg, **options)


def _is_builtin(data: Any) -> bool:
    from budro.datasets import Dataset

    return isinstance(data, Dataset) or (isinstance(data, str) and data in DATASETS)


def _table_config(data: Any, cfg: Any, label: str | None, read_options: Mapping[str, Any] | None,
                  counterfactuals: Mapping[str, Any] | None, groups: Mapping[str, Any] | None,
                  protected: Sequence[str] | None):
    """A :class:`budro.config.Config` whose [data] section reads the table file."""
    from budro.config import DATA_SOURCES, parse_config

    section: dict[str, Any] = {}
    base_dir = Path.cwd()
    if cfg is not None:
        if not cfg.data or cfg.data.get("source") not in ("csv", "parquet"):
            if data is None:
                raise ValidationError("the config's [data] section names no table file (source = \"csv\" or \"parquet\")")
        else:
            section = dict(cfg.data)
        base_dir = cfg.base_dir
    if data is not None:
        path = Path(str(data)).expanduser()
        if not path.is_file():
            if isinstance(data, str) and "/" not in data and "." not in data:
                raise ValidationError(f"unknown data set {data!r}: not a built-in data set ({', '.join(DATASETS)}) "
                                      "nor an existing file")
            raise ValidationError(f"data file {str(path)!r} does not exist")
        source = "parquet" if path.suffix.lower() in PARQUET_SUFFIXES else "csv"
        allowed = DATA_SOURCES[source][0]
        section = {k: v for k, v in section.items() if k in allowed}
        section.update(source=source, path=str(path.resolve()))
    for key, value in dict(read_options or {}).items():
        if key not in READ_OPTIONS:
            raise ValidationError(f"read_options: unknown option {key!r}; options: {', '.join(READ_OPTIONS)}")
        if value is not None:
            section[key] = value
    if label is not None:
        section["label"] = label
    if "label" not in section:
        raise ValidationError("a table file needs its label column: pass label (budro audit --label COLUMN) or a config "
                              "with data.label")
    raw: dict[str, Any] = {"data": section}
    prot = list(protected) if protected else (list(cfg.protected) if cfg is not None else [])
    if prot:
        raw["protected"] = prot
    raw["counterfactuals"] = dict(counterfactuals) if counterfactuals is not None else {}
    raw["groups"] = dict(groups) if groups is not None else {}
    table_cfg = parse_config(raw, base_dir=base_dir)
    if cfg is not None:
        if counterfactuals is None:
            table_cfg.counterfactuals = dict(cfg.counterfactuals)
        if groups is None:
            table_cfg.groups = dict(cfg.groups)
    return table_cfg


def audit_table(
    model: Any,
    table: Any,
    *,
    split_seed: int | None = None,
    test_size: float = 0.2,
    certificate: bool = True,
    eps: float | None = None,
    fair_metric: str = "sensitive-subspace",
    fair_metric_params: Mapping[str, Any] | None = None,
    protected: Sequence[str] | None = None,
    solver: str = "dual",
    n_neighbors: int | None = None,
    max_samples: int | None = 5000,
    n_bootstrap: int = 0,
    random_state: int = 0,
) -> AuditReport:
    """Audit on a table file: ``table`` is a :class:`budro.config.Config` whose ``[data]`` section
    reads it (csv or parquet source), with ``protected``, ``counterfactuals`` and ``groups``.

    The model gets the table's columns as read (strings stay strings): a budro model with its own
    table encoding (``table_``), a scikit-learn pipeline, or a model of numeric columns (the columns
    it names in ``feature_names_in_`` are selected).  Reported: accuracy, balanced accuracy,
    consistency per flip (the config's ``[counterfactuals]``, else one per protected column with
    at most 20 values), group gaps per protected column (``[groups]`` or the defaults of
    :func:`budro.evaluation.table_fairness_definitions`) and the certificate.

    Certificate: a budro model's own fair metric (``fair_metric_``) applied to its own embedding of
    the rows (``model.metric_matrix``), budget the model's (``eps_effective_``, in squared fair
    distance) unless ``eps`` is given.  Another model: a fair metric learned on the training rows
    (all rows without ``split_seed``) embedded by a :class:`budro.tables.TableEncoder` fitted there
    (numerics standardised, categoricals one-hot), budget ``eps`` or one nearest-neighbour unit
    of that embedding (:mod:`budro.budget`).
    """
    from sklearn.model_selection import train_test_split

    from budro import registry
    from budro.budget import diagnose_budget
    from budro.evaluation import evaluate, table_fairness_definitions

    X, y = table.load_data()
    y = np.asarray(y)
    name = Path(table.data["path"]).name
    n = len(y)
    notes: list[str] = []
    prot = list(protected) if protected else [p for p in table.protected if isinstance(p, str)]
    if not prot and isinstance(getattr(model, "protected", None), (list, tuple)):
        prot = [p for p in model.protected if isinstance(p, str)]
    if split_seed is not None:
        try:
            train_rows, test_rows = train_test_split(np.arange(n), test_size=test_size, random_state=split_seed, stratify=y)
        except ValueError as exc:
            raise ValidationError(f"cannot split {name!r}: {exc}") from None
        rows = (f"test part of the {round(100 * (1 - test_size))}/{round(100 * test_size)} split with seed {split_seed}: "
                f"{len(test_rows)} rows")
    else:
        train_rows = test_rows = np.arange(n)
        rows = f"all {n} rows"
    X_train, y_train = X.iloc[train_rows].reset_index(drop=True), y[train_rows]
    X_test, y_test = X.iloc[test_rows].reset_index(drop=True), y[test_rows]
    groups, flips, fairness_notes = table_fairness_definitions(X_test, prot, flips=table.counterfactuals,
                                                                groups=table.groups)
    notes += fairness_notes
    adapter = _TableAdapter(model, list(X.columns))

    metric = cert_eps = None
    eps_source = ""
    cert_params: dict[str, Any] = {}
    if certificate:
        if not callable(getattr(model, "predict_proba", None)):
            notes.append("no certificate: the model has no predict_proba")
        else:
            if hasattr(model, "fair_metric_") and callable(getattr(model, "metric_matrix", None)):
                metric = model.fair_metric_
                Z_test = np.asarray(model.metric_matrix(adapter.frame(X_test)), dtype=float)
                own = getattr(model, "eps_effective_", None)
                own = own if isinstance(own, (int, float)) else getattr(model, "eps", None)
                if eps is not None:
                    cert_eps, eps_source = float(eps), "given"
                elif isinstance(own, (int, float)):
                    cert_eps, eps_source = float(own), _own_eps_source(model)
                notes.append("fair metric: the model's own, on its own embedding of the rows")
            else:
                from budro.tables import TableEncoder

                encoder = TableEncoder().fit(X_train, protected=tuple(prot), native_categorical=False)
                Z_train = encoder.metric_matrix(X_train)
                learner = registry.create("fair_metric", fair_metric, **dict(fair_metric_params or {}))
                metric = learner.fit(Z_train, list(encoder.protected_metric_indices_), y=y_train)
                Z_test = encoder.metric_matrix(X_test)
                notes.append(f"fair metric: {fair_metric} learned on the {'training part' if split_seed is not None else 'rows'}"
                             f" (protected: {', '.join(prot) or 'none'})")
                if eps is not None:
                    cert_eps, eps_source = float(eps), "given"
            if cert_eps is None:
                scale = diagnose_budget(metric, Z_test, y_test, random_state=random_state).nn_scale
                cert_eps, eps_source = scale, "one nearest-neighbour unit of these rows (budro.budget)"
            cert_params = {"solver": solver, "n_neighbors": n_neighbors, "max_samples": max_samples or None,
                           "n_bootstrap": n_bootstrap, "random_state": random_state, "metric_X": Z_test}
            if max_samples and len(y_test) > max_samples:
                notes.append(f"certificate on a random subsample of {max_samples} of the {len(y_test)} rows")
    result = evaluate(adapter, X_test, y_test, groups=groups, counterfactuals=flips, metric=metric, eps=cert_eps,
                      certificate_params=cert_params or None)
    metrics = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in result.items()}
    return AuditReport(metrics=metrics, model=_describe(model), data=name, rows=rows, eps=cert_eps,
                       eps_source=eps_source, notes=notes)


class _TableAdapter:
    """Feeds a raw table to a model: the columns it names (``feature_names_in_``) when it names them;
    else the table itself (a model with its own encoding) or, all numeric, a float array."""

    def __init__(self, model: Any, columns: Sequence[str]):
        self.model = model
        names = getattr(model, "feature_names_in_", None)
        self.names = None if names is None else [str(c) for c in names]
        if self.names is not None:
            missing = [c for c in self.names if c not in columns]
            if missing:
                raise ValidationError(f"the model was trained on columns this file does not have: {missing[:5]!r}"
                                      f"{' ...' if len(missing) > 5 else ''}; file columns: {', '.join(columns)}")
        if hasattr(model, "classes_"):
            self.classes_ = model.classes_

    def frame(self, X: Any) -> Any:
        return X[self.names] if self.names is not None else X

    def _X(self, X: Any) -> Any:
        X = self.frame(X)
        if self.names is None and getattr(self.model, "table_", None) is None and all(
                np.issubdtype(t, np.number) for t in getattr(X, "dtypes", [])):
            return X.to_numpy(dtype=np.float64)
        return X

    def predict(self, X: Any) -> np.ndarray:
        return np.asarray(self.model.predict(self._X(X)))

    def predict_proba(self, X: Any) -> np.ndarray:
        return np.asarray(self.model.predict_proba(self._X(X)))


def audit_dataset(
    model: Any,
    data: Any,
    *,
    split_seed: int | None = None,
    test_size: float = 0.2,
    standardize: bool = True,
    certificate: bool = True,
    eps: float | None = None,
    fair_metric: str = "sensitive-subspace",
    fair_metric_params: Mapping[str, Any] | None = None,
    protected: Sequence[str] | None = None,
    solver: str = "dual",
    n_neighbors: int | None = None,
    max_samples: int | None = 5000,
    n_bootstrap: int = 0,
    data_home: str | None = None,
    random_state: int = 0,
) -> AuditReport:
    """Evaluate ``model`` (a classifier, or a path for :func:`load_any_model`) on a built-in data set.

    Parameters
    ----------
    model : classifier or path
    data : str or Dataset
        ``"german"``, ``"adult"``, ``"compas"``, ``"synthetic"`` or a :class:`~budro.datasets.Dataset`.
    split_seed : int, optional
        Evaluate on the test part of ``train_test_split(test_size, random_state=split_seed)``
        (standardised with the training part); default: every row.
    standardize : bool, default True
        Standardise the continuous columns (False: the raw encoding).
    certificate : bool, default True
        Compute the fairness certificate (needs ``predict_proba``).
    eps : float, optional
        Certificate budget; default the model's own budget (a BuDRO model: ``eps_effective_``, else
        ``eps``), else the paper's value for the data set (:data:`PAPER_EPS`).
    fair_metric, fair_metric_params, protected :
        The fair metric of the certificate, learned on the training rows; ``protected`` defaults
        to the data set's protected attributes.
    solver, n_neighbors, max_samples, n_bootstrap :
        Passed to :func:`budro.evaluation.fairness_certificate` (``max_samples`` bounds its cost:
        the certificate is computed on a random subsample of at most that many rows).
    """
    from budro import registry
    from budro.evaluation import evaluate

    if isinstance(model, (str, Path)):
        model = load_any_model(model)
    ds = _load_dataset(data, data_home)
    notes: list[str] = []
    if split_seed is not None:
        train, test = ds.train_test_split(test_size, random_state=split_seed, standardize=standardize)
        rows = f"test part of the {round(100 * (1 - test_size))}/{round(100 * test_size)} split with seed {split_seed}: {test.n_samples} rows"
    else:
        everything = np.arange(ds.n_samples)
        train, _ = ds.split(everything, everything[:1], standardize=standardize)
        test = train
        rows = f"all {test.n_samples} rows"
    rows += ", standardised" if standardize and ds.continuous else ", raw encoding"
    adapter = _Adapter(model, list(test.X.columns))

    metric = cert_eps = None
    eps_source = ""
    cert_params: dict[str, Any] = {}
    if certificate:
        if not callable(getattr(model, "predict_proba", None)):
            notes.append("no certificate: the model has no predict_proba")
        else:
            if eps is not None:
                cert_eps, eps_source = float(eps), "given"
            elif isinstance(getattr(model, "eps_effective_", None), (int, float)):
                cert_eps, eps_source = float(model.eps_effective_), _own_eps_source(model)
            elif isinstance(getattr(model, "eps", None), (int, float)) and hasattr(model, "fair_metric_"):
                cert_eps, eps_source = float(model.eps), "the model's own eps"
            else:
                cert_eps = PAPER_EPS.get(ds.name, 0.1)
                eps_source = f"the paper's eps for {ds.name}" if ds.name in PAPER_EPS else "default"
            names = list(train.X.columns)
            prot = list(protected) if protected else list(ds.protected)
            missing = [p for p in prot if p not in names]
            if missing:
                raise ValidationError(f"protected attribute(s) {missing!r} are not columns of {ds.name!r}")
            learner = registry.create("fair_metric", fair_metric, **dict(fair_metric_params or {}))
            metric = learner.fit(train.X.to_numpy(dtype=float), [names.index(p) for p in prot], y=np.asarray(train.y))
            cert_params = {"solver": solver, "n_neighbors": n_neighbors, "max_samples": max_samples or None,
                           "n_bootstrap": n_bootstrap, "random_state": random_state}
            if max_samples and test.n_samples > max_samples:
                notes.append(f"certificate on a random subsample of {max_samples} of the {test.n_samples} rows")
    result = evaluate(adapter, test, metric=metric, eps=cert_eps, certificate_params=cert_params or None)
    metrics = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in result.items()}
    return AuditReport(metrics=metrics, model=_describe(model), data=ds.name or "data", rows=rows, eps=cert_eps,
                       eps_source=eps_source, notes=notes)


def _own_eps_source(model: Any) -> str:
    if getattr(model, "eps_unit", "raw") == "nn":
        return f"the model's own eps ({getattr(model, 'eps', '?')} nearest-neighbour units)"
    return "the model's own eps"


def _describe(model: Any) -> str:
    text = repr(model) if isinstance(model, XGBoostBoosterClassifier) else type(model).__name__
    backend = getattr(model, "backend", None)
    if isinstance(backend, str):
        text += f" (backend {backend}, eps {getattr(model, 'eps', '?')})"
    return text
