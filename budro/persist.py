"""Saving and loading fitted budro models: a documented zip archive that runs no code when read.

A ``.budro`` file is a zip archive (``docs/model-format.md`` describes it key by key)::

    manifest.json          format name and version, versions, the estimator's class and
                           parameters, its fitted attributes (classes, feature names, history, the
                           fair metric as numbers), the backend, and the SHA-256 and size of every
                           other member
    model/booster.<ext>    the booster in its library's own format (XGBoost JSON, LightGBM text,
                           CatBoost binary): plain XGBoost / LightGBM / CatBoost load it
    arrays/*.npy           numeric arrays held in parameters, read with allow_pickle=False
    table/*                the table preprocessor's state (``BuDROClassifier.table_``), if any

:func:`load_model` checks the whole file before any member reaches a parser: the zip, the
manifest (JSON, format, version, value types and shapes), and every member's size and SHA-256;
then it reads the arrays without pickle, hands the booster's bytes to the backend's own loader
(XGBoost JSON models are checked structurally first) and checks that the booster's classes and
features agree with the manifest.  Every failure is :class:`~budro.exceptions.ModelFileError`
naming the file and the problem.

Model files written by budro before this format are joblib pickles, and unpickling runs code
stored in the file: :func:`load_model` reads them only with ``trusted=True``.

The checksums detect damage, not a malicious author: a file that passes them is exactly what its
author wrote.  Load model files from authors you trust to describe a sound model.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import io
import math
import numbers
import os
import platform
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from budro._archive import check_member_name, is_zip, read_archive, write_archive
from budro.exceptions import BudroError, ModelFileError, ValidationError

__all__ = ["save_model", "load_model", "load_pickle", "FORMAT_NAME", "FORMAT_VERSION", "EXTRA_ATTRIBUTES", "NOT_STORED"]

#: ``manifest["format"]`` of a budro model archive.
FORMAT_NAME = "budro-model"
#: The archive layout version this budro writes, and the newest it reads.
FORMAT_VERSION = 1
#: The first budro release that wrote each format version (for the "upgrade" message).
_FIRST_RELEASE = {1: "0.1.0"}
#: ``format`` of the legacy joblib payload (budro < format version 1).
_LEGACY_MAGIC = "budro-model"

#: Estimator classes a model file can hold, by the name written in the manifest.
_ESTIMATORS = {"budro.BuDROClassifier": "budro.estimator:BuDROClassifier"}

#: Fitted attributes stored in the manifest's ``"fitted"`` object (name in the estimator ->
#: key in the manifest); ``docs/model-format.md`` describes each.
_FITTED_KEYS = {
    "classes_": "classes",
    "n_features_in_": "n_features_in",
    "feature_names_in_": "feature_names_in",
    "protected_indices_": "protected_indices",
    "history_": "history",
    "fair_metric_": "fair_metric",
    "time_setup_": "time_setup",
}
#: Fitted attributes stored elsewhere in the archive.
_STORED_ELSEWHERE = {"backend_": "the booster member and manifest['backend']", "table_": "manifest['table'] and table/ members"}

#: Further fitted attributes with JSON values (numbers, strings, lists, dicts, tuples, numeric
#: arrays), stored under ``manifest["fitted"]["extra"]`` by name.  An estimator attribute that is
#: neither here nor in the lists above makes :func:`save_model` refuse the estimator (rather than
#: drop state it may need): add it here, with what it holds, and to ``docs/model-format.md``.
EXTRA_ATTRIBUTES: dict[str, str] = {
    "eps_scale_": "float: the training table's nearest-neighbour scale (the unit of eps_unit='nn')",
    "eps_effective_": "float: the budget training used, in squared fair distance",
    "budget_": "budro.budget.BudgetDiagnosis: its fields (opposite_distances as an .npy member)",
}

#: Dataclasses an attribute may hold, by the name written in the manifest: rebuilt from their
#: stored fields (nothing else is imported from a name in a model file).
_DATACLASSES = {"budro.budget.BudgetDiagnosis": "budro.budget:BudgetDiagnosis"}

#: Fitted attributes a model file does not keep, and what a loaded estimator has instead.
NOT_STORED: dict[str, str] = {
    "solver_": "re-created from the solver parameters (a solver keeps no fitted state)",
    "last_transport_": "None (the last round's transport plan: a training diagnostic, n x K numbers)",
}

_BOOSTER_MEMBER = "model/booster"
_TABLE_PREFIX = "table/"
_ARRAY_PREFIX = "arrays/"
_TUPLE, _NDARRAY, _FLOAT, _DATACLASS = "__tuple__", "__ndarray__", "__float__", "__dataclass__"
_RESERVED = (_TUPLE, _NDARRAY, _FLOAT, _DATACLASS)
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


# ---------------------------------------------------------------------------------------- saving


def save_model(estimator: Any, path: str | os.PathLike) -> Path:
    """Write a fitted :class:`~budro.BuDROClassifier` to ``path`` as a budro model archive.

    The write is atomic: the archive is written to a temporary file in the same folder, fsynced
    and moved over ``path``, so a failure leaves a previous file at ``path`` as it was.

    Raises :class:`~budro.exceptions.ValidationError` (before anything is written) for an
    estimator of another class, one that is not fitted, a parameter a model file cannot hold
    (anything but JSON values, tuples and numeric or string arrays: e.g. a callable), a fitted
    attribute this format does not know, or a ``path`` that is a directory.
    """
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    path = Path(path)
    if path.is_dir():
        raise ValidationError(f"cannot save the model to {str(path)!r}: it is a directory; give a file name")
    class_name = _estimator_name(estimator)
    try:
        check_is_fitted(estimator)
    except NotFittedError:
        raise ValidationError(f"save_model: the {type(estimator).__name__} is not fitted; call fit(X, y) first") from None
    _check_known_attributes(estimator)

    members: dict[str, bytes] = {}
    arrays = _ArrayWriter(members)
    params = estimator.get_params(deep=False)
    params.pop("callbacks", None)
    manifest: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "created_by": _versions(),
        "estimator": {
            "class": class_name,
            "params": {k: _encode(v, f"parameter {k!r}", arrays) for k, v in params.items()},
        },
        "fitted": _encode_fitted(estimator, arrays),
        "backend": _encode_backend(estimator, members, arrays),
        "table": _encode_table(estimator, members),
    }
    return write_archive(path, manifest, members)


def _estimator_name(estimator: Any) -> str:
    for name, target in _ESTIMATORS.items():
        if type(estimator) is _import(target):
            return name
    known = ", ".join(t.replace(":", ".") for t in _ESTIMATORS.values())
    raise ValidationError(
        f"save_model stores {known} models; got a {type(estimator).__module__}.{type(estimator).__qualname__} "
        "(for other estimators use skops.io, or the library's own format)"
    )


def _check_known_attributes(estimator: Any) -> None:
    known = set(_FITTED_KEYS) | set(_STORED_ELSEWHERE) | set(EXTRA_ATTRIBUTES) | set(NOT_STORED)
    unknown = sorted(k for k in vars(estimator) if k.endswith("_") and not k.startswith("_") and k not in known)
    if unknown:
        raise ValidationError(
            f"save_model: fitted attribute(s) {', '.join(unknown)} of the {type(estimator).__name__} are not part of "
            f"budro's model format (format version {FORMAT_VERSION}); they would be lost. Add them to "
            "budro.persist.EXTRA_ATTRIBUTES (JSON values) or handle them in budro.persist"
        )


def _versions() -> dict[str, str]:
    from budro import __version__

    out = {"budro": __version__, "python": platform.python_version()}
    for dist, module in (("numpy", "numpy"), ("scipy", "scipy"), ("scikit-learn", "sklearn"), ("xgboost", "xgboost"),
                         ("lightgbm", "lightgbm"), ("catboost", "catboost"), ("skops", "skops")):
        if module in sys.modules:
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:  # pragma: no cover - vendored copies
                pass
    return out


class _ArrayWriter:
    """Numeric arrays found in parameters and attributes become ``arrays/<n>.npy`` members."""

    def __init__(self, members: dict[str, bytes]):
        self.members = members
        self.count = 0

    def add(self, value: np.ndarray, where: str) -> str:
        if value.dtype.kind not in "biufcU" or value.dtype.hasobject:
            raise ValidationError(
                f"{where} is an array of dtype {value.dtype}, which a budro model file cannot store "
                "(arrays of booleans, numbers or strings only: .npy members are read without pickle)"
            )
        buf = io.BytesIO()
        np.save(buf, value, allow_pickle=False)
        name = f"{_ARRAY_PREFIX}{self.count}.npy"
        self.count += 1
        self.members[name] = buf.getvalue()
        return name


def _encode(value: Any, where: str, arrays: _ArrayWriter) -> Any:
    """A JSON value for ``value``: tuples become ``{"__tuple__": [...]}``, arrays ``.npy``
    members ``{"__ndarray__": name}``, NaN and infinities ``{"__float__": "NaN" | "Infinity" |
    "-Infinity"}``, instances of the dataclasses in ``_DATACLASSES`` ``{"__dataclass__": name,
    "fields": {...}}``; anything else than JSON values, tuples, arrays and those is refused."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic) and not isinstance(value, np.ndarray):
        if value.dtype.kind in "biufU":
            value = value.item()
        else:
            raise _unstorable(value, where)
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else {_FLOAT: _finite_or_name(value)}
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray):
        return {_NDARRAY: arrays.add(value, where)}
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v, f"{where}[{i}]", arrays) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{where}[{i}]", arrays) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValidationError(f"{where} has the key {k!r}; a budro model file stores dicts with string keys only")
            if k in _RESERVED:
                raise ValidationError(f"{where} has the key {k!r}, which budro's model format reserves")
            out[k] = _encode(v, f"{where}[{k!r}]", arrays)
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = f"{type(value).__module__}.{type(value).__qualname__}"
        if name in _DATACLASSES and type(value) is _import(_DATACLASSES[name]):
            return {_DATACLASS: name, "fields": {f.name: _encode(getattr(value, f.name), f"{where}.{f.name}", arrays)
                                                 for f in dataclasses.fields(value)}}
    raise _unstorable(value, where)


def _unstorable(value: Any, where: str) -> ValidationError:
    return ValidationError(
        f"{where} holds a {type(value).__module__}.{type(value).__qualname__}, which a budro model file cannot "
        "store (it keeps no code): use JSON values (None, booleans, numbers, strings, lists, dicts with string "
        "keys), tuples, or numpy arrays of numbers or strings"
    )


def _encode_fitted(est: Any, arrays: _ArrayWriter) -> dict[str, Any]:
    classes = np.asarray(est.classes_)
    if classes.dtype.kind in "biuf":
        encoded_classes = {"dtype": classes.dtype.str, "values": classes.tolist()}
    elif classes.dtype.kind == "U" or (classes.dtype.kind == "O" and all(isinstance(c, str) for c in classes)):
        encoded_classes = {"dtype": "str" if classes.dtype.kind == "O" else classes.dtype.str,
                           "values": [str(c) for c in classes]}
    else:
        raise ValidationError(
            f"save_model: the class labels have dtype {classes.dtype} (values {classes[:3].tolist()!r}...); a budro model "
            "file stores labels that are all integers, all booleans, all floats or all strings"
        )
    if encoded_classes["dtype"][1:2] == "f" and not all(math.isfinite(c) for c in encoded_classes["values"]):
        raise ValidationError("save_model: the class labels must be finite numbers")
    to_dict = getattr(est.fair_metric_, "to_dict", None)
    if not callable(to_dict):
        raise ValidationError(
            f"save_model: the fitted fair metric {type(est.fair_metric_).__name__} has no to_dict(); a budro model file "
            "stores the metric as numbers (budro.metrics.metric_from_dict reads them back)"
        )
    names = getattr(est, "feature_names_in_", None)
    history = []
    for record in est.history_:
        history.append({f.name: _history_value(getattr(record, f.name), f"history_ field {f.name!r}")
                        for f in dataclasses.fields(record)})
    fitted = {
        "classes": encoded_classes,
        "n_features_in": int(est.n_features_in_),
        "feature_names_in": None if names is None else [str(n) for n in names],
        "protected_indices": [int(i) for i in est.protected_indices_],
        "history": history,
        "fair_metric": to_dict(),
        "time_setup": _finite_or_name(getattr(est, "time_setup_", 0.0)),
    }
    extra = {name: _encode(getattr(est, name), f"fitted attribute {name!r}", arrays)
             for name in EXTRA_ATTRIBUTES if hasattr(est, name)}
    if extra:
        fitted["extra"] = extra
    return fitted


def _history_value(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (str, bool, np.bool_, numbers.Real)):
        return value if value is None or isinstance(value, str) else _finite_or_name(value)
    raise ValidationError(f"save_model: {where} holds a {type(value).__name__}; a model file stores numbers, strings "
                          "and booleans there")


def _finite_or_name(value: Any) -> Any:
    """Numbers as JSON numbers; NaN and infinities (an eta of ``inf`` in the history) as the
    strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    value = float(value)
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _plugin_params(est: Any, kind: str, attr: str) -> tuple[str, dict[str, Any]]:
    """The registry name and the parameters the estimator creates its ``kind`` plugin with
    (as :meth:`BuDROClassifier._make_plugins` does)."""
    from budro import registry

    entry = registry.get(kind, getattr(est, attr))
    params = dict(getattr(est, f"{attr}_params") or {})
    if "random_state" in entry.spec.parameters and "random_state" not in params:
        params["random_state"] = est.random_state
    return entry.name, params


def _encode_backend(est: Any, members: dict[str, bytes], arrays: _ArrayWriter) -> dict[str, Any]:
    backend = est.backend_
    native_format = getattr(backend, "native_format", "")
    if not native_format:
        raise ValidationError(
            f"save_model: the backend {type(backend).__name__} has no native_format: it cannot export its model "
            "as bytes (to_native_bytes), so a budro model file cannot hold it"
        )
    name, params = _plugin_params(est, "backend", "backend")
    try:
        data = backend.to_native_bytes()
    except BudroError as exc:
        raise ValidationError(f"save_model: {exc}") from None
    member = f"{_BOOSTER_MEMBER}.{_native_extension(native_format)}"
    members[member] = bytes(data)
    return {
        "name": name,
        "params": _encode(params, "backend_params", arrays),
        "native_format": native_format,
        "member": member,
        "n_classes": int(backend.n_classes_),
        "n_features": int(backend.n_features_in_),
        "categorical_features": [int(c) for c in getattr(backend, "categorical_features", ()) or ()],
    }


def _native_extension(native_format: str) -> str:
    ext = native_format.rsplit("-", 1)[-1] if "-" in native_format else "bin"
    return {"text": "txt"}.get(ext, ext) if ext.isalnum() else "bin"


def _encode_table(est: Any, members: dict[str, bytes]) -> dict[str, Any] | None:
    table = getattr(est, "table_", None)
    if table is None:
        return None
    meta, blobs = table.to_state()
    names = {}
    for key, blob in blobs.items():
        member = check_member_name(f"{_TABLE_PREFIX}{key}", "table state key")
        members[member] = bytes(blob)
        names[key] = member
    return {"class": f"{type(table).__module__}.{type(table).__qualname__}", "meta": meta, "members": names}


# --------------------------------------------------------------------------------------- loading


def load_model(path: str | os.PathLike, *, trusted: bool = False) -> Any:
    """Read a model written by :func:`save_model`.

    The archive is verified as a whole (zip, manifest, format and version, value types and
    shapes, every member's SHA-256 and size, no member missing or unlisted) before any member is
    parsed; no code stored in the file runs.  Every failure raises
    :class:`~budro.exceptions.ModelFileError` naming the file and what is wrong.

    Parameters
    ----------
    path : str or path
    trusted : bool, default False
        Also read a legacy model file (budro < format version 1: a joblib pickle).  Unpickling
        runs code stored in the file: pass True only for files whose author you trust.  It does
        not change how a model archive is read.
    """
    path = Path(path)
    label = str(path)
    if path.is_dir():
        raise ModelFileError(f"{label!r} is a directory, not a budro model file")
    if not path.is_file():
        raise ModelFileError(f"model file {label!r} does not exist")
    try:
        zipped = is_zip(path)
    except OSError as exc:
        raise ModelFileError(f"model file {label!r} cannot be read: {exc}") from None
    if not zipped:
        return _load_legacy(path, trusted)

    def fail(msg: str) -> ModelFileError:
        return ModelFileError(f"{label!r}: {msg}")

    manifest, members = read_archive(path, lambda m: _check_format(m, fail), what="budro model file")
    try:
        spec = _check_manifest(manifest, members, fail)
    except RecursionError:
        raise fail("the manifest is nested too deeply") from None
    arrays = {name: _load_npy(data, name, fail) for name, data in members.items() if name.startswith(_ARRAY_PREFIX)}
    return _build(spec, manifest, members, arrays, fail)


def _check_format(manifest: dict[str, Any], fail: Callable[[str], ModelFileError]) -> None:
    if manifest.get("format") != FORMAT_NAME:
        raise fail(f"not a budro model file: its manifest's format is {manifest.get('format')!r}, not {FORMAT_NAME!r}")
    version = manifest.get("format_version")
    if type(version) is not int or version < 1:
        raise fail(f"unknown model format version {version!r}; this budro reads format version {FORMAT_VERSION}")
    if version > FORMAT_VERSION:
        from budro import __version__

        writer = manifest.get("created_by", {}).get("budro") if isinstance(manifest.get("created_by"), dict) else None
        needs = f"budro {writer} or later" if isinstance(writer, str) and len(writer) < 40 else "a newer budro"
        raise fail(
            f"model format version {version} was written by a newer budro; this budro ({__version__}) reads format "
            f"version {FORMAT_VERSION} (budro {_FIRST_RELEASE[FORMAT_VERSION]} and later): read it with {needs} "
            "(pip install --upgrade budro)"
        )


class _Spec:
    """The checked contents of a manifest (plain Python values)."""


def _check_manifest(manifest: dict[str, Any], members: dict[str, bytes], fail) -> _Spec:
    """Check the types, shapes and cross-references of every manifest value."""
    spec = _Spec()
    top = {"format", "format_version", "created_by", "estimator", "fitted", "backend", "table", "members"}
    _keys(manifest, top, "the manifest", fail, optional={"table"})
    _expect(manifest["created_by"], dict, "created_by", fail)

    est = _keys(manifest["estimator"], {"class", "params"}, "estimator", fail)
    if not isinstance(est["class"], str) or est["class"] not in _ESTIMATORS:
        raise fail(f"estimator.class is {est['class']!r}; this budro reads {', '.join(_ESTIMATORS)}")
    spec.cls = _import(_ESTIMATORS[est["class"]])
    _expect(est["params"], dict, "estimator.params", fail)
    accepted = set(spec.cls().get_params(deep=False)) - {"callbacks"}
    unknown = sorted(set(est["params"]) - accepted)
    if unknown:
        raise fail(f"estimator.params has parameter(s) {', '.join(map(repr, unknown))} that {spec.cls.__name__} does not take")
    spec.params = {k: _decode(v, f"estimator.params.{k}", members, fail) for k, v in est["params"].items()}

    fitted = _keys(manifest["fitted"], set(_FITTED_KEYS.values()), "fitted", fail, optional={"extra"})
    spec.classes = _decode_classes(fitted["classes"], fail)
    spec.n_features_in = _int(fitted["n_features_in"], "fitted.n_features_in", fail, low=1)
    names = fitted["feature_names_in"]
    if names is not None:
        _expect(names, list, "fitted.feature_names_in", fail)
        if len(names) != spec.n_features_in or not all(isinstance(n, str) for n in names):
            raise fail(f"fitted.feature_names_in must be {spec.n_features_in} strings (n_features_in)")
    spec.feature_names = None if names is None else np.asarray(names, dtype=object)
    prot = _expect(fitted["protected_indices"], list, "fitted.protected_indices", fail)
    spec.protected = tuple(_int(p, "fitted.protected_indices[]", fail, low=0, high=spec.n_features_in - 1) for p in prot)
    if len(set(spec.protected)) != len(spec.protected):
        raise fail("fitted.protected_indices lists a column twice")
    spec.history = _decode_history(fitted["history"], fail)
    spec.metric_state = _expect(fitted["fair_metric"], dict, "fitted.fair_metric", fail)
    spec.time_setup = _number(fitted["time_setup"], "fitted.time_setup", fail)
    extra = _expect(fitted.get("extra", {}), dict, "fitted.extra", fail)
    unknown = sorted(set(extra) - set(EXTRA_ATTRIBUTES))
    if unknown:
        raise fail(f"fitted.extra has attribute(s) {', '.join(map(repr, unknown))} this budro does not know")
    spec.extra = {k: _decode(v, f"fitted.extra.{k}", members, fail) for k, v in extra.items()}

    backend = _keys(manifest["backend"], {"name", "params", "native_format", "member", "n_classes", "n_features",
                                          "categorical_features"}, "backend", fail)
    spec.backend_name = _expect(backend["name"], str, "backend.name", fail)
    spec.backend_params = _decode(_expect(backend["params"], dict, "backend.params", fail), "backend.params", members, fail)
    spec.native_format = _expect(backend["native_format"], str, "backend.native_format", fail)
    spec.booster_member = _member(backend["member"], "backend.member", members, fail)
    if not spec.booster_member.startswith(_BOOSTER_MEMBER + "."):
        raise fail(f"backend.member must be {_BOOSTER_MEMBER}.<extension>, got {spec.booster_member!r}")
    spec.n_classes = _int(backend["n_classes"], "backend.n_classes", fail, low=2)
    if spec.n_classes != len(spec.classes):
        raise fail(f"backend.n_classes is {spec.n_classes} but fitted.classes holds {len(spec.classes)} labels")
    spec.n_features = _int(backend["n_features"], "backend.n_features", fail, low=1)
    cats = _expect(backend["categorical_features"], list, "backend.categorical_features", fail)
    spec.categorical = tuple(_int(c, "backend.categorical_features[]", fail, low=0, high=spec.n_features - 1) for c in cats)

    table = manifest.get("table")
    if table is None:
        spec.table = None
        if spec.n_features != spec.n_features_in:
            raise fail(f"backend.n_features is {spec.n_features} but fitted.n_features_in is {spec.n_features_in} "
                       "(and there is no table preprocessor)")
    else:
        _keys(table, {"class", "meta", "members"}, "table", fail)
        _expect(table["class"], str, "table.class", fail)
        _expect(table["meta"], dict, "table.meta", fail)
        table_members = _expect(table["members"], dict, "table.members", fail)
        for key, name in table_members.items():
            _member(name, f"table.members.{key}", members, fail)
            if name != f"{_TABLE_PREFIX}{key}":
                raise fail(f"table.members.{key} must be {_TABLE_PREFIX}{key}, got {name!r}")
        spec.table = table

    # every member must be referenced by exactly the part of the manifest that reads it
    used = {spec.booster_member} | set(spec.table["members"].values() if spec.table else ())
    arrays = {n for n in members if n.startswith(_ARRAY_PREFIX)}
    stray = sorted(set(members) - used - arrays)
    if stray:
        raise fail(f"member(s) {', '.join(map(repr, stray))} are listed but no part of the manifest reads them")
    return spec


def _build(spec: _Spec, manifest: dict[str, Any], members: dict[str, bytes], arrays: dict[str, np.ndarray], fail) -> Any:
    from budro import registry
    from budro.metrics import metric_from_dict

    spec.params = _with_arrays(spec.params, arrays)
    spec.backend_params = _with_arrays(spec.backend_params, arrays)
    try:
        est = spec.cls(**spec.params)
    except Exception as exc:  # a constructor taking only stored values; anything it raises is the file's fault
        raise fail(f"estimator.params are not valid for {spec.cls.__name__}: {exc}") from None
    try:
        metric = metric_from_dict(spec.metric_state)
    except Exception as exc:  # the dict is the file's: whatever it makes the reader raise is the file's fault
        raise fail(f"fitted.fair_metric: {exc if isinstance(exc, ValidationError) else f'{type(exc).__name__}: {exc}'}") from None
    n_metric = getattr(metric, "n_features_in_", None)
    if spec.table is None and n_metric is not None and n_metric != spec.n_features:
        raise fail(f"fitted.fair_metric is for {n_metric} features, the booster for {spec.n_features}")

    try:
        backend = registry.create("backend", spec.backend_name, **spec.backend_params)
    except Exception as exc:  # the parameters are the file's
        raise fail(f"backend {spec.backend_name!r} cannot be created: {exc}") from None
    if getattr(backend, "native_format", "") != spec.native_format:
        raise fail(f"backend.native_format is {spec.native_format!r}, but the {spec.backend_name!r} backend of this "
                   f"installation reads {getattr(backend, 'native_format', '') or 'no native format'!r}")
    try:
        backend.load_native_bytes(members[spec.booster_member], n_classes=spec.n_classes, n_features=spec.n_features,
                                  categorical_features=spec.categorical)
    except Exception as exc:  # budro's checks, or the library refusing the bytes
        raise fail(f"member {spec.booster_member!r}: {exc if isinstance(exc, BudroError) else f'{type(exc).__name__}: {exc}'}") from None
    if int(backend.n_classes_) != len(spec.classes) or int(backend.n_features_in_) != spec.n_features:
        raise fail(f"the booster has {backend.n_classes_} classes and {backend.n_features_in_} features; the manifest "
                   f"says {len(spec.classes)} and {spec.n_features}")

    est.classes_ = spec.classes
    est.n_features_in_ = spec.n_features_in
    if spec.feature_names is not None:
        est.feature_names_in_ = spec.feature_names
    est.protected_indices_ = spec.protected
    est.backend_ = backend
    est.fair_metric_ = metric
    est.history_ = spec.history
    est.time_setup_ = spec.time_setup
    est.last_transport_ = None
    _check_backend_params(est, spec, fail)
    est.solver_ = _solver(est, fail)
    est.table_ = _load_table(spec.table, members, fail) if spec.table is not None else None
    for name, value in spec.extra.items():
        try:
            setattr(est, name, _with_arrays(value, arrays))
        except (TypeError, ValueError) as exc:  # a stored dataclass whose fields do not fit its class
            raise fail(f"fitted.extra.{name} cannot be rebuilt: {exc}") from None
    return est


def _check_backend_params(est: Any, spec: _Spec, fail) -> None:
    """``manifest["backend"]`` must be what the estimator's parameters make."""
    try:
        name, params = _plugin_params(est, "backend", "backend")
    except Exception as exc:  # the parameters are the file's
        raise fail(f"estimator.params do not name a usable backend: {exc}") from None
    if name != spec.backend_name or not _equal(params, spec.backend_params):
        raise fail(f"backend.name and backend.params ({spec.backend_name!r}, {_short(spec.backend_params)}) are not "
                   f"what estimator.params make ({name!r}, {_short(params)})")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)))


def _solver(est: Any, fail) -> Any:
    """The solver the estimator's parameters make (a solver keeps no fitted state).  A solver
    plugin that is not installed here gives ``None`` and a warning (predictions do not need it);
    parameters that no solver takes make the file refused."""
    from budro import registry
    from budro.exceptions import UnknownPluginError

    if not isinstance(est.solver, str):
        raise fail(f"estimator.params: solver must be a plugin name (a string), got {_short(est.solver)}")
    try:
        name, params = _plugin_params(est, "solver", "solver")
        return registry.create("solver", name, **params)
    except UnknownPluginError as exc:
        warnings.warn(f"the loaded model's solver is not available here ({exc}); solver_ is None. Predictions do "
                      "not need it.", stacklevel=3)
        return None
    except Exception as exc:  # the parameters are the file's
        raise fail(f"estimator.params: the solver cannot be created: {exc}") from None


def _load_table(table: dict[str, Any], members: dict[str, bytes], fail) -> Any:
    try:
        from budro.tables import TableEncoder
    except ImportError:
        raise fail("the model has a table preprocessor, and this budro has no budro.tables") from None
    expected = f"{TableEncoder.__module__}.{TableEncoder.__qualname__}"
    if table["class"] != expected:
        raise fail(f"table.class is {table['class']!r}; this budro reads {expected!r}")
    blobs = {key: members[name] for key, name in table["members"].items()}
    try:
        return TableEncoder.from_state(table["meta"], blobs)
    except Exception as exc:  # the state passed its checksums: report whatever the reader objects to
        raise fail(f"the table preprocessor cannot be read: {type(exc).__name__}: {exc}") from None


# -- manifest value checks -------------------------------------------------------------------------


def _keys(obj: Any, expected: set[str], where: str, fail, optional: set[str] = frozenset()) -> dict:
    _expect(obj, dict, where, fail)
    missing = sorted(expected - set(obj) - set(optional))
    extra = sorted(set(obj) - expected - set(optional))
    if missing or extra:
        parts = ([f"lacks {', '.join(map(repr, missing))}"] if missing else []) + (
            [f"has unknown key(s) {', '.join(map(repr, extra))}"] if extra else [])
        raise fail(f"{where} {' and '.join(parts)}")
    return obj


_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string"}


def _expect(value: Any, typ: type, where: str, fail) -> Any:
    if not isinstance(value, typ):
        raise fail(f"{where} must be {_TYPE_NAMES.get(typ, typ.__name__)}, got {type(value).__name__} {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int(value: Any, where: str, fail, *, low: int | None = None, high: int | None = None) -> int:
    if type(value) is not int or (low is not None and value < low) or (high is not None and value > high):
        bounds = f" in [{low}, {high}]" if high is not None else (f" >= {low}" if low is not None else "")
        raise fail(f"{where} must be an integer{bounds}, got {_short(value)}")
    return value


def _number(value: Any, where: str, fail) -> float:
    if isinstance(value, str) and value in _NONFINITE:
        return _NONFINITE[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f"{where} must be a number (or 'NaN', 'Infinity', '-Infinity'), got {_short(value)}")
    return value


def _member(name: Any, where: str, members: dict[str, bytes], fail) -> str:
    _expect(name, str, where, fail)
    if name not in members:
        raise fail(f"{where} names member {name!r}, which the archive does not hold")
    return name


_CLASS_DTYPES = {"b": bool, "i": int, "u": int, "f": (int, float), "U": str}


def _decode_classes(obj: Any, fail) -> np.ndarray:
    _keys(obj, {"dtype", "values"}, "fitted.classes", fail)
    dtype, values = obj["dtype"], obj["values"]
    _expect(values, list, "fitted.classes.values", fail)
    if dtype == "str":
        kind, np_dtype = "U", object
    else:
        try:
            np_dtype = np.dtype(dtype) if isinstance(dtype, str) and len(dtype) <= 8 else None
        except TypeError:
            np_dtype = None
        kind = np_dtype.kind if np_dtype is not None else None
        if kind not in _CLASS_DTYPES:
            raise fail(f"fitted.classes.dtype must be 'str' or a bool, int, uint, float or unicode dtype, got {_short(dtype)}")
    if len(values) < 2:
        raise fail(f"fitted.classes must hold at least 2 labels, got {len(values)}")
    allowed = _CLASS_DTYPES[kind]
    for v in values:
        if not isinstance(v, allowed) or (kind != "b" and isinstance(v, bool)):
            raise fail(f"fitted.classes.values must all be of dtype {dtype}, got {_short(v)}")
    try:
        classes = np.array(values, dtype=np_dtype)
    except (OverflowError, ValueError) as exc:
        raise fail(f"fitted.classes.values do not fit dtype {dtype}: {exc}") from None
    if np_dtype is not object and classes.tolist() != values:
        raise fail(f"fitted.classes.values do not fit dtype {dtype} exactly")
    if np_dtype is not object and kind == "f" and not np.isfinite(classes).all():
        raise fail("fitted.classes.values must be finite")
    if not all(a < b for a, b in zip(values[:-1], values[1:])):
        raise fail("fitted.classes.values must be sorted and distinct (as np.unique gives them)")
    return classes


def _decode_history(obj: Any, fail) -> list:
    """The ``RoundRecord`` list; each field checked against its annotation (int, float, bool,
    str); a field with a default may be absent (files from before it existed)."""
    import typing

    from budro.core import RoundRecord

    _expect(obj, list, "fitted.history", fail)
    hints = typing.get_type_hints(RoundRecord)
    fields = {f.name: f for f in dataclasses.fields(RoundRecord)}
    required = {n for n, f in fields.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    out = []
    for i, entry in enumerate(obj):
        _expect(entry, dict, f"fitted.history[{i}]", fail)
        missing, unknown = sorted(required - set(entry)), sorted(set(entry) - set(fields))
        if missing or unknown:
            raise fail(f"fitted.history[{i}] " + " and ".join(
                ([f"lacks {', '.join(map(repr, missing))}"] if missing else [])
                + ([f"has unknown key(s) {', '.join(map(repr, unknown))}"] if unknown else [])))
        values = {}
        for name, value in entry.items():
            where, typ = f"fitted.history[{i}].{name}", hints.get(name)
            if typ is float:
                values[name] = float(_number(value, where, fail))
            elif typ is int:
                values[name] = _int(value, where, fail)
            elif typ in (bool, str):
                values[name] = _expect(value, typ, where, fail)
            elif value is None or isinstance(value, (bool, int, float, str)):
                values[name] = value
            else:
                raise fail(f"{where} must be a JSON number, string or boolean, got {_short(value)}")
        out.append(RoundRecord(**values))
    return out


def _decode(value: Any, where: str, members: dict[str, bytes], fail) -> Any:
    """Undo :func:`_encode`, leaving arrays as ``_ArrayRef`` until they are read."""
    if isinstance(value, list):
        return [_decode(v, f"{where}[{i}]", members, fail) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if _DATACLASS in value:
            _keys(value, {_DATACLASS, "fields"}, where, fail)
            if not isinstance(value[_DATACLASS], str) or value[_DATACLASS] not in _DATACLASSES:
                raise fail(f"{where} names class {_short(value[_DATACLASS])}; a model file may hold "
                           f"{', '.join(_DATACLASSES)} only")
            fields = _expect(value["fields"], dict, f"{where}.fields", fail)
            return _DataclassRef(value[_DATACLASS], {k: _decode(v, f"{where}.{k}", members, fail) for k, v in fields.items()})
        if any(k in value for k in _RESERVED):
            if len(value) != 1:
                raise fail(f"{where}: {_short(value)} mixes a reserved key with others")
            if _FLOAT in value:
                if not isinstance(value[_FLOAT], str) or value[_FLOAT] not in _NONFINITE:
                    raise fail(f"{where}.{_FLOAT} must be 'NaN', 'Infinity' or '-Infinity', got {_short(value[_FLOAT])}")
                return _NONFINITE[value[_FLOAT]]
            if _TUPLE in value:
                items = _expect(value[_TUPLE], list, f"{where}.{_TUPLE}", fail)
                return tuple(_decode(v, f"{where}[{i}]", members, fail) for i, v in enumerate(items))
            name = _member(value[_NDARRAY], where, members, fail)
            if not name.startswith(_ARRAY_PREFIX):
                raise fail(f"{where} names member {name!r}, not an {_ARRAY_PREFIX} member")
            return _ArrayRef(name)
        return {k: _decode(v, f"{where}.{k}", members, fail) for k, v in value.items()}
    return value


@dataclasses.dataclass(frozen=True)
class _ArrayRef:
    name: str


@dataclasses.dataclass(frozen=True)
class _DataclassRef:
    name: str
    fields: dict


def _with_arrays(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, _ArrayRef):
        return arrays[value.name].copy()
    if isinstance(value, _DataclassRef):
        cls = _import(_DATACLASSES[value.name])
        return cls(**_with_arrays(value.fields, arrays))
    if isinstance(value, list):
        return [_with_arrays(v, arrays) for v in value]
    if isinstance(value, tuple):
        return tuple(_with_arrays(v, arrays) for v in value)
    if isinstance(value, dict):
        return {k: _with_arrays(v, arrays) for k, v in value.items()}
    return value


def _load_npy(data: bytes, name: str, fail) -> np.ndarray:
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise fail(f"member {name!r} is not a valid .npy array: {exc}") from None
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biufcU":
        raise fail(f"member {name!r} holds an array of dtype {getattr(arr, 'dtype', '?')}; arrays of booleans, numbers "
                   "or strings only")
    return arr


def _import(target: str) -> Any:
    import importlib

    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


# -------------------------------------------------------------------------------- legacy pickles


def _load_legacy(path: Path, trusted: bool) -> Any:
    label = str(path)
    with open(path, "rb") as fh:
        head = fh.read(2)
    looks_pickled = head[:1] == b"\x80" or head[:1] == b"x" or head == b"ZF"  # pickle protocol 2+, joblib zlib
    if not trusted:
        if looks_pickled:
            what = ("is a pickle (joblib) file, such as a model saved by budro before its archive format. Unpickling "
                    "runs code stored in the file, so budro does not read pickles by default")
        else:
            what = ("is not a budro model file (a budro model archive is a zip file). If it is a model saved by an "
                    "older budro (a joblib pickle): unpickling runs code stored in the file, so budro does not read "
                    "pickles by default")
        raise ModelFileError(
            f"{label!r} {what}. If you trust the file's author, load it with load_model(path, trusted=True) (budro "
            "audit: --trust-pickle), then save_model() it again to get a model archive that loads without running code"
        )
    estimator = load_pickle(path)
    from budro.estimator import BuDROClassifier

    if not isinstance(estimator, BuDROClassifier):
        raise ModelFileError(f"{label!r} is a pickle, but not of a budro model (it holds a {type(estimator).__name__})")
    return estimator


def load_pickle(path: str | os.PathLike) -> Any:
    """Unpickle a pickle or joblib file: **this runs code stored in the file**, so call it only
    for files whose author you trust.  A model file of budro before the archive format (a joblib
    dict ``{"format": "budro-model", "estimator": ...}``) gives its estimator; anything else
    is returned as it was unpickled.  Unreadable files raise
    :class:`~budro.exceptions.ModelFileError`."""
    import joblib

    try:
        payload = joblib.load(path)
    except Exception as exc:  # unpickling can raise anything
        raise ModelFileError(f"{str(path)!r} is neither a budro model archive nor a readable pickle/joblib file "
                             f"({type(exc).__name__}: {exc})") from None
    if isinstance(payload, dict) and payload.get("format") == _LEGACY_MAGIC and "estimator" in payload:
        return payload["estimator"]
    return payload
