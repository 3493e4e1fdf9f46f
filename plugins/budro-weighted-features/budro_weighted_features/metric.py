"""``d(x, x')^2 = sum_f w_f (x_f - x'_f)^2`` over chosen features f."""

from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np

from budro.exceptions import ValidationError
from budro.metrics import FairMetricLearner, LinearMetric


class WeightedFeaturesMetric(LinearMetric):
    """Fitted metric: the embedding is ``sqrt(w) * x[:, features]``, i.e. ``X @ L`` with ``L`` the
    column selection scaled by ``sqrt(w)``.

    A :class:`budro.metrics.LinearMetric` subclass with its own ``kind`` and its extra fitted
    state (``features_``, ``weights_``) in ``_state_attributes``: ``to_dict`` /
    ``budro.metrics.metric_from_dict`` give back a ``WeightedFeaturesMetric`` (the plugin record
    lists the class in ``metric_classes``).
    """

    kind = "weighted-features"
    _state_attributes = LinearMetric._state_attributes + ("features_", "weights_")

    def __init__(self, features: Sequence[int], weights: np.ndarray, n_features: int, *, protected: Sequence[int] = ()):
        self.features_ = tuple(int(f) for f in features)
        self.weights_ = np.asarray(weights, dtype=np.float64)
        L = np.zeros((n_features, len(self.features_)))
        L[list(self.features_), np.arange(len(self.features_))] = np.sqrt(self.weights_)
        # The metric is zero along every column that is not a feature, protected ones included.
        ignored = [p for p in protected if p not in self.features_]
        directions = np.eye(n_features)[ignored] if ignored else None
        super().__init__(L, protected=protected, protected_directions=directions)

    def _restore(self) -> None:
        self.features_ = tuple(int(f) for f in self.features_)

    def __repr__(self) -> str:
        return f"WeightedFeaturesMetric(d={self.n_features_in_}, features={list(self.features_)})"


class WeightedFeatures(FairMetricLearner):
    """Distance on ``features`` (column indices) with non-negative ``weights`` (default all 1)."""

    name = "weighted-features"

    def __init__(self, features: Sequence[int] = (), weights: Sequence[float] | None = None):
        feats = list(features)
        if not feats or not all(isinstance(f, numbers.Integral) and not isinstance(f, bool) for f in feats):
            raise ValidationError(f"features must be a non-empty list of column indices, got {features!r}")
        if len(set(feats)) != len(feats):
            raise ValidationError(f"features lists a column twice: {feats!r}")
        if weights is None:
            w = np.ones(len(feats))
        else:
            w = np.asarray(weights, dtype=float)
            if w.shape != (len(feats),) or not np.all(np.isfinite(w)) or np.any(w < 0):
                raise ValidationError(f"weights must be {len(feats)} finite non-negative numbers (one per feature), got {weights!r}")
        self.features = tuple(int(f) for f in feats)
        self.weights = w

    def fit(self, X, protected=(), *, y=None) -> WeightedFeaturesMetric:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValidationError(f"X must be 2-D, got shape {X.shape}")
        d = X.shape[1]
        bad = [f for f in self.features if not 0 <= f < d]
        if bad:
            raise ValidationError(f"features {bad} are out of range for {d} columns")
        flat = [int(p) for p in protected if isinstance(p, numbers.Integral) and 0 <= int(p) < d]
        return WeightedFeaturesMetric(self.features, self.weights, d, protected=flat)
