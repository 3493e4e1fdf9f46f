"""scikit-learn estimator for BuDRO."""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from budro import registry
from budro.core import BuDRO, Callback, _check_eps, _check_n_neighbors, _check_n_steps
from budro.exceptions import ConfigError, ValidationError

__all__ = ["BuDROClassifier"]


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
        Protected attributes: column names (pandas input) or column indices.  Without any, the
        sensitive-subspace metric is the plain Euclidean distance, so ``fit(X, y)`` works on any data.
    eps : float, default 0.1
        Transport budget: how far (in squared fair distance, on average) the adversary may move
        the data.  ``eps = 0`` is plain boosting.
    n_steps : int, default 100
        BuDRO rounds after the first plain round.
    random_state : int, optional
        Seed handed to the backend (and to solvers that take one).
    callbacks : sequence of callables, optional
        Called after each round with a :class:`budro.core.RoundInfo`; returning True stops.
    n_neighbors : int, optional
        Restrict the adversary to each point's ``n_neighbors`` nearest neighbours in the fair
        metric (sparse cost, O(n m) per round; for large n).  None: the full problem.
    verbose : int, default 0
        0: silent.  > 0: a progress bar on stderr (:class:`budro.progress.ProgressBar`, drawn by
        tqdm) with the round, the robust and plain loss and the estimated time left.

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
        n_neighbors: int | None = None,
        verbose: int = 0,
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

    # -- fitting ------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> "BuDROClassifier":
        """Fit on ``X`` (array or DataFrame, n x d) and labels ``y``."""
        eps = _check_eps(self.eps)
        n_steps = _check_n_steps(self.n_steps)
        _check_n_neighbors(self.n_neighbors)
        if not isinstance(self.verbose, numbers.Integral) or self.verbose < 0:
            raise ValidationError(f"verbose must be an integer >= 0, got {self.verbose!r}")
        if self.random_state is not None and (
            isinstance(self.random_state, bool) or not isinstance(self.random_state, numbers.Integral)
        ):
            raise ValidationError(f"random_state must be an integer or None, got {self.random_state!r}")
        backend, solver, metric = self._make_plugins()
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=1)
        check_classification_targets(y)
        self.classes_, y_enc = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError(
                f"BuDROClassifier needs at least 2 classes in y; got 1 class: {self.classes_.tolist()}"
            )
        self.protected_indices_ = self._protected_indices()
        callbacks = tuple(self.callbacks or ())
        bar = None
        if self.verbose > 0:
            from budro.progress import ProgressBar

            bar = ProgressBar()
            callbacks += (bar,)
        trainer = BuDRO(backend, solver, metric, eps=eps, n_steps=n_steps, callbacks=callbacks,
                        n_neighbors=self.n_neighbors)
        try:
            trainer.fit(X, y_enc, protected=self.protected_indices_, n_classes=self.classes_.size,
                        random_state=self.random_state)
        finally:
            if bar is not None:
                bar.close()
        self.backend_ = trainer.backend
        self.solver_ = trainer.solver
        self.fair_metric_ = trainer.metric_
        self.history_ = trainer.history_
        self.last_transport_ = trainer.last_result_
        self.time_setup_ = trainer.time_setup_
        return self

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
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.backend_.predict_proba(X)

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def decision_margin(self, X: Any) -> np.ndarray:
        """Raw margins of the boosted model (log-odds for two classes)."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.backend_.predict_margin(X)

    def save_native_model(self, path: str) -> None:
        """Write the booster in its library's own format (e.g. XGBoost JSON/UBJ)."""
        check_is_fitted(self)
        self.backend_.save_model(str(path))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags
