"""Parameter and input handling shared by budro's built-in backends (XGBoost, LightGBM, CatBoost).

:class:`BuiltinBackend` holds what the three have in common: the ``weight_scale`` and parameter
handling of the constructor (names resolved against the backend's tables, values checked before
any data, see :meth:`BuiltinBackend._check_param_values`), the ``params`` property, ``repr``, and
the state checks.  The functions check the inputs of the backend contract
(:class:`budro.backends.Backend`).  Nothing here imports a boosting library.
"""

from __future__ import annotations

import difflib
import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from budro.backends.base import WEIGHT_SCALES, Backend
from budro.exceptions import BudroError, ConfigError, ValidationError

__all__ = [
    "BuiltinBackend",
    "Number",
    "MAX_CATEGORY_CODE",
    "FLOAT32_MAX",
    "check_X",
    "check_float32_range",
    "check_training_data",
    "check_weights",
    "check_seed",
    "check_n_rounds",
    "check_categorical_features",
    "check_native_load_args",
    "check_native_bytes",
    "resolve_params",
]

#: How far the per-round weights may sum away from 1.
WEIGHT_SUM_TOL = 1e-5
#: Largest magnitude of a feature value: XGBoost and CatBoost store features as float32, where
#: larger finite values become inf (XGBoost then refuses them with its own error, CatBoost merges
#: them all into one value).  LightGBM keeps float64, but every built-in backend takes the same
#: matrices, so the limit is one contract for all three (checked by :func:`check_X`).
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: Largest category code a categorical column may hold: codes are stored as float32 by XGBoost
#: (exact up to 2**24) and as int32 bitsets by LightGBM.
MAX_CATEGORY_CODE = 2**24 - 1


@dataclass(frozen=True)
class Number:
    """What a numeric parameter accepts: an integer or a real number, optionally bounded."""

    integer: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # ``low < value`` rather than ``low <= value``
    high_open: bool = False

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            lo, hi = ("(" if self.low_open else "["), (")" if self.high_open else "]")
            return f"{kind} in {lo}{_fmt(self.low)}, {_fmt(self.high)}{hi}"
        if self.low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {_fmt(self.low)}"
        if self.high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {_fmt(self.high)}"
        return kind

    def accepts(self, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)):
            return False
        if self.integer:
            if not isinstance(value, numbers.Integral):
                return False
        elif not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
            return False
        v = float(value)
        if self.low is not None and (v < self.low or (self.low_open and v == self.low)):
            return False
        if self.high is not None and (v > self.high or (self.high_open and v == self.high)):
            return False
        return True


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


#: Outcome of one probe per (backend class, parameters): None when the library accepted them,
#: else its message.  A cache, so each parameter set is tried once per process.
_PROBED: dict[tuple[str, str], str | None] = {}


class BuiltinBackend(Backend):
    """What budro's built-in backends share: constructor, parameter tables and state checks.

    Subclasses set the tables ``NATIVE_PARAMS`` (native names passed through), ``PARAM_ALIASES``
    (alias -> native name), ``RESERVED_PARAMS`` (name -> why budro controls it),
    ``DEFAULT_PARAMS`` and ``PARAM_RULES`` (native name -> :class:`Number`), and implement
    :meth:`_reset` (the empty model and training state), :meth:`_is_training` (training
    structures held) and :meth:`_probe` (one tiny training run with given parameters).

    Parameter values are checked in the constructor, before any data is seen (configs are
    validated by creating the backend): first the :class:`Number` rules, then the library
    itself, by :meth:`_probe` -- one round on a 16-row synthetic data set with the resolved
    parameters, cached per parameter set.  When the library rejects them, the run is repeated
    without each given parameter in turn: the first whose removal makes the library accept
    the rest is named as the key at fault.  Either way the error is a
    :class:`~budro.exceptions.ConfigError` naming the key, its value and what is accepted.
    """

    NATIVE_PARAMS: ClassVar[frozenset[str]] = frozenset()
    PARAM_ALIASES: ClassVar[dict[str, str]] = {}
    RESERVED_PARAMS: ClassVar[dict[str, str]] = {}
    DEFAULT_PARAMS: ClassVar[dict[str, Any]] = {}
    PARAM_RULES: ClassVar[dict[str, Number]] = {}
    #: Parameters left out of the probe: they depend on the data (one entry per feature) or
    #: on the machine (devices), not on their own validity.
    PROBE_SKIP: ClassVar[frozenset[str]] = frozenset()
    #: The library's name in messages.
    LIBRARY: ClassVar[str] = ""
    #: The native name of the library's thread count; when the user gives none, training uses
    #: :func:`budro._threads.default_threads` (the cores this process may use), not the
    #: library's own default (every core of the machine, whatever the affinity mask or cgroup).
    THREAD_PARAM: ClassVar[str | None] = None
    #: Whether the default thread count leaves out the cores other processes keep busy when
    #: training starts (``default_threads(..., yield_busy=True)``).
    THREADS_YIELD_BUSY: ClassVar[bool] = False

    #: Categorical columns of the current model (class-level default: backends pickled before
    #: categorical support unpickle without the attribute).
    _categorical: tuple[int, ...] = ()

    def __init__(self, weight_scale: str = "n", **params: Any) -> None:
        owner = type(self).__name__
        if weight_scale not in WEIGHT_SCALES:
            raise ConfigError(
                f"{owner}: weight_scale must be one of {', '.join(map(repr, WEIGHT_SCALES))}; got {weight_scale!r}"
            )
        self.weight_scale = weight_scale
        self._user_params = dict(params)
        resolved, given_as = resolve_params(
            owner, params, self.NATIVE_PARAMS, self.PARAM_ALIASES, self.RESERVED_PARAMS
        )
        self._params = {**self.DEFAULT_PARAMS, **resolved}
        self._given_as = given_as
        self._check_param_values()
        self._categorical = ()
        self._reset()

    # -- to implement -------------------------------------------------------------------
    def _reset(self) -> None:  # pragma: no cover - abstract in effect
        raise NotImplementedError

    def _is_training(self) -> bool:  # pragma: no cover - abstract in effect
        raise NotImplementedError

    def _has_model(self) -> bool:
        return self.n_rounds > 0

    @classmethod
    def _probe(cls, params: dict[str, Any]) -> None:
        """Train one round on a tiny synthetic data set with ``params`` (by native name, as
        :attr:`params` gives them); let the library's error out."""

    def _check_combinations(self) -> None:
        """Checks of several parameters together (subclasses); raise ConfigError."""

    def _check_param_values(self) -> None:
        """Check parameter values (not only names) in the constructor; raise ConfigError."""
        owner = type(self).__name__
        for native, rule in self.PARAM_RULES.items():
            if native in self._params and not rule.accepts(self._params[native]):
                raise ConfigError(
                    f"{owner}: parameter {self._key(native)!r} must be {rule.describe()}, got {self._params[native]!r}"
                )
        self._check_combinations()
        error = self._probe_cached(self._params)
        if error is None:
            return
        for native in self._given_as:
            if native in self.PROBE_SKIP:
                continue
            without = {k: v for k, v in self._params.items() if k != native}
            if native in self.DEFAULT_PARAMS:
                without[native] = self.DEFAULT_PARAMS[native]
            if self._probe_cached(without) is None:
                raise ConfigError(
                    f"{owner}: parameter {self._key(native)!r} = {self._params[native]!r} is not accepted by "
                    f"{self.LIBRARY}: {error}"
                )
        given = ", ".join(f"{k}={v!r}" for k, v in self._user_params.items())
        raise ConfigError(f"{owner}: {self.LIBRARY} does not accept the parameters ({given}) together: {error}")

    def _probe_cached(self, params: dict[str, Any]) -> str | None:
        params = {k: v for k, v in params.items() if k not in self.PROBE_SKIP}
        key = (type(self).__qualname__, repr(sorted(params.items(), key=lambda kv: kv[0])))
        if key not in _PROBED:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self._probe(params)
            except Exception as exc:  # the library's own error, whatever its class
                _PROBED[key] = _first_line(exc)
            else:
                _PROBED[key] = None
        return _PROBED[key]

    # -- shared -------------------------------------------------------------------------
    @property
    def params(self) -> dict[str, Any]:
        """The library parameters of every round, by native name, defaults included (what
        budro sets per fit, e.g. the objective, is added when training)."""
        return dict(self._params)

    @property
    def categorical_features(self) -> tuple[int, ...]:
        """Columns of the current model that hold category codes (``()`` before a fit)."""
        return self._categorical

    def __repr__(self) -> str:
        args = [f"weight_scale={self.weight_scale!r}"] + [f"{k}={v!r}" for k, v in self._user_params.items()]
        return f"{type(self).__name__}({', '.join(args)})"

    def _with_threads(self, params: dict[str, Any], n_rows: int | None = None) -> dict[str, Any]:
        """``params`` with the thread count budro chooses (:data:`THREAD_PARAM`) unless the user
        set one (under any alias): :func:`budro._threads.default_threads` for ``n_rows`` rows."""
        if self.THREAD_PARAM is not None and self.THREAD_PARAM not in self._given_as:
            from budro._threads import default_threads

            params[self.THREAD_PARAM] = default_threads(n_rows, yield_busy=self.THREADS_YIELD_BUSY)
        return params

    def _key(self, native: str) -> str:
        """The name under which the user gave ``native`` (an alias or the native name)."""
        return self._given_as.get(native, native)

    def _require_model(self, what: str) -> None:
        if not self._has_model():
            raise BudroError(f"{type(self).__name__}.{what}: no model yet; call start(X, y, n_classes) or fit_native first")

    def _require_training(self, what: str) -> None:
        self._require_model(what)
        if not self._is_training():
            raise BudroError(
                f"{type(self).__name__}.{what}: the training data were released (finish(), pickling, "
                "load_native_bytes or fit_native); call start(X, y, n_classes) to train again"
            )

    def _check_X(self, X: Any) -> np.ndarray:
        """Prediction inputs of the current model: its feature count and categorical columns."""
        return check_X(X, "X", n_features=self.n_features_in_, categorical=self._categorical)

    def _new_finished(self, n_classes: int, n_features: int, categorical: tuple[int, ...]):
        """A new backend with the same parameters, to hold a finished model (``fit_native``)."""
        other = type(self)(self.weight_scale, **self._user_params)
        other.n_classes_, other.n_features_in_, other._categorical = n_classes, n_features, categorical
        return other


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def probe_data() -> tuple[np.ndarray, np.ndarray]:
    """The data set of every probe: 16 rows, 2 features, both labels."""
    x = np.arange(16, dtype=np.float64)
    return np.column_stack([x, x[::-1] % 5]), (np.arange(16) % 2).astype(np.float64)


def resolve_params(owner: str, params: dict[str, Any], native: frozenset[str], aliases: dict[str, str],
                   reserved: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Map aliases to native names and reject unknown and budro-controlled names.

    Returns the parameters by native name and, for each, the name it was given under."""
    resolved: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in params.items():
        if key in reserved:
            raise ConfigError(f"{owner}: parameter {key!r} cannot be set: {reserved[key]}")
        name = aliases.get(key, key)
        if name not in native:
            close = difflib.get_close_matches(key, sorted(native) + ["weight_scale"], n=1) or difflib.get_close_matches(
                key, sorted(aliases), n=1
            )
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            alias_text = f" and the aliases {', '.join(sorted(aliases))}" if aliases else ""
            raise ConfigError(
                f"{owner}: unknown parameter {key!r}{hint}; accepted: weight_scale, {', '.join(sorted(native))}{alias_text}"
            )
        if name in resolved:
            raise ConfigError(f"{owner}: parameters {given_as[name]!r} and {key!r} set the same parameter {name!r}")
        resolved[name], given_as[name] = value, key
    return resolved, given_as


def check_seed(seed: Any, *, upper: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) < upper:
        raise ValidationError(f"random_state must be an integer in [0, {upper}) or None, got {seed!r}")
    return int(seed)


def check_n_rounds(n_rounds: Any) -> int:
    if isinstance(n_rounds, bool) or not isinstance(n_rounds, numbers.Integral) or n_rounds < 1:
        raise ValidationError(f"n_rounds must be an integer >= 1, got {n_rounds!r}")
    return int(n_rounds)


def check_categorical_features(categorical_features: Any, n_features: int) -> tuple[int, ...]:
    """``categorical_features`` as a sorted tuple of distinct column indices in ``[0, n_features)``."""
    if categorical_features is None:
        return ()
    if isinstance(categorical_features, (str, bytes)) or not hasattr(categorical_features, "__iter__"):
        raise ValidationError(
            f"categorical_features must be a sequence of column indices, got {type(categorical_features).__name__}"
        )
    out: list[int] = []
    for c in categorical_features:
        if isinstance(c, (bool, np.bool_)) or not isinstance(c, numbers.Integral) or not 0 <= int(c) < n_features:
            raise ValidationError(f"categorical_features must hold column indices in [0, {n_features}), got {c!r}")
        out.append(int(c))
    if len(set(out)) != len(out):
        raise ValidationError(f"categorical_features lists a column twice: {sorted(out)}")
    return tuple(sorted(out))


def check_X(X: Any, name: str, *, n_features: int | None = None, categorical: Any = ()) -> np.ndarray:
    """``X`` as a C-contiguous float64 (n, d) array.

    NaN marks a missing value in any column; infinite values and finite values beyond the float32
    range (:data:`FLOAT32_MAX`) are rejected.  The columns in
    ``categorical`` (already checked indices) must hold non-negative integer category codes
    up to :data:`MAX_CATEGORY_CODE`, or NaN."""
    try:
        arr = np.asarray(X)
        if arr.dtype.kind not in "fiub":
            raise TypeError
        arr = np.ascontiguousarray(arr, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} must be a numeric 2-D array, got {type(X).__name__}") from None
    if arr.ndim != 2:
        raise ValidationError(f"{name} must be 2-D (n_samples, n_features), got shape {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValidationError(f"{name} must have at least one row and one column, got shape {arr.shape}")
    if n_features is not None and arr.shape[1] != n_features:
        raise ValidationError(f"{name} has {arr.shape[1]} features, the model was trained with {n_features}")
    if np.isinf(arr).any():
        col = int(np.flatnonzero(np.isinf(arr).any(axis=0))[0])
        raise ValidationError(f"{name} must not hold infinite values (column {col} does; NaN marks a missing value)")
    check_float32_range(arr, name)
    for c in categorical:
        codes = arr[:, c]
        known = codes[~np.isnan(codes)]
        bad = (known < 0) | (known > MAX_CATEGORY_CODE) | (known != np.floor(known))
        if bad.any():
            raise ValidationError(
                f"{name}: column {c} is categorical and must hold integer category codes in "
                f"[0, {MAX_CATEGORY_CODE}] or NaN (missing/unseen), found {float(known[bad][0])!r}"
            )
    return arr


def check_float32_range(X: np.ndarray, name: str = "X", names: Any = None) -> None:
    """Refuse finite values of the float64 matrix ``X`` beyond :data:`FLOAT32_MAX`, naming the first
    column that holds one (by ``names[j]`` when given, else its position)."""
    with np.errstate(invalid="ignore"):
        beyond = np.abs(X) > FLOAT32_MAX
    if not beyond.any():
        return
    col = int(np.flatnonzero(beyond.any(axis=0))[0])
    row = int(np.flatnonzero(beyond[:, col])[0])
    label = f"column {names[col]!r}" if names is not None and len(names) == X.shape[1] else f"column {col}"
    raise ValidationError(
        f"{name}: {label} holds {X[row, col]:.4g} (row {row}), beyond the float32 range |x| <= {FLOAT32_MAX:.4g} "
        f"in which XGBoost and CatBoost store features (there it would become inf, or fail); rescale that column "
        f"(standardise it, or change its unit, e.g. log or thousands)"
    )


def check_training_data(X: Any, y: Any, n_classes: Any, categorical_features: Any = ()
                        ) -> tuple[np.ndarray, np.ndarray, int, tuple[int, ...]]:
    """Check ``start``/``fit_native`` inputs; returns ``X``, ``y`` (float64), ``n_classes`` and the
    categorical columns as a sorted tuple."""
    try:
        d = np.shape(X)[1] if np.ndim(X) == 2 else None
    except (TypeError, ValueError):  # pragma: no cover - ragged input, reported by check_X
        d = None
    categorical = check_categorical_features(categorical_features, d) if d is not None else ()
    X = check_X(X, "X", categorical=categorical)
    if isinstance(n_classes, bool) or not isinstance(n_classes, numbers.Integral) or n_classes < 2:
        raise ValidationError(f"n_classes must be an integer >= 2, got {n_classes!r}")
    try:
        y_arr = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError(f"y must be an array of integer labels, got {type(y).__name__}") from None
    if y_arr.shape != (X.shape[0],):
        raise ValidationError(f"y must have shape (n,) = ({X.shape[0]},) to match X, got {y_arr.shape}")
    if not np.isfinite(y_arr).all() or (y_arr != np.round(y_arr)).any() or (y_arr < 0).any() or (y_arr >= n_classes).any():
        raise ValidationError(f"y must hold integer labels in [0, {int(n_classes)})")
    return X, y_arr, int(n_classes), categorical


def check_weights(weights: Any, shape: tuple[int, int]) -> np.ndarray:
    """The per-round weights ``P`` of ``step``: shape (n, K), finite, non-negative, summing to 1."""
    try:
        P = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError(f"weights must be a numeric array of shape {shape}, got {type(weights).__name__}") from None
    if P.shape != shape:
        raise ValidationError(f"weights must have shape (n, n_classes) = {shape}, got {P.shape}")
    # Two reductions and no temporaries (this runs every round): a NaN or infinite entry makes
    # the sum or the minimum non-finite, and only then is the array scanned for one.
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum is reported below
        total = float(P.sum())
    low = float(P.min()) if P.size else 0.0
    if not (math.isfinite(total) and math.isfinite(low)) and not np.isfinite(P).all():
        raise ValidationError("weights must be finite (found NaN or inf)")
    if low < 0:
        raise ValidationError(f"weights must be non-negative (min {low:.3g})")
    if abs(total - 1.0) > WEIGHT_SUM_TOL:
        raise ValidationError(f"weights must sum to 1 (a distribution over (x_i, k)); they sum to {total:.9g}")
    return P


def check_native_load_args(n_classes: Any, n_features: Any, categorical_features: Any) -> tuple[int, int, tuple[int, ...]]:
    """Check the description that comes with a model's bytes (:meth:`Backend.load_native_bytes`)."""
    if isinstance(n_classes, bool) or not isinstance(n_classes, numbers.Integral) or n_classes < 2:
        raise ValidationError(f"n_classes must be an integer >= 2, got {n_classes!r}")
    if isinstance(n_features, bool) or not isinstance(n_features, numbers.Integral) or n_features < 1:
        raise ValidationError(f"n_features must be an integer >= 1, got {n_features!r}")
    return int(n_classes), int(n_features), check_categorical_features(categorical_features, int(n_features))


def check_native_bytes(data: Any, library: str) -> bytes:
    """``data`` as ``bytes``; anything else is not a model of ``library``."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data)
        if data:
            return data
        raise ValidationError(f"the data is not a valid {library} model: it is empty")
    raise ValidationError(f"the data is not a valid {library} model: expected bytes, got {type(data).__name__}")
