"""The comparison methods of the paper's experiments (Section 4), as scikit-learn classifiers.

* :class:`GBDTClassifier` (``"gbdt"``, alias ``"baseline"``): plain gradient boosting, the
  backend's own multi-round training (:meth:`budro.backends.base.Backend.fit_native`);
* :class:`ProjectClassifier` (``"project"``): project the data onto the orthogonal complement of
  the sensitive subspace of the fair metric (Yurochkin et al. 2020), then plain boosting;
* :class:`ReweighClassifier` (``"reweigh"``): Kamiran & Calders (2012) reweighing for discrete
  protected attributes, row weight ``P(s) P(y) / P(s, y)``, then plain boosting with those weights;
* ``"budro"``: :class:`budro.BuDROClassifier` itself.

:data:`METHODS` maps each name to its classifier; :func:`make_method` builds one from config
parameters, so experiment configs name methods, never code::

    from budro.baselines import make_method
    clf = make_method("project", backend="xgboost", backend_params={"max_depth": 4}, n_rounds=100,
                      protected=["age"])
"""

from __future__ import annotations

import difflib
import inspect
import numbers
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from budro import registry
from budro.backends._common import BuiltinBackend, check_float32_range
from budro.estimator import PREPROCESSING, BuDROClassifier
from budro.exceptions import ConfigError, ValidationError
from budro.tables import DEFAULT_MAX_CATEGORIES, is_table, table_needs_encoding

__all__ = [
    "GBDTClassifier",
    "ProjectClassifier",
    "ReweighClassifier",
    "METHODS",
    "MethodEntry",
    "available_methods",
    "get_method",
    "make_method",
    "reweighing_weights",
]


# ---------------------------------------------------------------------------------- helpers


def _make_plugin(kind: str, name: str, params: dict | None, random_state: int | None, attr: str):
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ValidationError(f"{attr}_params must be a dict or None, got {type(params).__name__}")
    entry = registry.get(kind, name)
    params = dict(params)
    if "random_state" in entry.spec.parameters and "random_state" not in params:
        params["random_state"] = random_state
    try:
        return registry.create(kind, entry.name, **params)
    except ConfigError as exc:
        raise ConfigError(f"{attr}_params: {exc}") from None


def _check_n_rounds(n_rounds: Any) -> int:
    if isinstance(n_rounds, bool) or not isinstance(n_rounds, numbers.Integral) or n_rounds < 1:
        raise ValidationError(f"n_rounds must be an integer >= 1, got {n_rounds!r}")
    return int(n_rounds)


def _protected_indices(protected: Sequence[str | int] | None, names: Sequence[str], n_features: int) -> tuple[int, ...]:
    """Column positions of ``protected`` (names need a DataFrame at fit time)."""
    if protected is None:
        return ()
    if isinstance(protected, (str, numbers.Integral)):
        raise ValidationError(f"protected must be a list of column names or indices, got {protected!r}")
    names = list(names)
    out = []
    for p in protected:
        if isinstance(p, str):
            if p not in names:
                where = f"the columns are: {', '.join(map(str, names))}" if names else "X has no column names (pass a DataFrame, or use indices)"
                raise ValidationError(f"protected attribute {p!r} is not a column of X; {where}")
            out.append(names.index(p))
        elif isinstance(p, numbers.Integral) and not isinstance(p, bool):
            if not -n_features <= p < n_features:
                raise ValidationError(f"protected column index {p} is out of range for {n_features} features")
            out.append(int(p) % n_features)
        else:
            raise ValidationError(f"protected must hold column names or indices, got {p!r}")
    if len(set(out)) != len(out):
        raise ValidationError(f"protected lists a column twice: {list(protected)!r}")
    return tuple(out)


class _BoostedBase(ClassifierMixin, BaseEstimator):
    """Shared fit/predict plumbing: a backend trained by ``fit_native`` on (transformed) X.

    Inputs follow :class:`budro.BuDROClassifier`'s ``preprocessing``: a table that needs it (string,
    categorical or boolean columns, missing values) goes through a :class:`budro.tables.TableEncoder`
    fitted on the training rows (``table_``); prepared numeric data is used as a float matrix, as
    before tables existed, so the paper's experiments give the same models.
    """

    #: Which matrix of the table encoder the model trains on: "booster" (codes or one-hot, NaN
    #: kept where the backend takes it) or "metric" (the fair metric's embedding).
    _table_matrix = "booster"

    def _prepare(self, X: Any, y: Any, protected: Any = ()):
        """``(matrix, y_enc)``: X as the model's float matrix (``table_`` fitted when X needs one) and
        the encoded labels; ``protected_indices_`` set when ``protected`` is given."""
        if self.preprocessing not in PREPROCESSING:
            raise ValidationError(
                f"preprocessing must be one of {', '.join(map(repr, PREPROCESSING))}, got {self.preprocessing!r}"
            )
        if protected is not None and isinstance(protected, (str, numbers.Integral)):
            raise ValidationError(f"protected must be a list of column names or indices, got {protected!r}")
        use_table = table_needs_encoding(X) if self.preprocessing == "auto" else self.preprocessing == "table"
        if use_table:
            X, y = self._encode_table(X, y, tuple(protected or ()))
        else:
            self.table_ = None
            X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=1)
            self.protected_indices_ = _protected_indices(protected, getattr(self, "feature_names_in_", []),
                                                         self.n_features_in_)
        check_classification_targets(y)
        self.classes_, y_enc = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError(
                f"{type(self).__name__} needs at least 2 classes in y; got 1 class: {self.classes_.tolist()}"
            )
        return X, y_enc

    def _encode_table(self, X: Any, y: Any, protected: tuple):
        """Fit ``table_`` on X (as :class:`budro.BuDROClassifier` does: codes for a backend with
        native categoricals, else one-hot); the model's matrix and the labels."""
        from budro.estimator import _check_labels, _fit_table

        encoder = _fit_table(self, X, protected)
        y = _check_labels(y)
        matrix = encoder.metric_matrix(X) if self._table_matrix == "metric" else encoder.booster_matrix(X)
        if y.shape[0] != matrix.shape[0]:
            raise ValidationError(f"X has {matrix.shape[0]} rows but y has {y.shape[0]} labels")
        return matrix, y

    def _categorical_features(self) -> tuple[int, ...]:
        table = self.table_
        return table.categorical_features_ if table is not None and self._table_matrix == "booster" else ()

    def _fit_backend(self, X: np.ndarray, y_enc: np.ndarray, sample_weight: Any = None) -> None:
        n_rounds = _check_n_rounds(self.n_rounds)
        backend = _make_plugin("backend", self.backend, self.backend_params, self.random_state, "backend")
        if isinstance(backend, BuiltinBackend):  # its float32 limit, naming the column (check_X gives positions)
            names = getattr(self.table_, "booster_feature_names_", None) if self._table_matrix == "booster" else None
            if names is None and hasattr(self, "feature_names_in_") and self._table_matrix == "booster":
                names = list(self.feature_names_in_)
            check_float32_range(X, "X", names)
        self.backend_ = backend.fit_native(X, y_enc, int(self.classes_.size), n_rounds,
                                           random_state=self.random_state, sample_weight=sample_weight,
                                           categorical_features=self._categorical_features())

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return X

    def _model_input(self, X: Any) -> np.ndarray:
        """New rows as the matrix the backend was trained on."""
        check_is_fitted(self)
        table = getattr(self, "table_", None)
        if table is not None:
            X = table.metric_matrix(X) if self._table_matrix == "metric" else table.booster_matrix(X)
        else:
            if is_table(X) and table_needs_encoding(X):
                raise ValidationError(
                    "X has non-numeric columns or missing values, but this model was trained on numeric data "
                    "without table preprocessing; pass the same kind of numeric data it was trained on"
                )
            X = validate_data(self, X, dtype=np.float64, reset=False)
        return self._transform(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, columns in the order of ``classes_``."""
        return self.backend_.predict_proba(self._model_input(X))

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def decision_margin(self, X: Any) -> np.ndarray:
        """Raw margins of the boosted model (log-odds for two classes)."""
        return self.backend_.predict_margin(self._model_input(X))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # "auto" sends arrays with NaN through the table encoder
        return tags


# ---------------------------------------------------------------------------------- plain GBDT


class GBDTClassifier(_BoostedBase):
    """Plain gradient-boosted trees through a budro backend (the paper's "Baseline").

    Parameters
    ----------
    backend : str, default "xgboost"
        A name from ``budro.registry.available("backend")``.
    backend_params : dict, optional
        Parameters of the backend, as for :class:`budro.BuDROClassifier` (``weight_scale`` included).
    n_rounds : int, default 100
        Boosting rounds (trees per class).
    random_state : int, optional
        Seed handed to the backend.
    preprocessing : {"auto", "table", "none"}, default "auto"
        As for :class:`budro.BuDROClassifier`: with ``"table"`` (chosen by ``"auto"`` for a table
        with string, categorical or boolean columns or missing values) X goes through a
        :class:`budro.tables.TableEncoder` (``table_``) and the backend gets its booster matrix:
        numeric columns as they are (NaN kept for a backend that takes missing values), categorical
        columns as category codes split on natively by a backend that declares
        ``"native-categorical"``, else one-hot.  ``"none"``: X must be numeric, used unchanged.
    max_categories : int, default 1000
        With table preprocessing: a categorical column with more distinct values is refused.

    Attributes
    ----------
    table_ : TableEncoder or None
        The fitted table encoder with table preprocessing, else None.
    """

    _table_matrix = "booster"

    def __init__(self, backend: str = "xgboost", backend_params: dict | None = None, n_rounds: int = 100,
                 random_state: int | None = None, preprocessing: str = "auto",
                 max_categories: int = DEFAULT_MAX_CATEGORIES):
        self.backend = backend
        self.backend_params = backend_params
        self.n_rounds = n_rounds
        self.random_state = random_state
        self.preprocessing = preprocessing
        self.max_categories = max_categories

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> "GBDTClassifier":
        """Fit on ``X`` and ``y``; ``sample_weight`` (n,) is handed to the backend's ``fit_native``."""
        X, y_enc = self._prepare(X, y)
        self._fit_backend(X, y_enc, sample_weight)
        return self


# ---------------------------------------------------------------------------------- project


class ProjectClassifier(_BoostedBase):
    """Project out the sensitive subspace, then plain boosting (the paper's "Project").

    The fair metric is learned on the training data exactly as BuDRO learns it; every input (at
    fit and at predict time) is replaced by its orthogonal projection onto the complement of the
    sensitive subspace, ``x -> (I - P_A) x``, in the original coordinates.  The model is blind to
    every protected direction (indicators included), so it cannot use them, but it still uses
    features merely correlated with them (the paper's point).

    Parameters
    ----------
    backend, backend_params, n_rounds, random_state :
        As for :class:`GBDTClassifier`.
    fair_metric : str, default "sensitive-subspace"
        A fair-metric learner whose fitted metric is a subspace metric (``project(X)`` or
        ``complement_``).
    fair_metric_params : dict, optional
    protected : sequence of str or int, optional
        Protected attributes (column names with DataFrame input, or indices), numeric or
        categorical as for :class:`budro.BuDROClassifier`.
    preprocessing, max_categories :
        As for :class:`GBDTClassifier`, except that with table preprocessing the fair metric and
        the projection work in the fair metric's coordinates, the table encoder's
        :meth:`~budro.tables.TableEncoder.metric_matrix` (numerics imputed and standardised,
        categoricals one-hot, every one-hot column of a protected one protected), exactly as
        BuDRO's metric; the backend trains on that embedding projected.

    Attributes
    ----------
    fair_metric_ : fitted fair metric
    projector_ : (d, d) array
        ``I - P_A`` (d: columns of X, or of the metric embedding with table preprocessing).
    protected_indices_ : tuple of int
        Columns of X that are protected.
    table_ : TableEncoder or None
    """

    _table_matrix = "metric"

    def __init__(self, backend: str = "xgboost", backend_params: dict | None = None, n_rounds: int = 100,
                 fair_metric: str = "sensitive-subspace", fair_metric_params: dict | None = None,
                 protected: Sequence[str | int] | None = None, random_state: int | None = None,
                 preprocessing: str = "auto", max_categories: int = DEFAULT_MAX_CATEGORIES):
        self.backend = backend
        self.backend_params = backend_params
        self.n_rounds = n_rounds
        self.fair_metric = fair_metric
        self.fair_metric_params = fair_metric_params
        self.protected = protected
        self.random_state = random_state
        self.preprocessing = preprocessing
        self.max_categories = max_categories

    def fit(self, X: Any, y: Any) -> "ProjectClassifier":
        X, y_enc = self._prepare(X, y, self.protected)
        # the metric's own coordinates: X itself, or the table's embedding (protected one-hot columns)
        protected = self.protected_indices_ if self.table_ is None else self.table_.protected_metric_indices_
        learner = _make_plugin("fair_metric", self.fair_metric, self.fair_metric_params, self.random_state, "fair_metric")
        self.fair_metric_ = learner.fit(X, protected, y=y_enc)
        self.projector_ = _projector(self.fair_metric_)
        self._fit_backend(self._transform(X), y_enc)
        return self

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return X @ self.projector_


def _projector(metric: Any) -> np.ndarray:
    """``I - P_A`` of a fitted subspace metric."""
    projector = getattr(metric, "projector", None)
    if callable(projector):
        return np.asarray(projector(), dtype=np.float64)
    complement = getattr(metric, "complement_", None)
    if complement is not None:
        complement = np.asarray(complement, dtype=np.float64)
        return complement @ complement.T
    raise ValidationError(
        f"the project method needs a subspace fair metric (one with complement_ or projector()); "
        f"{type(metric).__name__} has neither"
    )


# ---------------------------------------------------------------------------------- reweigh


def reweighing_weights(groups: Any, y: Any) -> np.ndarray:
    """Kamiran & Calders (2012) weights ``w_i = P(s = s_i) P(y = y_i) / P(s = s_i, y = y_i)``.

    ``groups`` is (n,) or (n, k): the protected attribute(s) of each row (numbers or strings); with
    several columns the group ``s`` is the combination of their values.  Probabilities are empirical frequencies, so
    the weights average to 1 and make ``s`` and ``y`` independent in the weighted data.
    """
    y = np.asarray(y).reshape(-1)
    g = np.asarray(groups)
    if g.ndim == 1:
        g = g[:, None]
    if g.ndim != 2 or g.shape[0] != y.shape[0]:
        raise ValidationError(f"groups must have one row per label ({y.shape[0]}), got shape {np.shape(groups)}")
    n = y.shape[0]
    if n == 0:
        raise ValidationError("reweighing needs at least one row")
    # each column's values as level numbers first: any dtype (strings too), then their combinations
    try:
        codes = np.column_stack([np.unique(g[:, j], return_inverse=True)[1].reshape(-1) for j in range(g.shape[1])])
    except TypeError as exc:  # values that do not sort together (e.g. None among strings)
        raise ValidationError(f"groups: the values of a column cannot be compared ({exc}); give one type per column") from None
    _, s = np.unique(codes, axis=0, return_inverse=True)
    s = s.reshape(-1)
    _, yk = np.unique(y, return_inverse=True)
    yk = yk.reshape(-1)
    joint = np.zeros((s.max() + 1, yk.max() + 1))
    np.add.at(joint, (s, yk), 1.0)
    p_s = joint.sum(axis=1) / n
    p_y = joint.sum(axis=0) / n
    p_sy = joint / n
    return p_s[s] * p_y[yk] / p_sy[s, yk]


class ReweighClassifier(_BoostedBase):
    """Kamiran & Calders (2012) reweighing, then plain boosting (the paper's "Reweigh").

    Each training row gets the weight ``P(s) P(y) / P(s, y)`` (:func:`reweighing_weights`), where
    ``s`` is the combination of the values of the ``protected`` columns, and the backend trains
    with those row weights.  A group-fairness method: it needs discrete protected attributes.

    Parameters
    ----------
    backend, backend_params, n_rounds, random_state :
        As for :class:`GBDTClassifier`.
    protected : sequence of str or int
        The discrete protected attribute(s) (column names with pandas input, or indices).
    max_levels : int, default 10
        A protected column with more distinct values is rejected as not discrete (e.g. age).
    preprocessing, max_categories :
        As for :class:`GBDTClassifier` (the backend gets the table encoder's booster matrix).  The
        groups ``s`` are the protected columns' own values: the categories of a string or
        categorical column, the numbers of a numeric one; a missing value is one more level.

    Attributes
    ----------
    sample_weight_ : (n,) array
        The weights the model was trained with.
    protected_indices_ : tuple of int
        Columns of X that are protected.
    table_ : TableEncoder or None
    """

    _table_matrix = "booster"

    def __init__(self, backend: str = "xgboost", backend_params: dict | None = None, n_rounds: int = 100,
                 protected: Sequence[str | int] | None = None, max_levels: int = 10,
                 random_state: int | None = None, preprocessing: str = "auto",
                 max_categories: int = DEFAULT_MAX_CATEGORIES):
        self.backend = backend
        self.backend_params = backend_params
        self.n_rounds = n_rounds
        self.protected = protected
        self.max_levels = max_levels
        self.random_state = random_state
        self.preprocessing = preprocessing
        self.max_categories = max_categories

    def fit(self, X: Any, y: Any) -> "ReweighClassifier":
        if isinstance(self.max_levels, bool) or not isinstance(self.max_levels, numbers.Integral) or self.max_levels < 2:
            raise ValidationError(f"max_levels must be an integer >= 2, got {self.max_levels!r}")
        raw = X
        X, y_enc = self._prepare(X, y, self.protected)
        protected = self.protected_indices_
        if not protected:
            raise ValidationError("reweigh needs at least one protected attribute (protected=[...])")
        values = self._protected_values(raw, X)
        names = list(getattr(self, "feature_names_in_", []))
        levels = np.empty(values.shape, dtype=np.intp)
        for j, p in enumerate(protected):
            distinct, levels[:, j] = np.unique(values[:, j], return_inverse=True, equal_nan=True)
            if distinct.size > self.max_levels:
                label = repr(names[p]) if names else f"column {p}"
                raise ValidationError(
                    f"reweigh needs discrete protected attributes: {label} takes {distinct.size} values "
                    f"(more than max_levels={self.max_levels}); reweighing does not apply to a continuous attribute"
                )
        self.sample_weight_ = reweighing_weights(levels, y_enc)
        self._fit_backend(X, y_enc, self.sample_weight_)
        return self

    def _protected_values(self, raw: Any, X: np.ndarray) -> np.ndarray:
        """(n, k) float values of the protected columns (NaN: missing): columns of the float matrix
        X, or with table preprocessing the raw columns (category codes of string/categorical ones;
        numbers as given, not imputed)."""
        if self.table_ is None:
            return X[:, list(self.protected_indices_)]
        table = self.table_
        num, codes = table._encode(raw)  # numeric block and category codes, in the table's column order
        numeric, categorical = table._numeric_names(), table._categorical_names()
        cols = [codes[:, categorical.index(c)] if c in categorical else num[:, numeric.index(c)]
                for c in table.protected_columns_]
        return np.column_stack(cols)


# ---------------------------------------------------------------------------------- the method table


@dataclass(frozen=True)
class MethodEntry:
    """One row of the method table."""

    name: str
    estimator: type
    description: str
    aliases: tuple[str, ...] = ()

    @property
    def parameters(self) -> dict[str, Any]:
        """Constructor parameters and their defaults."""
        sig = inspect.signature(self.estimator.__init__)
        return {k: p.default for k, p in sig.parameters.items() if k != "self"}


#: name -> method.  A method is a scikit-learn classifier class; its constructor parameters are
#: the keys a config's method section may set.
METHODS: dict[str, MethodEntry] = {
    entry.name: entry
    for entry in (
        MethodEntry("budro", BuDROClassifier, "BuDRO: individually fair boosting (Algorithm 3)"),
        MethodEntry("gbdt", GBDTClassifier, "plain gradient boosting (the backend's own training)", ("baseline",)),
        MethodEntry("project", ProjectClassifier, "project out the sensitive subspace, then plain boosting"),
        MethodEntry("reweigh", ReweighClassifier, "Kamiran-Calders reweighing, then plain boosting", ("reweighing",)),
    )
}
_ALIASES = {alias: entry.name for entry in METHODS.values() for alias in entry.aliases}


def available_methods() -> list[str]:
    """The method names (aliases not included)."""
    return list(METHODS)


def get_method(name: str) -> MethodEntry:
    """The table entry for a method name or alias."""
    if not isinstance(name, str):
        raise ConfigError(f"a method name must be a string, got {name!r}")
    key = _ALIASES.get(name, name)
    if key not in METHODS:
        close = difflib.get_close_matches(name, list(METHODS) + list(_ALIASES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown method {name!r}{hint}; choose one of: {', '.join(METHODS)}")
    return METHODS[key]


def make_method(name: str, **params: Any):
    """An unfitted classifier for method ``name`` with constructor parameters ``params``."""
    entry = get_method(name)
    accepted = entry.parameters
    for key in params:
        if key not in accepted:
            close = difflib.get_close_matches(key, list(accepted), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"method {entry.name!r} has no parameter {key!r}{hint}; accepted: {', '.join(accepted)}")
    return entry.estimator(**params)
