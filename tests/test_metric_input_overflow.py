"""Huge feature values reach the user as one clear error, before any fair-metric learner warns."""

import warnings

import numpy as np
import pytest

from budro import BuDROClassifier
from budro.exceptions import NumericalError


@pytest.mark.parametrize("metric", ["sensitive-subspace", "svd-subspace", "protected-euclidean"])
def test_overflowing_features_are_refused_before_the_metric_is_fitted(metric):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    X[:, 1] *= 1e155
    y = (X[:, 0] > 0).astype(int)
    params = {"groups": [0, 1] * 30} if metric == "svd-subspace" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow RuntimeWarning from numpy or scikit-learn first
        with pytest.raises(NumericalError, match="input features.*standardise"):
            BuDROClassifier(fair_metric=metric, fair_metric_params=params, protected=[2], n_steps=2).fit(X, y)
