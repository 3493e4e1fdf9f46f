"""Fair metrics fixed by the user rather than learned from data.

* ``protected-euclidean``: the Euclidean distance on every column except the protected ones;
* ``features``: the (optionally weighted) Euclidean distance on a chosen subset of columns (the
  paper's synthetic example uses the distance in its one fair coordinate);
* ``mahalanobis``: ``(x - x')^T M (x - x')`` for a user-given symmetric positive semidefinite M.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from budro.exceptions import ValidationError
from budro.metrics._validation import (
    check_attribute_varies,
    check_bool,
    check_columns,
    check_n_features,
    check_protected,
    check_X,
    flatten_protected,
    indicator_rows,
)
from budro.metrics.base import FairMetricLearner
from budro.metrics.linear import LinearMetric

__all__ = ["FeatureMetric", "MatrixMetric", "ProtectedEuclidean", "Features", "Mahalanobis", "check_psd_matrix"]

#: Relative tolerance of the symmetry and positive-semidefiniteness checks of a given matrix.
PSD_RTOL = 1e-10


class FeatureMetric(LinearMetric):
    """``d(x, x')^2 = sum_f w_f (x_f - x'_f)^2`` over the columns ``features_``.

    Attributes
    ----------
    features_ : tuple of int
    weights_ : (k,) array
    transform_ : (d, k) array
        The column selection scaled by ``sqrt(weights_)`` (built on first access).
    protected_directions_ : (r, d) array
        The indicator vectors of the protected columns (none of which is a feature).
    """

    kind = "features"
    _state_attributes = ("features_", "weights_", "protected_", "protected_directions_", "n_features_in_")

    def __init__(self, features: Sequence[int], n_features: int, *, weights: Any = None, protected: Sequence[int] = ()):
        self.features_ = tuple(int(f) for f in features)
        self.n_features_in_ = int(n_features)
        self.weights_ = np.ones(len(self.features_)) if weights is None else np.asarray(weights, dtype=np.float64)
        self.protected_ = tuple(int(p) for p in protected)
        self.protected_directions_ = indicator_rows(self.protected_, self.n_features_in_)
        self._restore()

    def _restore(self) -> None:
        self.features_ = tuple(int(f) for f in self.features_)
        self._index = np.asarray(self.features_, dtype=np.intp)
        self._scale = np.sqrt(self.weights_)

    @property
    def transform_(self) -> np.ndarray:
        L = np.zeros((self.n_features_in_, len(self.features_)))
        L[self._index, np.arange(len(self.features_))] = self._scale
        return L

    def embed(self, X: Any) -> np.ndarray:
        X = check_X(X, "X")
        check_n_features(X, self.n_features_in_)
        return X[:, self._index] * self._scale

    def __repr__(self) -> str:
        shown = list(self.features_) if len(self.features_) <= 8 else f"<{len(self.features_)} columns>"
        return f"FeatureMetric(d={self.n_features_in_}, features={shown})"


class MatrixMetric(LinearMetric):
    """``d(x, x')^2 = (x - x')^T M (x - x')`` for a symmetric positive semidefinite ``M``.

    Parameters
    ----------
    matrix : (d, d) array
        Checked with :func:`check_psd_matrix`; tiny negative eigenvalues (rounding) are clipped.
    protected : sequence of int
    protected_directions : (r, d) array, optional

    Attributes
    ----------
    matrix_ : (d, d) array
        ``M``, as given (symmetrised).
    transform_ : (d, p) array
        ``V sqrt(lambda)`` over the p positive eigenvalues: ``M = L L^T`` up to rounding.
    eigenvalues_ : (d,) array
        Eigenvalues of ``M``, increasing.
    """

    kind = "matrix"
    _state_attributes = ("matrix_", "protected_", "protected_directions_", "n_features_in_")
    _derived_attributes = ("eigenvalues_", "transform_")  # from matrix_, by _restore

    def __init__(self, matrix: Any, *, protected: Sequence[int] = (), protected_directions: Any = None):
        M = check_psd_matrix(matrix, "matrix")
        self.__dict__["_matrix"] = M
        self.n_features_in_ = M.shape[0]
        self.protected_ = tuple(int(p) for p in protected)
        from budro.metrics.linear import _directions

        self.protected_directions_ = _directions(protected_directions, self.n_features_in_)
        self._restore()

    def _restore(self) -> None:
        M = self.matrix_
        lam, V = np.linalg.eigh(M)
        self.eigenvalues_ = lam
        keep = lam > PSD_RTOL * max(float(lam[-1]) if lam.size else 0.0, 0.0)
        if lam.size and lam[-1] <= 0:
            keep[:] = False
        self.transform_ = V[:, keep] * np.sqrt(lam[keep])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(d={self.n_features_in_}, rank={self.transform_.shape[1]})"


def check_psd_matrix(matrix: Any, name: str = "matrix") -> np.ndarray:
    """``matrix`` as a symmetric positive semidefinite float64 array, or a ValidationError saying why not."""
    try:
        M = np.array(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} must be a square matrix of numbers") from None
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] == 0:
        raise ValidationError(f"{name} must be a non-empty square (d, d) matrix, got shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ValidationError(f"{name} contains NaN or infinite values")
    scale = max(float(np.abs(M).max()), np.finfo(float).tiny)
    asym = np.abs(M - M.T)
    if asym.max() > PSD_RTOL * scale:
        i, j = np.unravel_index(int(np.argmax(asym)), M.shape)
        raise ValidationError(f"{name} must be symmetric: {name}[{i}, {j}] = {M[i, j]:g} but {name}[{j}, {i}] = {M[j, i]:g}")
    M = 0.5 * (M + M.T)
    lam = np.linalg.eigvalsh(M)
    if lam[0] < -PSD_RTOL * max(scale, float(abs(lam[-1]))) * M.shape[0]:
        raise ValidationError(f"{name} must be positive semidefinite (a squared distance cannot be negative): its "
                              f"smallest eigenvalue is {lam[0]:g}")
    return M


def _fit_protected(X: Any, protected: Any) -> tuple[np.ndarray, tuple[int, ...]]:
    X = check_X(X, "X")
    attributes = check_protected(protected, X.shape[1])
    for cols in attributes:
        check_attribute_varies(X, cols)
    return X, flatten_protected(attributes)


class ProtectedEuclidean(FairMetricLearner):
    """The Euclidean distance that ignores the protected columns.

    ``d(x, x')^2 = sum over unprotected f of (x_f - x'_f)^2``.  Simple, and blind only to the
    protected columns themselves: proxies of a protected attribute (e.g. ``relationship=Wife``
    for gender) still count in full.  With no protected column it is the Euclidean distance.
    """

    name = "protected-euclidean"

    def fit(self, X: Any, protected: Sequence[Any] = (), *, y: Any = None) -> FeatureMetric:
        X, flat = _fit_protected(X, protected)
        features = [f for f in range(X.shape[1]) if f not in set(flat)]
        return FeatureMetric(features, X.shape[1], protected=flat)

    def __repr__(self) -> str:
        return "ProtectedEuclidean()"


class Features(FairMetricLearner):
    """The distance on a chosen subset of columns: ``sum_f w_f (x_f - x'_f)^2`` over ``features``.

    Parameters
    ----------
    features : sequence of int
        Column indices the distance uses (the others, protected ones included, are ignored).
        The paper's synthetic example: ``features=[1]`` (the credit score, not the zip code's
        demographics).
    weights : sequence of float, optional
        Non-negative weight per feature (default all 1).

    A protected column passed to :meth:`fit` must not be among ``features``.
    """

    name = "features"

    def __init__(self, features: Sequence[int], weights: Sequence[float] | None = None):
        self.features = check_columns(features, "features")
        if weights is None:
            self.weights = None
        else:
            try:
                w = np.asarray(weights, dtype=float)
            except (TypeError, ValueError):
                w = np.array([np.nan])
            if w.shape != (len(self.features),) or not np.all(np.isfinite(w)) or np.any(w < 0):
                raise ValidationError(f"weights must be {len(self.features)} finite non-negative numbers "
                                      f"(one per feature), got {weights!r}")
            self.weights = tuple(float(v) for v in w)

    def fit(self, X: Any, protected: Sequence[Any] = (), *, y: Any = None) -> FeatureMetric:
        X, flat = _fit_protected(X, protected)
        d = X.shape[1]
        bad = [f for f in self.features if f >= d]
        if bad:
            raise ValidationError(f"features column {bad[0]} is out of range for {d} features")
        clash = sorted(set(flat) & set(self.features))
        if clash:
            raise ValidationError(f"protected column {clash[0]} is one of the metric's features: the metric would not "
                                  "ignore it (drop it from features)")
        return FeatureMetric(self.features, d, weights=self.weights, protected=flat)

    def __repr__(self) -> str:
        w = "" if self.weights is None else f", weights={list(self.weights)}"
        return f"Features(features={list(self.features)}{w})"


class Mahalanobis(FairMetricLearner):
    """A user-given metric ``d(x, x')^2 = (x - x')^T M (x - x')``.

    Parameters
    ----------
    matrix : (d, d) array-like
        Symmetric positive semidefinite (checked here, with an error naming the asymmetric entry
        or the negative eigenvalue).
    ignore_protected : bool, default True
        Zero the rows and columns of ``M`` of the protected columns passed to :meth:`fit`, so
        the metric ignores them (``M`` stays positive semidefinite).  With False, ``M`` is used
        as given.
    """

    name = "mahalanobis"

    def __init__(self, matrix: Any, ignore_protected: bool = True):
        self.matrix = check_psd_matrix(matrix, "matrix")
        self.ignore_protected = check_bool(ignore_protected, "ignore_protected")

    def fit(self, X: Any, protected: Sequence[Any] = (), *, y: Any = None) -> MatrixMetric:
        X, flat = _fit_protected(X, protected)
        d = X.shape[1]
        if self.matrix.shape[0] != d:
            raise ValidationError(f"matrix is {self.matrix.shape[0]} x {self.matrix.shape[0]} but X has {d} features")
        M = self.matrix.copy()
        directions = None
        if self.ignore_protected and flat:
            M[list(flat), :] = 0.0
            M[:, list(flat)] = 0.0
            directions = indicator_rows(flat, d)
        return MatrixMetric(M, protected=flat, protected_directions=directions)

    def __repr__(self) -> str:
        return f"Mahalanobis(matrix=<{self.matrix.shape[0]}x{self.matrix.shape[0]}>, ignore_protected={self.ignore_protected})"
