"""The sensitive-subspace fair metric."""

import numpy as np
import pytest

from budro.exceptions import ValidationError
from budro.metrics.subspace import SensitiveSubspace
from budro.transport import EmbeddingCost


def _data(rng, n=300):
    gender = rng.integers(0, 2, n).astype(float)
    proxy = gender + 0.3 * rng.normal(size=n)  # a feature that predicts gender
    other = rng.normal(size=(n, 3))
    age = rng.normal(40, 10, n)
    return np.column_stack([gender, proxy, other, age])


def test_protected_directions_have_zero_distance(rng):
    X = _data(rng)
    metric = SensitiveSubspace().fit(X, protected=[0])
    assert metric.direction_labels_ == ["indicator[0]", "logistic[0]"]
    # Moving along any learned protected direction costs nothing.
    for direction in metric.directions_:
        d = metric.pairwise(X[:5], X[:5] + 3.0 * direction)
        assert np.allclose(np.diag(d), 0.0, atol=1e-9)
    # The logistic normal loads mostly on the proxy feature.
    w = metric.directions_[1]
    assert abs(w[1]) == pytest.approx(np.abs(w).max())
    assert metric.models_[0].__class__.__name__ == "LogisticRegression"


def test_distance_is_projected_euclidean(rng):
    X = _data(rng)
    metric = SensitiveSubspace().fit(X, protected=[0, 5])
    assert metric.direction_labels_ == ["indicator[0]", "logistic[0]", "indicator[5]", "ridge[5]"]
    P = metric.projector()
    assert np.allclose(P, P.T) and np.allclose(P @ P, P, atol=1e-12)
    diff = X[:20, None, :] - X[None, :20, :]
    expected = np.einsum("ijk,kl,ijl->ij", diff, P, diff)
    assert np.allclose(metric.pairwise(X[:20]), expected, atol=1e-9)
    assert np.allclose(metric.pairwise(X[:20]), metric.pairwise(X[:20]).T)
    cost = metric.cost(X[:20])
    assert isinstance(cost, EmbeddingCost)
    assert np.allclose(cost.column_block(0, 20), expected, atol=1e-9)
    assert np.all(np.diagonal(cost.column_block(0, 20)) == 0)


def test_no_protected_attributes_is_euclidean(rng):
    X = rng.normal(size=(30, 4))
    metric = SensitiveSubspace().fit(X)
    diff = X[:, None, :] - X[None, :, :]
    assert np.allclose(metric.pairwise(X), (diff**2).sum(-1))


def test_indicators_only(rng):
    X = rng.normal(size=(40, 2))
    metric = SensitiveSubspace(fit_linear_models=False).fit(X, protected=[0])
    assert np.allclose(metric.pairwise(X), (X[:, None, 1] - X[None, :, 1]) ** 2)


@pytest.mark.parametrize("kwargs, match", [
    ({"l2": 0}, "l2 must be a positive number"),
    ({"l2": float("nan")}, "l2 must be a positive number"),
    ({"indicators": "yes"}, "indicators must be True or False"),
    ({"ridge_alphas": []}, "ridge_alphas must be a non-empty"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValidationError, match=match):
        SensitiveSubspace(**kwargs)


def test_bad_fit_input(rng):
    X = _data(rng)
    with pytest.raises(ValidationError, match="out of range"):
        SensitiveSubspace().fit(X, protected=[9])
    X_const = X.copy()
    X_const[:, 0] = 1.0
    with pytest.raises(ValidationError, match="column 0 is constant"):
        SensitiveSubspace().fit(X_const, protected=[0])
    X_nan = X.copy()
    X_nan[3, 2] = np.nan
    with pytest.raises(ValidationError, match="NaN"):
        SensitiveSubspace().fit(X_nan, protected=[0])
    with pytest.raises(ValidationError, match="numeric"):
        SensitiveSubspace().fit(np.array([["a", "b"], ["c", "d"]], dtype=object), protected=[0])
    with pytest.raises(ValidationError, match="listed twice"):
        SensitiveSubspace().fit(X, protected=[0, 0])
    metric = SensitiveSubspace().fit(X, protected=[0])
    with pytest.raises(ValidationError, match="fitted on 6"):
        metric.embed(X[:, :3])


# ------------------------------------------------------------------ categorical attributes


def _categorical_data(rng, n=400):
    """Column 0..2: one-hot of a 3-category attribute; columns 3, 4, 5: a proxy of each category; 6: noise."""
    category = rng.integers(0, 3, n)
    onehot = np.eye(3)[category]
    proxies = onehot + 0.4 * rng.normal(size=(n, 3))
    return np.column_stack([onehot, proxies, rng.normal(size=n)]), category


def test_one_hot_group_uses_one_vs_rest(rng):
    X, _ = _categorical_data(rng)
    metric = SensitiveSubspace().fit(X, protected=[[0, 1, 2]])
    assert metric.direction_labels_ == ["indicator[0]", "indicator[1]", "indicator[2]", "ovr[0]", "ovr[1]", "ovr[2]"]
    model = metric.models_[(0, 1, 2)]
    assert model.__class__.__name__ == "OneVsRestClassifier" and len(model.estimators_) == 3
    assert metric.attributes_ == ((0, 1, 2),) and metric.protected_ == (0, 1, 2)
    # the normal of "category k versus the rest" loads most on the proxy of category k
    for k in range(3):
        w = metric.directions_[3 + k]
        assert np.argmax(np.abs(w)) == 3 + k and np.all(w[:3] == 0)
    for direction in metric.directions_:
        assert np.allclose(metric.pairwise(X[:5], X[:5] + 2.0 * direction).diagonal(), 0.0, atol=1e-9)


def test_categorical_parameter_matches_nested_protected(rng):
    """The estimator passes flat columns: ``categorical`` groups them into one attribute."""
    X, _ = _categorical_data(rng)
    X = np.column_stack([X, rng.integers(0, 2, len(X))])  # column 7: a binary attribute
    nested = SensitiveSubspace().fit(X, protected=[[0, 1, 2], 7])
    flat = SensitiveSubspace(categorical=[[0, 1, 2]]).fit(X, protected=[0, 1, 2, 7])
    declared_only = SensitiveSubspace(categorical=[[0, 1, 2]]).fit(X, protected=[7])
    assert flat.direction_labels_ == nested.direction_labels_ and flat.attributes_ == ((0, 1, 2), (7,))
    assert declared_only.attributes_ == ((7,), (0, 1, 2))  # the declared group comes after the given columns
    assert sorted(declared_only.direction_labels_) == sorted(nested.direction_labels_)
    for other in (flat, declared_only):
        assert np.allclose(other.projector(), nested.projector())
    assert "logistic[7]" in nested.direction_labels_


def test_one_hot_group_with_reference_category(rng):
    """Rows with no active column form their own (reference) category."""
    X, category = _categorical_data(rng)
    X = np.delete(X, 0, axis=1)  # drop category 0's column: its rows are all-zero in the group
    metric = SensitiveSubspace(indicators=False).fit(X, protected=[[0, 1]])
    assert metric.direction_labels_ == ["ovr[0|1=none]", "ovr[0]", "ovr[1]"]
    assert list(metric.models_[(0, 1)].classes_) == [-1, 0, 1]


def test_two_category_group_is_one_logistic_problem(rng):
    X, category = _categorical_data(rng)
    keep = category < 2
    metric = SensitiveSubspace(indicators=False).fit(X[keep][:, [0, 1, 3, 4, 6]], protected=[[0, 1]])
    assert metric.direction_labels_ == ["ovr[1]"] and len(metric.models_[(0, 1)].estimators_) == 1


def test_integer_coded_categorical_column(rng):
    X, category = _categorical_data(rng)
    X = np.column_stack([category.astype(float), X[:, 3:]])  # column 0: codes 0, 1, 2
    as_categorical = SensitiveSubspace(categorical=[0]).fit(X, protected=[0])
    assert as_categorical.direction_labels_ == ["indicator[0]", "ovr[0=0]", "ovr[0=1]", "ovr[0=2]"]
    assert as_categorical.models_[0].__class__.__name__ == "OneVsRestClassifier"
    as_continuous = SensitiveSubspace().fit(X, protected=[0])
    assert as_continuous.direction_labels_ == ["indicator[0]", "ridge[0]"]
    assert as_continuous.models_[0].__class__.__name__ == "RidgeCV"


@pytest.mark.parametrize("kwargs, protected, match", [
    ({}, [[0, 1, 3]], r"protected group \[0, 1, 3\] must be one-hot \(0/1\) columns"),
    ({"categorical": [[0, 1, 2]]}, [[0, 1]], r"only partly matches the categorical attribute \[0, 1, 2\]"),
    ({"categorical": [[0, 1, 2]]}, [[2, 6]], "mixes columns of the categorical attribute"),
    ({"categorical": [[0, 1, 9]]}, [], "categorical column 9 is out of range for 7 features"),
    ({}, [[0, 1], 1], "protected column 1 is listed twice"),
    ({}, [[]], "empty group"),
])
def test_bad_categorical_input(rng, kwargs, protected, match):
    X, _ = _categorical_data(rng)
    with pytest.raises(ValidationError, match=match):
        SensitiveSubspace(**kwargs).fit(X, protected=protected)


def test_group_that_is_not_one_hot(rng):
    X, _ = _categorical_data(rng)
    X[5, :3] = [1.0, 1.0, 0.0]
    with pytest.raises(ValidationError, match=r"not one-hot: row 5 has 2 active columns"):
        SensitiveSubspace().fit(X, protected=[[0, 1, 2]])


@pytest.mark.parametrize("categorical, match", [
    ("abc", "categorical must be a list"),
    ([[3]], "needs at least two column indices"),
    ([1, [1, 2]], "categorical lists column 1 twice"),
    ([1.5], "categorical must hold column indices"),
])
def test_bad_categorical_parameter(categorical, match):
    with pytest.raises(ValidationError, match=match):
        SensitiveSubspace(categorical=categorical)


def test_linear_models_for_chosen_attributes_only(rng):
    """The paper's Adult metric: indicators of gender and race, a logistic direction for gender only."""
    X = _data(rng)
    X[:, 2] = rng.integers(0, 2, len(X))  # a second binary protected attribute
    metric = SensitiveSubspace(fit_linear_models=[0]).fit(X, protected=[0, 2])
    assert metric.direction_labels_ == ["indicator[0]", "logistic[0]", "indicator[2]"]
    assert list(metric.models_) == [0]
    with pytest.raises(ValidationError, match="fit_linear_models lists column 3, which is not a protected column"):
        SensitiveSubspace(fit_linear_models=[3]).fit(X, protected=[0, 2])
    with pytest.raises(ValidationError, match="protected attribute in column 2 gets no direction"):
        SensitiveSubspace(indicators=False, fit_linear_models=[0]).fit(X, protected=[0, 2])
    with pytest.raises(ValidationError, match="fit_linear_models must be True, False or a list"):
        SensitiveSubspace(fit_linear_models="yes")


def test_indicators_and_models_cannot_both_be_off():
    with pytest.raises(ValidationError, match="cannot both be False"):
        SensitiveSubspace(indicators=False, fit_linear_models=False)


# ------------------------------------------------------------- truncated SVD, projection


def test_truncated_svd_keeps_the_top_singular_directions(rng):
    X = _data(rng)
    full = SensitiveSubspace().fit(X, protected=[0, 5])
    metric = SensitiveSubspace(n_components=2).fit(X, protected=[0, 5])
    assert metric.directions_.shape == (4, 6) and metric.basis_.shape == (6, 2)
    _, s, vt = np.linalg.svd(full.directions_)
    assert np.allclose(metric.singular_values_, s)
    assert np.allclose(metric.basis_ @ metric.basis_.T, vt[:2].T @ vt[:2])  # same subspace
    assert np.allclose(metric.protected_directions_, metric.basis_.T)
    for v in metric.protected_directions_:
        assert np.allclose(metric.pairwise(X[:4], X[:4] + 3.0 * v).diagonal(), 0.0, atol=1e-9)
    # a direction outside the top-2 subspace is no longer free: the metric is coarser than the full span
    moved = [metric.pairwise(X[:1], X[:1] + direction)[0, 0] for direction in metric.directions_]
    assert max(moved) > 1e-3
    assert full.basis_.shape == (6, 4)
    with pytest.raises(ValidationError, match="n_components=5 exceeds the 4 protected directions found"):
        SensitiveSubspace(n_components=5).fit(X, protected=[0, 5])
    with pytest.raises(ValidationError, match="n_components=1 exceeds the 0 protected directions"):
        SensitiveSubspace(n_components=1).fit(X)


def test_project_removes_the_sensitive_subspace(rng):
    X = _data(rng)
    metric = SensitiveSubspace().fit(X, protected=[0])
    Xp = metric.project(X)
    assert Xp.shape == X.shape
    assert np.allclose(Xp, X @ metric.projector(), atol=1e-12)
    assert np.allclose(metric.project(Xp), Xp, atol=1e-12)  # a projection
    assert np.allclose(Xp @ metric.basis_, 0.0, atol=1e-10)  # nothing left in the protected span
    assert np.allclose(Xp[:, 0], 0.0, atol=1e-10)  # the protected column itself is gone
    diff = Xp[:15, None, :] - Xp[None, :15, :]
    assert np.allclose((diff**2).sum(-1), metric.pairwise(X[:15]), atol=1e-9)
    with pytest.raises(ValidationError, match="fitted on 6"):
        metric.project(X[:, :2])


def test_project_baseline_uses_the_fitted_metric(rng):
    """budro.baselines' project method reads the projector of the learned subspace metric."""
    baselines = pytest.importorskip("budro.baselines")
    X = _data(rng)
    metric = SensitiveSubspace().fit(X, protected=[0])
    assert np.allclose(baselines._projector(metric), metric.projector())


def test_non_numeric_protected_column_is_named(rng):
    X = _data(rng).astype(object)
    X[:, 0] = np.where(X[:, 0] == 1, "male", "female")
    with pytest.raises(ValidationError, match="column 0 holds '(fe)?male'; encode categorical attributes first"):
        SensitiveSubspace().fit(X, protected=[0])


def test_linear_models_are_fitted_on_one_blas_thread(rng, monkeypatch):
    """scikit-learn's L-BFGS on a few dozen columns is faster on one BLAS thread than on two (the
    second thread's synchronisation costs more than it saves) and the same on any core count;
    the pools are restored after."""
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads():
        return [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]

    if not blas_threads():
        pytest.skip("no BLAS library with a thread pool is loaded")
    seen = []
    original = SensitiveSubspace._fit_models

    def spy(self, *args):
        seen.append(blas_threads())
        return original(self, *args)

    monkeypatch.setattr(SensitiveSubspace, "_fit_models", spy)
    X = rng.normal(size=(200, 4))
    X[:, 0] = rng.integers(0, 2, size=200)
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = blas_threads()
        metric = SensitiveSubspace(fit_linear_models=[0]).fit(X, protected=[0])
        after = blas_threads()
    assert seen and all(threads == [1] * len(threads) for threads in seen)
    assert after == before
    assert any("logistic" in label for label in metric.direction_labels_)
