"""A budro backend in about a hundred lines: XGBoost on the expanded data set D0.

budro's round t trains one tree on D0 = {(x_i, k)}: every training row once per label k, weighted
by ``weights[i, k]``.  This backend builds D0 once as an XGBoost ``DMatrix`` (the K copies of X,
copy k labelled k), sets the round's weights on it and calls ``Booster.update`` for one round.
XGBoost keeps its prediction cache for that matrix, so the training margins cost nothing extra.
It is plainer and slower than budro's own ``xgboost`` backend (K times the rows, no collapsing),
and passes the same conformance kit.
"""

from __future__ import annotations

import difflib
import numbers
from typing import Any

import numpy as np

from budro.backends.base import Backend, native_sample_weights
from budro.exceptions import ConfigError, ValidationError

#: Parameters this backend accepts, with their defaults (XGBoost's names).
DEFAULTS: dict[str, Any] = {"max_depth": 3, "eta": 0.3, "lambda": 1.0, "min_child_weight": 1.0, "nthread": 1}


class D0XGBoostBackend(Backend):
    """XGBoost, one ``Booster.update`` per round on the D0 matrix.

    Parameters
    ----------
    **params
        ``max_depth``, ``eta``, ``lambda``, ``min_child_weight``, ``nthread`` (XGBoost's meanings;
        defaults in ``DEFAULTS``).  Any other name raises :class:`~budro.exceptions.ConfigError`.
        Every model starts from margin 0 (``base_score=0.5``), as budro's rounds require.
    """

    name = "example-xgboost-d0"

    def __init__(self, **params: Any):
        unknown = [k for k in params if k not in DEFAULTS]
        if unknown:
            close = difflib.get_close_matches(unknown[0], list(DEFAULTS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"backend {self.name!r} has no parameter {unknown[0]!r}{hint}; "
                              f"its parameters are: {', '.join(DEFAULTS)}")
        self.params = {**DEFAULTS, **params}
        self._booster = None
        self._d0 = None

    # -- training ----------------------------------------------------------------------------
    def _xgb_params(self, n_classes: int, random_state: int | None) -> dict[str, Any]:
        p = dict(self.params, base_score=0.5, tree_method="hist", seed=0 if random_state is None else int(random_state))
        if n_classes == 2:
            p["objective"] = "binary:logistic"
        else:
            p.update(objective="multi:softprob", num_class=n_classes)
        return p

    def start(self, X: np.ndarray, y: np.ndarray, n_classes: int, *, random_state: int | None = None,
              categorical_features: tuple[int, ...] = ()) -> None:
        import xgboost

        if categorical_features:
            raise ValidationError(f"backend {self.name!r} has no categorical support (capability 'native-categorical')")
        X = _check_X(X)
        y = np.asarray(y)
        if y.shape != (X.shape[0],) or not isinstance(n_classes, numbers.Integral) or n_classes < 2:
            raise ValidationError(f"y must be (n,) labels in [0, n_classes) with n_classes >= 2; got {y.shape}, {n_classes!r}")
        n, K = X.shape[0], int(n_classes)
        self.n_classes_, self.n_features_in_ = K, X.shape[1]
        self._params = self._xgb_params(K, random_state)
        self._d0 = xgboost.DMatrix(np.tile(X, (K, 1)), label=np.repeat(np.arange(K), n))
        first = np.zeros((n, K))
        first[np.arange(n), y.astype(np.int64)] = 1.0 / n  # f_0: the data itself (copy (i, y_i) only)
        self._d0.set_weight(self._scaled(first))
        self._booster = xgboost.train(self._params, self._d0, num_boost_round=1)

    def _scaled(self, weights: np.ndarray) -> np.ndarray:
        # weights[i, k] sum to 1; weight 1 per row (sum n) keeps XGBoost's regularisation meaning what
        # it means in ordinary boosting.  Row k*n + i of D0 is (x_i, k): column-major order.
        n = weights.shape[0]
        return (np.asarray(weights, dtype=np.float64) * n).ravel(order="F")

    def step(self, weights: np.ndarray) -> None:
        if self._d0 is None:
            raise ValidationError(f"backend {self.name!r}: step() before start() or after finish()")
        self._d0.set_weight(self._scaled(weights))
        self._booster.update(self._d0, iteration=self.n_rounds)

    def finish(self) -> None:
        self._d0 = None  # the training matrix; the booster keeps predicting

    def fit_native(self, X: np.ndarray, y: np.ndarray, n_classes: int, n_rounds: int, *,
                   random_state: int | None = None, sample_weight: np.ndarray | None = None,
                   categorical_features: tuple[int, ...] = ()) -> "D0XGBoostBackend":
        import xgboost

        X = _check_X(X)
        other = D0XGBoostBackend(**self.params)
        other.n_classes_, other.n_features_in_ = int(n_classes), X.shape[1]
        weight = native_sample_weights(sample_weight, X.shape[0], "n")
        data = xgboost.DMatrix(X, label=np.asarray(y), weight=weight)
        other._booster = xgboost.train(self._xgb_params(int(n_classes), random_state), data, num_boost_round=n_rounds)
        return other

    # -- the model ---------------------------------------------------------------------------
    def margins(self) -> np.ndarray:
        if self._d0 is None:
            raise ValidationError(f"backend {self.name!r}: margins() needs the training data (before finish())")
        n = self._d0.num_row() // self.n_classes_
        return self._booster.predict(self._d0, output_margin=True)[:n]  # copy 0 holds the training rows

    def predict_margin(self, X: np.ndarray) -> np.ndarray:
        import xgboost

        return self._booster.predict(xgboost.DMatrix(_check_X(X)), output_margin=True)

    def save_model(self, path: str) -> None:
        self._booster.save_model(path)  # XGBoost's own format (JSON or UBJSON by the suffix)

    @property
    def n_rounds(self) -> int:
        return 0 if self._booster is None else int(self._booster.num_boosted_rounds())

    @property
    def model(self) -> Any:
        return self._booster

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_d0"] = None  # a DMatrix does not pickle; a pickled backend predicts, it does not train
        return state


def load_and_predict(path: str, X: np.ndarray) -> np.ndarray:
    """Margins of a model written by ``save_model``, with plain XGBoost (for ``check_backend``)."""
    import xgboost

    return xgboost.Booster(model_file=path).predict(xgboost.DMatrix(X), output_margin=True)


def _check_X(X: Any) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or not np.isfinite(X).all():
        raise ValidationError(f"X must be a finite 2-D array (this backend does not take missing values); got shape {X.shape}")
    return X
