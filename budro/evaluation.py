"""Evaluation of any fitted classifier: accuracy, individual and group fairness, and the certificate.

Works for every classifier with ``predict`` (and ``predict_proba`` for the log-loss certificate),
not only budro's: scikit-learn, XGBoost, LightGBM, ...

* :func:`counterfactual_consistency`: the share of points whose predicted label is the same on
  every counterfactual copy of the data (the paper's S-cons, GR-cons, G-cons, R-cons; Appendix B.2).
* :func:`group_gaps`: ``Gap_y = P(yhat = y | Y = y, g = 0) - P(yhat = y | Y = y, g = 1)`` for every
  label y (the TPR gap and the TNR gap for two labels), their maximum absolute value ``Gap_Max``
  and root mean square ``Gap_RMS`` (De-Arteaga et al. 2019; paper, Appendix B.2, eq. (B.1)).
* :func:`fairness_certificate`: the a-posteriori certificate of Section 3, eq. (7):
  ``L(f) - (1/n) sum_i loss(f(x_i), y_i)``, the restricted robust loss minus the empirical loss,
  with a bootstrap confidence interval.
* :func:`evaluate`: all of them at once, as one flat dict (a row of a results table).
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from budro.datasets._base import ColumnAssignments
from budro.exceptions import BudroWarning, ValidationError

__all__ = [
    "Certificate",
    "ColumnValues",
    "GroupGapWarning",
    "GroupGaps",
    "counterfactual_consistency",
    "evaluate",
    "fairness_certificate",
    "group_gaps",
]

class GroupGapWarning(BudroWarning, RuntimeWarning):
    """A group gap cannot be computed on these rows, so it is NaN: the rows hold only one of the
    two groups (e.g. a small test split), or a group has no row with some label."""


#: Probabilities are clipped to ``[LOG_LOSS_CLIP, 1]`` before the log: the log loss stays finite
#: and bounded (at most ``-log(1e-15)``, about 34.5), as the paper's theory assumes.
LOG_LOSS_CLIP = 1e-15
_LOSSES = ("log_loss", "zero_one")


# ---------------------------------------------------------------------------------- consistency


def counterfactual_consistency(model: Any, X: Any, counterfactuals: Any, *, include_original: bool | None = None) -> float:
    """The share of points that get the same predicted label on every counterfactual copy of X.

    Following the paper (Appendix B.2), for an attribute with values V one builds |V| copies of
    the data, the attribute constant on each, and counts the points ``i`` with
    ``yhat_1[i] = ... = yhat_|V|[i]``.

    Parameters
    ----------
    model : fitted classifier
        Anything with ``predict``.
    X : array or DataFrame (n, d)
        The evaluation data.
    counterfactuals : callable or sequence
        Either a definition ``X -> list of copies of X`` (e.g. a data set's
        ``counterfactuals["S-cons"]``, a :class:`budro.datasets.ColumnAssignments`) or the list of
        copies itself.  Each copy has X's shape.
    include_original : bool, optional
        Whether the predictions on X itself join the comparison.  By default (None) only when
        there is a single copy: a definition returning one copy is a "flip" compared with X.

    Returns
    -------
    float in [0, 1]
    """
    _check_model(model, "predict")
    copies = counterfactuals(X) if callable(counterfactuals) else counterfactuals
    if isinstance(copies, (str, bytes)) or not isinstance(copies, Sequence) or len(copies) == 0:
        raise ValidationError(
            "counterfactuals must be a callable X -> list of copies of X, or a non-empty list of copies; "
            f"got {type(copies).__name__}"
        )
    if include_original is None:
        include_original = len(copies) == 1
    elif not isinstance(include_original, bool):
        raise ValidationError(f"include_original must be True, False or None, got {include_original!r}")
    n = _n_rows(X, "X")
    versions = ([X] if include_original else []) + list(copies)
    if len(versions) < 2:
        raise ValidationError("counterfactual_consistency needs at least two versions of the data to compare "
                              "(one copy and include_original=True, or two copies)")
    predictions = []
    for k, version in enumerate(versions):
        if _n_rows(version, f"counterfactual copy {k}") != n:
            raise ValidationError(f"counterfactual copy {k} has {_n_rows(version, 'copy')} rows, X has {n}")
        predictions.append(np.asarray(model.predict(version)).reshape(n, -1))
    first = predictions[0]
    same = np.ones(n, dtype=bool)
    for p in predictions[1:]:
        same &= np.all(p == first, axis=1)
    return float(same.mean()) if n else math.nan


class ColumnValues(ColumnAssignments):
    """Counterfactual copies of a table with columns set to given values of any type.

    The counterfactual flips of a raw table: ``ColumnValues.product({"sex": ["Male", "Female"]})``
    makes two copies of X, ``sex`` "Male" in every row of the first and "Female" in the second;
    ``ColumnValues.product({"sex": [...], "race": [...]})`` one copy per combination.  Unlike
    :class:`budro.datasets.ColumnAssignments` (numbers only), values may be strings, numbers or
    booleans, so the copies are raw tables that a model with its own encoding (a budro model with
    ``table_``, a scikit-learn pipeline) predicts on.  One-hot groups of numeric columns are
    ``ColumnValues.one_hot([...])``.

    Parameters
    ----------
    assignments : sequence of mappings column -> value
        One mapping per copy; column names for DataFrames (pandas or polars), integer positions
        for arrays.
    """

    def _value(self, k: int, column: Any, value: Any) -> Any:
        if not isinstance(value, (str, bool, numbers.Real, np.generic)) or (
                isinstance(value, numbers.Real) and not math.isfinite(float(value))):
            raise ValidationError(
                f"ColumnValues: assignments[{k}][{column!r}] must be a string, a finite number or a boolean, got {value!r}"
            )
        return value

    def __call__(self, X: Any) -> list[Any]:
        """The copies of ``X`` (pandas or polars DataFrame, or a 2-D array), one per assignment."""
        if hasattr(X, "with_columns"):  # polars
            import polars as pl

            missing = [c for c in self.columns if c not in X.columns]
            if missing:
                raise ValidationError(f"counterfactual flip: X has no column(s) {missing!r}")
            return [X.with_columns([pl.lit(v).cast(X.schema[c]).alias(c) for c, v in a.items()]) for a in self.assignments]
        if hasattr(X, "columns") and hasattr(X, "copy"):  # pandas
            missing = [c for c in self.columns if c not in X.columns]
            if missing:
                raise ValidationError(f"counterfactual flip: X has no column(s) {missing!r}")
            copies = []
            for assignment in self.assignments:
                Xc = X.copy()
                for column, value in assignment.items():
                    Xc[column] = _column_of(Xc[column], value, len(Xc))
                copies.append(Xc)
            return copies
        arr = np.asarray(X)
        if arr.ndim != 2:
            raise ValidationError(f"counterfactual flip: X must be a DataFrame or a 2-D array, got shape {arr.shape}")
        for c in self.columns:
            if isinstance(c, bool) or not isinstance(c, numbers.Integral) or not -arr.shape[1] <= c < arr.shape[1]:
                raise ValidationError(f"counterfactual flip: with an array X, columns must be positions in [0, {arr.shape[1]}); got {c!r}")
        copies = []
        for assignment in self.assignments:
            values = list(assignment.values())
            dtype = arr.dtype if all(isinstance(v, (numbers.Real, np.generic)) for v in values) and arr.dtype.kind in "fiub" else object
            Xc = arr.astype(np.result_type(dtype, float) if dtype is not object else object, copy=True)
            for column, value in assignment.items():
                Xc[:, column] = value
            copies.append(Xc)
        return copies


def _column_of(column: Any, value: Any, n: int) -> Any:
    """A pandas column of ``n`` copies of ``value``, keeping a categorical column categorical."""
    import pandas as pd

    dtype = column.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        if value not in dtype.categories:
            dtype = pd.CategoricalDtype(list(dtype.categories) + [value], ordered=dtype.ordered)
        return pd.Series(pd.Categorical([value] * n, dtype=dtype), index=column.index)
    if isinstance(value, str):
        out = pd.Series([value] * n, index=column.index)
        return out.astype(dtype) if pd.api.types.is_string_dtype(dtype) else out
    if isinstance(value, (bool, np.bool_)):
        return pd.Series([bool(value)] * n, index=column.index, dtype=dtype if pd.api.types.is_bool_dtype(dtype) else object)
    if dtype.kind in "fiu":
        return pd.Series(np.full(n, value, dtype=np.result_type(dtype, np.asarray(value).dtype)), index=column.index)
    return pd.Series([value] * n, index=column.index)


def flips_from_config(spec: Any, where: str = "counterfactuals") -> dict[str, ColumnValues]:
    """Counterfactual flips named in a config table (``[counterfactuals]``), each a :class:`ColumnValues`.

    * ``sex = ["Male", "Female"]``: the column ``sex`` set to each value in turn;
    * ``GR = { sex = ["Male", "Female"], race = ["White", "Black"] }``: one copy per combination;
    * ``spouse = { one_hot = ["rel=Husband", "rel=Wife", "rel=Own-child"], active = ["rel=Husband", "rel=Wife"] }``:
      a one-hot group of numeric columns, one copy per active column (default all).

    The consistency score of flip ``NAME`` is reported as ``consistency[NAME]``.
    """
    from budro.exceptions import ConfigError

    if not isinstance(spec, Mapping):
        raise ConfigError(f"config key '{where}' must be a table of flips (NAME = [values] or NAME = {{...}}), got {spec!r}")
    out: dict[str, ColumnValues] = {}
    for name, value in spec.items():
        key = f"{where}.{name}"
        try:
            if isinstance(value, list):
                out[str(name)] = ColumnValues.product({name: value})
            elif isinstance(value, Mapping) and "one_hot" in value:
                unknown = sorted(set(value) - {"one_hot", "active"})
                if unknown:
                    raise ConfigError(f"config key '{key}.{unknown[0]}' is not used by a one-hot flip (keys: one_hot, active)")
                columns, active = value["one_hot"], value.get("active")
                if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns) or (
                        active is not None and (not isinstance(active, list) or not all(isinstance(c, str) for c in active))):
                    raise ConfigError(f"config key '{key}': one_hot and active must be lists of column names, got {dict(value)!r}")
                out[str(name)] = ColumnValues.one_hot(columns, active)
            elif isinstance(value, Mapping) and value:
                bad = [c for c, v in value.items() if not isinstance(v, list)]
                if bad:
                    raise ConfigError(f"config key '{key}.{bad[0]}' must be a list of values, got {value[bad[0]]!r}")
                out[str(name)] = ColumnValues.product(dict(value))
            else:
                raise ConfigError(
                    f"config key '{key}' must be a list of values of column {name!r}, a table column -> list of values, "
                    f"or {{ one_hot = [columns] }}; got {value!r}"
                )
        except ConfigError:
            raise
        except ValidationError as exc:
            raise ConfigError(f"config key '{key}': {exc}") from None
    return out


def groups_from_config(spec: Any, where: str = "groups") -> dict[str, Any]:
    """Group definitions for the gaps (``[groups]``): ``age = 25`` (age < 25 against the rest),
    ``race = ["White"]`` or ``race = "White"`` (these values against the rest)."""
    from budro.exceptions import ConfigError

    if not isinstance(spec, Mapping):
        raise ConfigError(f"config key '{where}' must be a table COLUMN = threshold or value(s), got {spec!r}")
    out = {}
    for column, value in spec.items():
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            out[str(column)] = value if not isinstance(value, str) else [value]
        elif isinstance(value, list) and value and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
            out[str(column)] = list(value)
        else:
            raise ConfigError(f"config key '{where}.{column}' must be a number (threshold: below it against the rest) or "
                              f"a value or list of values (these against the rest), got {value!r}")
    return out


#: A protected column with at most this many distinct values gets a default flip over all of them.
MAX_FLIP_VALUES = 20


def table_fairness_definitions(X: Any, protected: Sequence[Any], *, flips: Mapping[str, Any] | None = None,
                               groups: Mapping[str, Any] | None = None) -> tuple[dict, dict, list[str]]:
    """Groups and counterfactual flips of a raw table's protected columns: ``(groups, flips, notes)``.

    Groups (for :func:`group_gaps`, two per protected column): as ``groups[column]`` says (a number
    t: ``column < t`` against the rest; values: those against the rest); else a column with two
    values as they are, a categorical one with more: its most frequent value against the rest, a
    numeric one: below its median against the rest.  Rows with a missing value count with the rest.

    Flips: ``flips`` when given (e.g. :func:`flips_from_config`), else one per protected column with
    at most :data:`MAX_FLIP_VALUES` distinct values, over all of them (a numeric column with more,
    e.g. age, gets none: name its values in the config).  ``notes`` say what was chosen.
    """
    import pandas as pd

    frame = X if isinstance(X, pd.DataFrame) else (X.to_pandas() if hasattr(X, "to_pandas") else pd.DataFrame(np.asarray(X)))
    spec = dict(groups or {})
    unknown = [c for c in list(spec) + list(protected) if c not in frame.columns]
    if unknown:
        raise ValidationError(f"column {unknown[0]!r} (protected or in [groups]) is not a column of the data; "
                              f"columns: {', '.join(map(str, frame.columns))}")
    out_groups: dict[str, np.ndarray] = {}
    notes: list[str] = []
    for column in dict.fromkeys(list(protected) + list(spec)):
        series = frame[column]
        missing = series.isna().to_numpy()
        rule = spec.get(column)
        numeric = pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)
        values = series.dropna().unique()
        if rule is None and len(values) == 2:
            a, b = sorted(values, key=str)
            member = (series == a).to_numpy() & ~missing
            first, rest = f"{column} = {a}", f"{column} = {b}"
        elif rule is None and not numeric:
            top = series.value_counts().index[0]
            member = (series == top).to_numpy() & ~missing
            first, rest = f"{column} = {top}", f"{column} != {top}"
        elif isinstance(rule, list):
            member = series.isin(rule).to_numpy() & ~missing
            shown = rule[0] if len(rule) == 1 else rule
            first, rest = f"{column} = {shown}" if len(rule) == 1 else f"{column} in {shown}", f"{column} other"
        else:
            if not numeric:
                raise ValidationError(f"groups: column {column!r} is not numeric, so it cannot be split at a threshold; "
                                      f"name values instead (e.g. {column} = [\"{values[0] if len(values) else 'a'}\"])")
            t = float(series.median()) if rule is None else float(rule)
            member = (series < t).to_numpy() & ~missing
            first, rest = f"{column} < {t:g}", f"{column} >= {t:g}"
        if missing.any():
            rest += " or missing"
        if member.all() or not member.any():
            notes.append(f"no gaps for {column!r}: every row falls in one group ({first if member.all() else rest})")
            continue
        out_groups[str(column)] = np.where(member, first, rest).astype(object)
        notes.append(f"groups of {column!r}: {first} vs {rest}")
    if flips:
        out_flips = dict(flips)
    else:
        out_flips = {}
        for column in protected:
            values = frame[column].dropna().unique()
            if 2 <= len(values) <= MAX_FLIP_VALUES:
                ordered = sorted((v.item() if isinstance(v, np.generic) else v for v in values), key=str)
                out_flips[str(column)] = ColumnValues.product({column: ordered})
            else:
                notes.append(f"no flip for {column!r} ({len(values)} distinct values): name the values to compare in the "
                             f"config, e.g. [counterfactuals] {column} = [...]")
    return out_groups, out_flips, notes


# ---------------------------------------------------------------------------------- group gaps


@dataclass(frozen=True)
class GroupGaps:
    """The group-fairness gaps of one protected attribute (De-Arteaga et al. 2019).

    Attributes
    ----------
    gaps : dict label -> float
        ``Gap_y = P(yhat = y | Y = y, g = group_0) - P(yhat = y | Y = y, g = group_1)``; for labels
        {0, 1} ``gaps[1]`` is the TPR gap and ``gaps[0]`` the TNR gap.  NaN where a group has no
        point with label y.
    gap_max : float
        ``max_y |Gap_y|``.
    gap_rms : float
        ``sqrt(mean_y Gap_y^2)``.
    groups : (group_0, group_1)
        The two group values, the "protected" one (g = 0 in the paper) first.
    """

    gaps: dict
    gap_max: float
    gap_rms: float
    groups: tuple


def group_gaps(y_true: Any, y_pred: Any, group: Any, *, labels: Sequence | None = None,
               protected_value: Any = None) -> GroupGaps:
    """``Gap_Max`` and ``Gap_RMS`` of the per-label recall gaps between two groups.

    Parameters
    ----------
    y_true, y_pred : array (n,)
        True and predicted labels.
    group : array (n,)
        Group membership; exactly two distinct values.
    labels : sequence, optional
        The label set Y over which the gaps are taken; default the labels present in ``y_true``.
    protected_value : optional
        The value of ``group`` playing g = 0 (the gaps' sign only; ``Gap_Max`` and ``Gap_RMS`` do
        not depend on it).  Default: the smaller of the two values.

    Returns
    -------
    GroupGaps
    """
    y_true = _as_1d(y_true, "y_true")
    y_pred = _as_1d(y_pred, "y_pred")
    group = _as_1d(group, "group")
    n = y_true.shape[0]
    if y_pred.shape[0] != n or group.shape[0] != n:
        raise ValidationError(
            f"y_true, y_pred and group must have the same length; got {n}, {y_pred.shape[0]} and {group.shape[0]}"
        )
    values = np.unique(group)
    if values.shape[0] != 2:
        raise ValidationError(
            f"group must hold exactly two groups (the gaps compare g = 0 with g = 1); it holds {values.shape[0]}: "
            f"{values.tolist()[:10]!r}"
        )
    if protected_value is None:
        g0, g1 = values[0], values[1]
    else:
        if protected_value not in values:
            raise ValidationError(f"protected_value={protected_value!r} is not one of the group values {values.tolist()!r}")
        g0 = protected_value
        g1 = values[1] if values[0] == protected_value else values[0]
    labels = np.unique(y_true) if labels is None else list(labels)
    if len(labels) == 0:
        raise ValidationError("labels must not be empty (and y_true must not be empty)")
    gaps = {}
    for label in labels:
        rates = []
        for g in (g0, g1):
            rows = (y_true == label) & (group == g)
            rates.append(float(np.mean(y_pred[rows] == label)) if rows.any() else math.nan)
        gaps[_plain(label)] = rates[0] - rates[1]
    vals = np.array(list(gaps.values()), dtype=float)
    if np.isnan(vals).any():
        empty = [k for k, v in gaps.items() if math.isnan(v)]
        warnings.warn(f"group_gaps: a group has no point with label(s) {empty!r}; their gap is NaN", GroupGapWarning,
                      stacklevel=2)
    return GroupGaps(
        gaps=gaps,
        gap_max=float(np.max(np.abs(vals))) if not np.isnan(vals).any() else math.nan,
        gap_rms=float(np.sqrt(np.mean(vals**2))),
        groups=(_plain(g0), _plain(g1)),
    )


# ---------------------------------------------------------------------------------- certificate


@dataclass(frozen=True)
class Certificate:
    """The a-posteriori fairness certificate (paper, Section 3, eq. (7)).

    Attributes
    ----------
    gap : float
        ``robust_loss - empirical_loss`` (>= 0 for an exact solver): how much the loss can grow
        when the data are moved within fair-transport budget ``eps``.  Small means individually fair.
    robust_loss : float
        The restricted robust loss ``L(f)`` (eq. (3)): the optimum of the transport LP.
    empirical_loss : float
        ``(1/n) sum_i loss(f(x_i), y_i)``.
    eps : float
        The transport budget.
    n_samples : int
        Rows the certificate was computed on (after ``max_samples`` subsampling).
    loss : str
        ``"log_loss"`` or ``"zero_one"``.
    ci_low, ci_high : float
        Percentile-bootstrap confidence interval of ``gap`` (NaN without bootstrap).
    confidence_level : float
    bootstrap_gaps : array
        The gap of every bootstrap resample (empty without bootstrap).
    transport : TransportResult
        The solver's result on the full evaluation set (plan, ``eta``, convergence, ...).
    """

    gap: float
    robust_loss: float
    empirical_loss: float
    eps: float
    n_samples: int
    loss: str
    ci_low: float = math.nan
    ci_high: float = math.nan
    confidence_level: float = 0.95
    bootstrap_gaps: np.ndarray = field(default_factory=lambda: np.empty(0))
    transport: Any = None

    def as_dict(self) -> dict[str, float]:
        """The numbers, flat (for a results table)."""
        return {
            "certificate": self.gap,
            "certificate_ci_low": self.ci_low,
            "certificate_ci_high": self.ci_high,
            "robust_loss": self.robust_loss,
            "empirical_loss": self.empirical_loss,
        }


def fairness_certificate(
    model: Any,
    X: Any,
    y: Any,
    metric: Any,
    eps: float,
    *,
    loss: str = "log_loss",
    solver: Any = "dual",
    n_neighbors: int | None = None,
    max_samples: int | None = None,
    n_bootstrap: int = 0,
    confidence_level: float = 0.95,
    random_state: Any = None,
    metric_X: Any = None,
) -> Certificate:
    """The certificate ``L(f) - (1/n) sum_i loss(f(x_i), y_i)`` of eq. (7), with a bootstrap interval.

    ``L(f)`` is the restricted robust loss (eq. (3)): the largest mean loss over distributions on
    the augmented support ``{(x_i, y_i), (x_i, 1 - y_i)}`` within fair-transport distance ``eps``
    of the data, i.e. the transport LP of eq. (4) with ``losses[i, k] = loss(f(x_i), k)`` and cost
    ``C_ij = d_x(x_i, x_j)^2`` (points keep their labels), solved exactly by a budro solver.
    Theorem 1 makes this empirical gap an estimate of its population value, so a small value
    certifies the model as individually fair with respect to ``metric``.

    Parameters
    ----------
    model : fitted classifier
        ``predict_proba`` (``loss="log_loss"``) or ``predict`` (``loss="zero_one"``), and
        ``classes_`` (the label of each ``predict_proba`` column; without it the labels must be
        0, ..., K - 1).
    X : array or DataFrame (n, d)
        Evaluation data, as the model and the metric expect them (e.g. the test split).
    y : array (n,)
        True labels.
    metric : fitted fair metric
        A :class:`budro.metrics.base.FittedFairMetric` (e.g. from
        ``budro.registry.create("fair_metric", "sensitive-subspace").fit(X_train, protected)``): it
        provides ``cost(X)`` and, for Mahalanobis metrics, ``embed(X)``.
    eps : float
        Transport budget (>= 0), in the units of squared fair distances.
    loss : {"log_loss", "zero_one"}, default "log_loss"
        ``-log p_k(x)`` (probabilities clipped at 1e-15), or ``1[predict(x) != k]``.
    solver : str or solver, default "dual"
        A solver name for ``budro.registry.create("solver", ...)`` or a solver instance.  With an
        exact solver ("dual", "lp") the certificate is exact and >= 0.
    n_neighbors : int, optional
        Memory: by default the cost is ``metric.cost(X)``; for Mahalanobis metrics an
        :class:`~budro.transport.EmbeddingCost`, which never holds more than one block of columns
        (about 32 MiB) beyond a full matrix of at most 256 MiB (n <= 5800), but takes O(n^2) time
        per dual evaluation.  With ``n_neighbors = m`` each point may only move to its m nearest
        neighbours in the fair metric (:class:`~budro.transport.NeighborCost`, O(n m) memory for
        the cost; the solver's time depends on how it reads it): the value is then a lower bound
        of the exact ``L(f)``, equal to it when every move the optimal plan makes stays within m
        neighbours.  Needs ``metric.embed``.
    max_samples : int, optional
        Compute on a random subsample of at most this many rows (without replacement, drawn with
        ``random_state``); another way to bound time and memory for large n.
    n_bootstrap : int, default 0
        Bootstrap resamples (rows drawn with replacement, the cost rebuilt on each) for the
        percentile confidence interval; each costs one more transport solve.
    confidence_level : float, default 0.95
        Level of the interval, in (0, 1).
    random_state : None, int or numpy Generator
        Seeds subsampling and bootstrap.
    metric_X : array (n, d'), optional
        The same rows in the fair metric's coordinates, when the model takes another form of them
        (a raw table for a model with its own encoding, e.g. ``model.metric_matrix(X)`` of a budro
        model with ``table_``).  Default: ``X`` itself, which must then be numeric.

    Returns
    -------
    Certificate

    Notes
    -----
    At ``eps = 0`` only moves of zero cost are allowed, so the certificate is 0 unless two points
    at fair distance 0 (e.g. differing only in protected directions) have different losses; then
    it is the gain of such free moves, which is itself a violation of individual fairness.

    The interval is a percentile bootstrap over rows.  A resample holds only about 63% distinct
    points, and ``L(f)`` can only move mass onto points of the sample, so resampled gaps tend to
    lie below the full-sample gap (the same downward bias that Theorem 1 bounds for finite n).
    Read the interval as the sampling variability of the certificate, not as an exact coverage
    statement, and compare certificates computed on the same number of rows.
    """
    from budro.transport import EmbeddingCost, NeighborCost, TransportProblem

    if loss not in _LOSSES:
        raise ValidationError(f"loss must be one of {', '.join(map(repr, _LOSSES))}, got {loss!r}")
    _check_model(model, "predict_proba" if loss == "log_loss" else "predict")
    eps = _check_number(eps, "eps", minimum=0.0)
    n_bootstrap = _check_int(n_bootstrap, "n_bootstrap", minimum=0)
    if n_neighbors is not None:
        n_neighbors = _check_int(n_neighbors, "n_neighbors", minimum=1)
    if max_samples is not None:
        max_samples = _check_int(max_samples, "max_samples", minimum=1)
    confidence_level = _check_number(confidence_level, "confidence_level", minimum=0.0)
    if not 0.0 < confidence_level < 1.0:
        raise ValidationError(f"confidence_level must lie in (0, 1), got {confidence_level!r}")
    if not callable(getattr(metric, "cost", None)):
        raise ValidationError(
            f"metric must be a fitted fair metric with a cost(X) method (e.g. from a fair-metric learner's fit), "
            f"got {type(metric).__name__}"
        )
    embed = getattr(metric, "embed", None)
    if n_neighbors is not None and not callable(embed):
        raise ValidationError(
            "n_neighbors needs a metric with an embedding (metric.embed(X)), e.g. the sensitive-subspace metric"
        )
    solver = _make_solver(solver)
    rng = np.random.default_rng(random_state)

    n = _n_rows(X, "X")
    y = _as_1d(y, "y")
    if y.shape[0] != n:
        raise ValidationError(f"y has {y.shape[0]} labels but X has {n} rows")
    if n == 0:
        raise ValidationError("X must have at least one row")
    losses, labels = _label_losses(model, X, y, loss)
    X_num = _numeric(X if metric_X is None else metric_X)
    if X_num.shape[0] != n:
        raise ValidationError(f"metric_X has {X_num.shape[0]} rows but X has {n}")
    if max_samples is not None and n > max_samples:
        keep = np.sort(rng.choice(n, size=max_samples, replace=False))
        losses, labels, X_num = losses[keep], labels[keep], X_num[keep]
        n = max_samples
    Z = np.asarray(embed(X_num), dtype=float) if callable(embed) else None

    def cost_of(rows: np.ndarray | None):
        if Z is None:
            return metric.cost(X_num if rows is None else X_num[rows])
        Zr = Z if rows is None else Z[rows]
        if n_neighbors is not None:
            return NeighborCost(Zr, n_neighbors)
        return EmbeddingCost(Zr)

    def gap_of(rows: np.ndarray | None):
        L = losses if rows is None else losses[rows]
        lab = labels if rows is None else labels[rows]
        result = solver.solve(TransportProblem(losses=L, labels=lab, cost=cost_of(rows), eps=eps))
        empirical = float(L[np.arange(L.shape[0]), lab].mean())
        gap = float(result.objective) - empirical
        # An exact optimum is never below the plan that moves nothing; only rounding can say so.
        if -1e-12 * max(1.0, abs(empirical)) < gap < 0.0:
            gap = 0.0
        return gap, float(result.objective), empirical, result

    gap, robust, empirical, result = gap_of(None)
    boot = np.array([gap_of(rng.integers(0, n, size=n))[0] for _ in range(n_bootstrap)], dtype=float)
    lo = hi = math.nan
    if n_bootstrap:
        alpha = 1.0 - confidence_level
        lo, hi = (float(v) for v in np.quantile(boot, [alpha / 2, 1 - alpha / 2]))
    return Certificate(gap=gap, robust_loss=robust, empirical_loss=empirical, eps=eps, n_samples=n, loss=loss,
                       ci_low=lo, ci_high=hi, confidence_level=confidence_level, bootstrap_gaps=boot, transport=result)


# ---------------------------------------------------------------------------------- all at once


def evaluate(
    model: Any,
    data: Any,
    y: Any = None,
    *,
    groups: Mapping[str, Any] | None = None,
    counterfactuals: Mapping[str, Any] | None = None,
    metric: Any = None,
    eps: float | None = None,
    certificate_params: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """Every metric available for the data, as one flat dict (a row of a results table).

    Parameters
    ----------
    model : fitted classifier
        Anything with ``predict`` (and ``predict_proba`` for the log-loss certificate).
    data : :class:`budro.datasets.Dataset` or array / DataFrame
        A data set (typically the test part of :meth:`Dataset.split`): its X, y, groups and
        counterfactual definitions are used.  Or the features X, with ``y`` given.
    y : array (n,), optional
        Labels, when ``data`` is not a Dataset.
    groups : mapping name -> array (n,), optional
        Group memberships for the gaps (default: the data set's).
    counterfactuals : mapping name -> definition, optional
        Counterfactual definitions (default: the data set's); see :func:`counterfactual_consistency`.
    metric : fitted fair metric, optional
        With ``eps``: compute the certificate (see :func:`fairness_certificate`).
    eps : float, optional
        Transport budget of the certificate.
    certificate_params : mapping, optional
        Further keyword arguments of :func:`fairness_certificate` (``n_bootstrap``, ``loss``, ...).

    Returns
    -------
    dict
        ``n_samples``, ``accuracy``, ``balanced_accuracy``; ``consistency[<name>]`` per
        counterfactual definition; ``gap_max[<group>]`` and ``gap_rms[<group>]`` per group (NaN,
        with a :class:`GroupGapWarning`, when the rows hold only one of the two groups, or a group
        has no row of some label: a small test split; more than two groups is an error); with a
        metric: ``certificate``, ``certificate_ci_low``, ``certificate_ci_high``, ``robust_loss``,
        ``empirical_loss``.
    """
    from sklearn.metrics import accuracy_score, balanced_accuracy_score

    from budro.datasets import Dataset

    _check_model(model, "predict")
    if isinstance(data, Dataset):
        if y is not None:
            raise ValidationError("y must not be given when data is a Dataset (its labels are used)")
        X, y = data.X, data.y
        groups = data.groups if groups is None else groups
        counterfactuals = data.counterfactuals if counterfactuals is None else counterfactuals
    else:
        if y is None:
            raise ValidationError("y is required when data is not a Dataset (data is then the features X)")
        X = data
    groups = {} if groups is None else groups
    counterfactuals = {} if counterfactuals is None else counterfactuals
    for name, value in (("groups", groups), ("counterfactuals", counterfactuals), ("certificate_params", certificate_params)):
        if value is not None and not isinstance(value, Mapping):
            raise ValidationError(f"{name} must be a mapping (dict), got {type(value).__name__}")
    if (metric is None) != (eps is None):
        raise ValidationError("metric and eps go together: give both to compute the certificate, or neither")

    y = _as_1d(y, "y")
    n = _n_rows(X, "X")
    if y.shape[0] != n:
        raise ValidationError(f"y has {y.shape[0]} labels but X has {n} rows")
    y_pred = np.asarray(model.predict(X)).reshape(n)
    row: dict[str, float] = {
        "n_samples": n,
        "accuracy": float(accuracy_score(y, y_pred)),
        "balanced_accuracy": float(balanced_accuracy_score(y, y_pred)),
    }
    for name, definition in counterfactuals.items():
        row[f"consistency[{name}]"] = counterfactual_consistency(model, X, definition)
    for name, g in groups.items():
        g_arr = _as_1d(g, f"groups[{name!r}]")
        present = np.unique(g_arr)
        if present.shape[0] == 1 and g_arr.shape[0] == n:
            # A definition of two groups of which these rows (e.g. a small test split) hold one:
            # the gap is undefined here, not an error of the definition.
            warnings.warn(
                f"gap of group {name!r} is NaN: the {n} rows hold only one of its groups ({_plain(present[0])!r})",
                GroupGapWarning, stacklevel=2,
            )
            row[f"gap_max[{name}]"] = row[f"gap_rms[{name}]"] = math.nan
            continue
        gaps = group_gaps(y, y_pred, g)
        row[f"gap_max[{name}]"] = gaps.gap_max
        row[f"gap_rms[{name}]"] = gaps.gap_rms
    if metric is not None:
        row.update(fairness_certificate(model, X, y, metric, eps, **dict(certificate_params or {})).as_dict())
    return row


# ---------------------------------------------------------------------------------- helpers


def _check_model(model: Any, method: str) -> None:
    if not callable(getattr(model, method, None)):
        raise ValidationError(f"model must be a fitted classifier with a {method}() method, got {type(model).__name__}")


def _make_solver(solver: Any):
    if isinstance(solver, str):
        from budro import registry

        return registry.create("solver", solver)
    if not callable(getattr(solver, "solve", None)):
        raise ValidationError(f"solver must be a solver name (e.g. 'dual') or a solver with solve(problem), got {solver!r}")
    return solver


def _label_losses(model: Any, X: Any, y: np.ndarray, loss: str) -> tuple[np.ndarray, np.ndarray]:
    """``losses[i, k] = loss(f(x_i), classes[k])`` and the column ``labels[i]`` of each ``y_i``."""
    classes = getattr(model, "classes_", None)
    n = y.shape[0]
    if loss == "log_loss":
        proba = np.asarray(model.predict_proba(X), dtype=float)
        if proba.ndim != 2 or proba.shape[0] != n:
            raise ValidationError(f"model.predict_proba(X) must have shape (n, K) = ({n}, K), got {proba.shape}")
        K = proba.shape[1]
    else:
        K = None
    if classes is None:
        if K is None:
            raise ValidationError("loss='zero_one' needs the model's classes_ (the labels it predicts)")
        classes = np.arange(K)
    classes = np.asarray(classes)
    K = classes.shape[0] if K is None else K
    if classes.shape[0] != K:
        raise ValidationError(f"model.classes_ has {classes.shape[0]} labels but predict_proba gives {K} columns")
    position = {_plain(c): k for k, c in enumerate(classes)}
    try:
        labels = np.array([position[_plain(v)] for v in y], dtype=np.intp)
    except KeyError as exc:
        raise ValidationError(
            f"y holds the label {exc.args[0]!r}, which the model does not know (classes: {classes.tolist()!r})"
        ) from None
    if loss == "log_loss":
        losses = -np.log(np.clip(proba, LOG_LOSS_CLIP, 1.0))
    else:
        pred = np.asarray(model.predict(X)).reshape(n)
        losses = (pred[:, None] != classes[None, :]).astype(float)
    return losses, labels


def _numeric(X: Any) -> np.ndarray:
    try:
        arr = np.asarray(X, dtype=float)
    except (TypeError, ValueError):
        raise ValidationError("X must be numeric for the fair metric (encode categorical columns first)") from None
    if arr.ndim != 2:
        raise ValidationError(f"X must be 2-D (n samples, d features), got shape {arr.shape}")
    return arr


def _n_rows(X: Any, name: str) -> int:
    shape = getattr(X, "shape", None)
    if shape is None:
        shape = np.shape(X)
    if len(shape) != 2:
        raise ValidationError(f"{name} must be 2-D (n samples, d features), got shape {tuple(shape)}")
    return int(shape[0])


def _as_1d(a: Any, name: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValidationError(f"{name} must be 1-D, got shape {arr.shape}")
    return arr


def _check_number(value: Any, name: str, *, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < minimum:
        raise ValidationError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


def _check_int(value: Any, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _plain(value: Any) -> Any:
    """numpy scalars as Python scalars (dict keys that compare and print naturally)."""
    return value.item() if isinstance(value, np.generic) else value
