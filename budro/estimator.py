"""scikit-learn estimator for BuDRO."""

from __future__ import annotations

import numbers
import time
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from budro import registry
from budro.backends._common import BuiltinBackend, check_float32_range
from budro.budget import check_budget, check_eps_unit, diagnose_budget, effective_eps
from budro.core import BuDRO, Callback, _check_eps, _check_n_neighbors, _check_n_steps, check_solver_size, expects_embedding
from budro.exceptions import ConfigError, ValidationError
from budro.tables import TableEncoder, is_table, table_needs_encoding

__all__ = ["BuDROClassifier", "PREPROCESSING"]

#: Values of ``BuDROClassifier(preprocessing=...)``.
PREPROCESSING = ("auto", "table", "none")


class BuDROClassifier(ClassifierMixin, BaseEstimator):
    """Individually fair gradient-boosted trees (BuDRO).

    Parameters are stored as given and validated in :meth:`fit`.

    Parameters
    ----------
    backend : str, default "xgboost"
        Booster backend, a name from ``budro.registry.available("backend")``.
    backend_params : dict, optional
        Parameters of the backend (e.g. ``{"max_depth": 4, "learning_rate": 0.1}``).
    solver : str, default "dual"
        Transport solver, a name from ``budro.registry.available("solver")`` or an alias.
    solver_params : dict, optional
    fair_metric : str, default "sensitive-subspace"
        Fair-metric learner, a name from ``budro.registry.available("fair_metric")``.
    fair_metric_params : dict, optional
    protected : sequence of str or int, optional
        Protected attributes: column names (DataFrame input) or column indices of ``X``, numeric
        (e.g. ``age``) or categorical (e.g. ``sex`` holding "Male"/"Female": every one-hot column of
        it in the fair metric's embedding is protected).  Without any, the sensitive-subspace metric
        is the plain Euclidean distance, so ``fit(X, y)`` works on any data.
    eps : float, default 0.1
        Transport budget: how far (in squared fair distance, on average) the adversary may move
        the data.  ``eps = 0`` is plain boosting.  The unit is set by ``eps_unit``.
    eps_unit : {"raw", "nn"}, default "raw"
        ``"raw"``: ``eps`` is a mean squared fair distance, measured in the fair metric's
        coordinates (with table preprocessing: :meth:`metric_matrix`, numerics standardised,
        categoricals one-hot); the paper's configs use these units.  ``"nn"``: ``eps`` is a multiple
        of the training table's nearest-neighbour scale ``eps_scale_``, the median squared fair
        distance from a training point to its nearest other distinct point (on a sample of 500
        points, each against all), so one budget means the same on any table (:mod:`budro.budget`).
    n_steps : int, default 100
        BuDRO rounds after the first plain round.
    random_state : int, optional
        Seed handed to the backend (and to solvers that take one).
    callbacks : sequence of callables, optional
        Called after each round with a :class:`budro.core.RoundInfo`; returning True stops.
    n_neighbors : int, "exact" or None, default None
        An integer m restricts the adversary to each point's m nearest neighbours in the fair
        metric (sparse cost, O(n m) per round): a restriction, whose robust loss is a lower bound
        of the full problem's.  None or ``"exact"``: the full problem, every point may move to
        every other (with the ``dual`` solver on a large embedding cost, the warm-started exact
        full-problem path; see docs/solvers.md).
    verbose : int, default 0
        0: silent.  > 0: a progress bar on stderr (:class:`budro.progress.ProgressBar`, drawn by
        tqdm) with the round, the robust and plain loss and the estimated time left.
    preprocessing : {"auto", "table", "none"}, default "auto"
        How ``X`` becomes the booster's matrix and the fair metric's points.

        - ``"table"``: through a :class:`budro.tables.TableEncoder` fitted on the training rows
          (attribute ``table_``): string, categorical and boolean columns and missing values are
          accepted.  The booster gets numeric columns as they are (NaN kept when the backend
          declares the capability ``"missing-values"``, else the training median), categorical
          columns as category codes when the backend declares ``"native-categorical"``, else
          one-hot.  The fair metric gets numeric columns imputed (median) and standardised and
          categorical ones imputed (most frequent) and one-hot; an unseen category at predict time
          is treated as missing by the booster and as all zeros by the metric, with a warning.
        - ``"none"``: ``X`` must be numeric without missing values; booster and metric both get it
          as a float matrix, unchanged (budro before tables; the paper's experiments, whose data
          sets are prepared and standardised beforehand).
        - ``"auto"``: ``"table"`` when ``X`` needs it (a DataFrame with a string, categorical,
          object or date column or a missing value; an array of strings or with NaN), else
          ``"none"``.  So prepared all-numeric data trains exactly as with ``"none"``.
    max_categories : int, default 1000
        With table preprocessing: a categorical column with more distinct training values is
        refused as an identifier (drop it, or raise this if it really is a category).

    Attributes
    ----------
    classes_, n_features_in_, feature_names_in_ :
        As in scikit-learn.
    backend_ : Backend
        The trained backend (``backend_.model`` is the library's own model object).
    fair_metric_ : FittedFairMetric
        The fitted fair metric.
    history_ : list of RoundRecord
        Per-round robust loss, plain loss, eta, transport cost and timings.
    protected_indices_ : tuple of int
        Columns of ``X`` that are protected.
    eps_scale_ : float
        The training table's nearest-neighbour scale (the unit of ``eps_unit="nn"``), computed for
        either unit; 0 when no point has a distinct neighbour in the fair metric.
    eps_effective_ : float
        The budget training used, in squared fair distance (``eps``, times ``eps_scale_`` for "nn").
    budget_ : budro.budget.BudgetDiagnosis
        What the metric and the labels allow the adversary (``budget_.table([...])`` lists the share of
        points each budget can relabel).  Fitting warns (:class:`budro.budget.DegenerateFairMetricWarning`,
        :class:`budro.budget.LargeBudgetWarning`) when the metric is degenerate or the budget can relabel
        most of the data.
    table_ : TableEncoder or None
        The fitted table encoder with table preprocessing, else None.
    """

    def __init__(
        self,
        backend: str = "xgboost",
        backend_params: dict | None = None,
        solver: str = "dual",
        solver_params: dict | None = None,
        fair_metric: str = "sensitive-subspace",
        fair_metric_params: dict | None = None,
        protected: Sequence[str | int] | None = None,
        eps: float = 0.1,
        n_steps: int = 100,
        random_state: int | None = None,
        callbacks: Sequence[Callback] | None = None,
        n_neighbors: int | str | None = None,
        verbose: int = 0,
        eps_unit: str = "raw",
        preprocessing: str = "auto",
        max_categories: int = 1000,
    ):
        self.backend = backend
        self.backend_params = backend_params
        self.solver = solver
        self.solver_params = solver_params
        self.fair_metric = fair_metric
        self.fair_metric_params = fair_metric_params
        self.protected = protected
        self.eps = eps
        self.n_steps = n_steps
        self.random_state = random_state
        self.callbacks = callbacks
        self.n_neighbors = n_neighbors
        self.verbose = verbose
        self.eps_unit = eps_unit
        self.preprocessing = preprocessing
        self.max_categories = max_categories

    # -- fitting ------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> "BuDROClassifier":
        """Fit on ``X`` (array or DataFrame, n x d) and labels ``y``."""
        eps = _check_eps(self.eps)
        eps_unit = check_eps_unit(self.eps_unit)
        n_steps = _check_n_steps(self.n_steps)
        _check_n_neighbors(self.n_neighbors)
        if not isinstance(self.verbose, numbers.Integral) or self.verbose < 0:
            raise ValidationError(f"verbose must be an integer >= 0, got {self.verbose!r}")
        if self.random_state is not None and (
            isinstance(self.random_state, bool) or not isinstance(self.random_state, numbers.Integral)
        ):
            raise ValidationError(f"random_state must be an integer or None, got {self.random_state!r}")
        if self.preprocessing not in PREPROCESSING:
            raise ValidationError(f"preprocessing must be one of {', '.join(map(repr, PREPROCESSING))}, got {self.preprocessing!r}")
        backend, solver, metric = self._make_plugins()
        fit_kwargs: dict[str, Any] = {}
        if self._use_table(X):
            X, y, fit_kwargs = self._encode_table(X, y)
        else:
            self.table_ = None
            X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=1)
        check_classification_targets(y)
        self.classes_, y_enc = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError(
                f"BuDROClassifier needs at least 2 classes in y; got 1 class: {self.classes_.tolist()}"
            )
        if self.table_ is None:
            self.protected_indices_ = self._protected_indices()
            fit_kwargs["protected"] = self.protected_indices_
        callbacks = tuple(self.callbacks or ())
        bar = None
        if self.verbose > 0:
            from budro.progress import ProgressBar

            bar = ProgressBar()
            callbacks += (bar,)
        # an n x n problem too large for the solver is refused before any work
        check_solver_size(solver, len(y_enc), sparse=_check_n_neighbors(self.n_neighbors) is not None,
                          embedding=expects_embedding(metric))
        # The fair metric is fitted here, so that the budget can be checked (and, with
        # eps_unit="nn", scaled) before the first round; BuDRO uses the fitted metric as it is.
        t0 = time.perf_counter()
        metric_X = fit_kwargs.get("metric_X", X)
        _check_metric_input(metric_X)
        metric = metric.fit(metric_X, fit_kwargs["protected"], y=y_enc)
        self.budget_ = diagnose_budget(metric, metric_X, y_enc, random_state=self.random_state or 0)
        self.eps_scale_ = self.budget_.nn_scale
        self.eps_effective_ = effective_eps(eps, eps_unit, self.budget_)
        check_budget(self.budget_, self.eps_effective_, eps_given=eps, eps_unit=eps_unit, protected=self.protected,
                     stacklevel=3)
        time_budget = time.perf_counter() - t0
        if isinstance(backend, BuiltinBackend):  # its float32 limit, before training, naming the user's column
            names = self.table_.booster_feature_names_ if self.table_ is not None else getattr(self, "feature_names_in_", None)
            check_float32_range(X, "X", names)
        trainer = BuDRO(backend, solver, metric, eps=self.eps_effective_, n_steps=n_steps, callbacks=callbacks,
                        n_neighbors=self.n_neighbors)
        try:
            trainer.fit(X, y_enc, n_classes=self.classes_.size, random_state=self.random_state, **fit_kwargs)
        finally:
            if bar is not None:
                bar.close()
        self.backend_ = trainer.backend
        self.solver_ = trainer.solver
        self.fair_metric_ = trainer.metric_
        self.history_ = trainer.history_
        self.last_transport_ = trainer.last_result_
        self.time_setup_ = trainer.time_setup_ + time_budget
        return self

    def _use_table(self, X: Any) -> bool:
        if self.preprocessing == "auto":
            return table_needs_encoding(X)
        return self.preprocessing == "table"

    def _encode_table(self, X: Any, y: Any):
        """Fit ``table_`` on ``X``; the booster matrix, the labels and BuDRO.fit's table arguments."""
        if self.protected is not None and isinstance(self.protected, (str, numbers.Integral)):
            raise ValidationError(f"protected must be a list of column names or indices, got {self.protected!r}")
        encoder = _fit_table(self, X, tuple(self.protected or ()))
        y = _check_labels(y)
        booster_X = encoder.booster_matrix(X)
        if y.shape[0] != booster_X.shape[0]:
            raise ValidationError(f"X has {booster_X.shape[0]} rows but y has {y.shape[0]} labels")
        kwargs = {
            "protected": encoder.protected_metric_indices_,
            "metric_X": encoder.metric_matrix(X),
            "categorical_features": encoder.categorical_features_,
        }
        return booster_X, y, kwargs

    def _booster_input(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        table = getattr(self, "table_", None)
        if table is not None:
            return table.booster_matrix(X)
        if is_table(X) and table_needs_encoding(X):
            raise ValidationError(
                "X has non-numeric columns or missing values, but this model was trained on numeric data without "
                "table preprocessing; pass the same kind of numeric data it was trained on"
            )
        return validate_data(self, X, dtype=np.float64, reset=False)

    def metric_matrix(self, X: Any) -> np.ndarray:
        """``X`` in the fitted fair metric's coordinates (what ``fair_metric_`` measures): the table
        encoder's embedding (:meth:`budro.tables.TableEncoder.metric_matrix`), or ``X`` as a float
        matrix without table preprocessing."""
        check_is_fitted(self)
        if getattr(self, "table_", None) is not None:
            return self.table_.metric_matrix(X)
        return validate_data(self, X, dtype=np.float64, reset=False)

    def _make_plugins(self):
        made = []
        for kind, attr in (("backend", "backend"), ("solver", "solver"), ("fair_metric", "fair_metric")):
            name = getattr(self, attr)
            params = getattr(self, f"{attr}_params")
            if params is None:
                params = {}
            if not isinstance(params, dict):
                raise ValidationError(f"{attr}_params must be a dict or None, got {type(params).__name__}")
            entry = registry.get(kind, name)
            params = dict(params)
            if "random_state" in entry.spec.parameters and "random_state" not in params:
                params["random_state"] = self.random_state
            try:
                made.append(registry.create(kind, entry.name, **params))
            except ConfigError as exc:
                raise ConfigError(f"{attr}_params: {exc}") from None
        return made

    def _protected_indices(self) -> tuple[int, ...]:
        if self.protected is None:
            return ()
        if isinstance(self.protected, (str, numbers.Integral)):
            raise ValidationError(f"protected must be a list of column names or indices, got {self.protected!r}")
        names = list(getattr(self, "feature_names_in_", []))
        out = []
        for p in self.protected:
            if isinstance(p, str):
                if p not in names:
                    where = f"the columns are: {', '.join(map(str, names))}" if names else "X has no column names (pass a DataFrame, or use indices)"
                    raise ValidationError(f"protected attribute {p!r} is not a column of X; {where}")
                out.append(names.index(p))
            elif isinstance(p, numbers.Integral) and not isinstance(p, bool):
                if not -self.n_features_in_ <= p < self.n_features_in_:
                    raise ValidationError(f"protected column index {p} is out of range for {self.n_features_in_} features")
                out.append(int(p) % self.n_features_in_)
            else:
                raise ValidationError(f"protected must hold column names or indices, got {p!r}")
        if len(set(out)) != len(out):
            raise ValidationError(f"protected lists a column twice: {list(self.protected)!r}")
        return tuple(out)

    # -- prediction ---------------------------------------------------------------------
    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, columns in the order of ``classes_``."""
        X = self._booster_input(X)
        return self.backend_.predict_proba(X)

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def decision_margin(self, X: Any) -> np.ndarray:
        """Raw margins of the boosted model (log-odds for two classes)."""
        X = self._booster_input(X)
        return self.backend_.predict_margin(X)

    def save_native_model(self, path: str) -> None:
        """Write the booster in its library's own format (e.g. XGBoost JSON/UBJ)."""
        check_is_fitted(self)
        self.backend_.save_model(str(path))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # "auto" sends arrays with NaN through the table encoder
        return tags


def _fit_table(estimator: Any, X: Any, protected: tuple) -> TableEncoder:
    """Fit a :class:`TableEncoder` on ``X`` for ``estimator`` (its ``backend``, ``max_categories``):
    category codes for a backend declaring native categoricals, else one-hot; sets the fitted
    ``table_``, ``n_features_in_``, ``feature_names_in_`` and ``protected_indices_`` (raw columns)."""
    caps = registry.get("backend", estimator.backend).spec.capabilities
    native_missing = "missing-values" in caps
    native_categorical = native_missing and "native-categorical" in caps
    encoder = TableEncoder(max_categories=estimator.max_categories).fit(
        X, protected=protected, native_categorical=native_categorical, native_missing=native_missing)
    adopt_table(estimator, encoder)
    return encoder


def adopt_table(estimator: Any, encoder: TableEncoder) -> None:
    """Set a fitted encoder as ``estimator.table_`` with what it says of the raw columns:
    ``n_features_in_``, ``feature_names_in_`` (where the table had names) and
    ``protected_indices_`` (raw columns of the protected attributes)."""
    estimator.table_ = encoder
    estimator.n_features_in_ = len(encoder.columns_)
    if encoder.has_names_:
        estimator.feature_names_in_ = np.asarray(encoder.columns_, dtype=object)
    elif hasattr(estimator, "feature_names_in_"):
        del estimator.feature_names_in_
    estimator.protected_indices_ = tuple(encoder.columns_.index(c) for c in encoder.protected_columns_)


def _check_metric_input(metric_X: np.ndarray) -> None:
    """Features whose squared norms overflow float64 are refused before a fair-metric learner
    (scikit-learn regressions, SVDs) sees them and warns of overflow or returns NaN."""
    from budro.transport import check_squared_norms

    Z = np.asarray(metric_X, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        sq = np.einsum("ij,ij->i", Z, Z) if Z.ndim == 2 else np.zeros(0)
    check_squared_norms(Z, sq, "the fair metric's input features")


def _check_labels(y: Any) -> np.ndarray:
    """Labels as a 1-D array (pandas/polars Series, lists, arrays); missing labels refused."""
    from sklearn.utils.validation import column_or_1d

    try:
        arr = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else y)
    except Exception as exc:
        raise ValidationError(f"y must be a 1-D array of labels, got {type(y).__name__}: {exc}") from None
    arr = column_or_1d(arr, warn=True)
    if arr.dtype.kind == "f":
        missing = np.isnan(arr)
    elif arr.dtype.kind == "O":
        missing = np.array([v is None or (isinstance(v, float) and v != v) for v in arr], dtype=bool)
    else:
        missing = np.zeros(arr.shape, dtype=bool)
    if missing.any():
        raise ValidationError(f"y has {int(missing.sum())} missing labels (first at row {int(np.argmax(missing))}); drop those rows")
    return arr
