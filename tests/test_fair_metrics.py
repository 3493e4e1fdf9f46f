"""The fair-metric learners besides sensitive-subspace, and what every fitted metric provides."""

import json
import pickle

import numpy as np
import pytest

from budro import registry
from budro.exceptions import ConfigError, ValidationError
from budro.metrics import (
    Explore,
    ExploreMetric,
    FeatureMetric,
    Features,
    FittedFairMetric,
    LinearMetric,
    Mahalanobis,
    MahalanobisMetric,
    MatrixMetric,
    ProtectedEuclidean,
    SensitiveSubspace,
    SubspaceMetric,
    SVDSubspace,
    metric_from_dict,
)
from budro.transport import EmbeddingCost


def _sq(X1, X2, M=None):
    diff = X1[:, None, :] - X2[None, :, :]
    if M is None:
        return (diff**2).sum(-1)
    return np.einsum("ijk,kl,ijl->ij", diff, M, diff)


# ------------------------------------------------------------------------ blocks, base classes


class NotEmbedded(FittedFairMetric):
    """A fair metric without an embedding: the l1 distance, squared."""

    def pairwise(self, X1, X2=None):
        X1 = np.asarray(X1, dtype=float)
        X2 = X1 if X2 is None else np.asarray(X2, dtype=float)
        return np.abs(X1[:, None, :] - X2[None, :, :]).sum(-1) ** 2


class SecondCoordinate(MahalanobisMetric):
    """A third-party style metric defining only embed (must keep working)."""

    def embed(self, X):
        return np.asarray(X, dtype=float)[:, 1:2]


@pytest.mark.parametrize("metric", [NotEmbedded(), SecondCoordinate(), LinearMetric(np.diag([1.0, 2.0, 0.0]))],
                         ids=["generic", "embed-only", "linear"])
def test_iter_pairwise_covers_all_rows_in_blocks(rng, metric):
    X1, X2 = rng.normal(size=(23, 3)), rng.normal(size=(7, 3))
    full = metric.pairwise(X1, X2)
    blocks = list(metric.iter_pairwise(X1, X2, block_bytes=8 * 7 * 5))  # 5 rows per block
    assert [(s, e) for s, e, _ in blocks] == [(0, 5), (5, 10), (10, 15), (15, 20), (20, 23)]
    assert all(b.shape == (e - s, 7) for s, e, b in blocks)
    assert np.allclose(np.vstack([b for _, _, b in blocks]), full, atol=1e-12)
    # X2 defaults to X1, and one block when everything fits
    (only,) = metric.iter_pairwise(X1)
    assert only[:2] == (0, 23) and np.allclose(only[2], metric.pairwise(X1), atol=1e-12)


def test_iter_pairwise_rejects_bad_block_size(rng):
    with pytest.raises(ValidationError, match="block_bytes must be a positive integer"):
        next(LinearMetric(np.eye(2)).iter_pairwise(rng.normal(size=(3, 2)), block_bytes=0))


def test_iter_pairwise_reduces_large_inputs_without_a_full_matrix(rng):
    """The nearest-neighbour distance of 3000 points, in 1 MiB blocks (a full matrix is 72 MiB)."""
    X = rng.normal(size=(3000, 4))
    metric = ProtectedEuclidean().fit(X, [0])
    nearest = np.full(3000, np.inf)
    for start, stop, block in metric.iter_pairwise(X, block_bytes=2**20):
        assert block.nbytes <= 2**20
        block[np.arange(stop - start), np.arange(start, stop)] = np.inf
        nearest[start:stop] = block.min(axis=1)
    Z = X[:, 1:]
    check = _sq(Z[:50], Z)
    check[np.arange(50), np.arange(50)] = np.inf
    assert np.allclose(nearest[:50], check.min(axis=1))


# ------------------------------------------------------------------------------ simple metrics


def test_protected_euclidean(rng):
    X = rng.normal(size=(30, 5))
    X[:, 0] = rng.integers(0, 2, 30)
    metric = ProtectedEuclidean().fit(X, [0, [3, 4]])
    assert isinstance(metric, FeatureMetric) and metric.features_ == (1, 2) and metric.protected_ == (0, 3, 4)
    assert np.allclose(metric.pairwise(X), _sq(X[:, 1:3], X[:, 1:3]))
    assert np.allclose(metric.matrix_, np.diag([0, 1, 1, 0, 0]))
    assert np.allclose(metric.protected_directions_, np.eye(5)[[0, 3, 4]])
    assert np.allclose(ProtectedEuclidean().fit(X).pairwise(X), _sq(X, X))  # nothing protected


def test_features_is_the_synthetic_examples_metric(rng):
    X = rng.normal(size=(40, 3))
    metric = Features(features=[1]).fit(X, protected=[0])
    assert np.allclose(metric.pairwise(X), (X[:, None, 1] - X[None, :, 1]) ** 2)
    weighted = Features(features=[2, 1], weights=[4.0, 1.0]).fit(X)
    assert np.allclose(weighted.pairwise(X), _sq(X, X, np.diag([0.0, 1.0, 4.0])))
    assert np.allclose(weighted.embed(X), X[:, [2, 1]] * [2.0, 1.0])
    assert np.allclose(weighted.transform_ @ weighted.transform_.T, weighted.matrix_)


@pytest.mark.parametrize("kwargs, match", [
    ({"features": []}, "features must be a non-empty sequence"),
    ({"features": [0, 0]}, "lists a column twice"),
    ({"features": [-1]}, "integers >= 0"),
    ({"features": "x1"}, "features must be a non-empty sequence"),
    ({"features": [0, 1], "weights": [1.0]}, "weights must be 2 finite non-negative"),
    ({"features": [0], "weights": [-1.0]}, "weights must be 1 finite non-negative"),
])
def test_features_bad_parameters(kwargs, match):
    with pytest.raises(ValidationError, match=match):
        Features(**kwargs)


def test_features_bad_fit(rng):
    X = rng.normal(size=(10, 3))
    with pytest.raises(ValidationError, match="protected column 1 is one of the metric's features"):
        Features(features=[1, 2]).fit(X, protected=[1])
    with pytest.raises(ValidationError, match="features column 5 is out of range for 3"):
        Features(features=[5]).fit(X)


def test_mahalanobis_given_matrix(rng):
    A = rng.normal(size=(4, 4))
    M = A @ A.T
    X = rng.normal(size=(25, 4))
    X[:, 0] = rng.integers(0, 2, 25)
    metric = Mahalanobis(M, ignore_protected=False).fit(X, [0])
    assert isinstance(metric, MatrixMetric)
    assert np.allclose(metric.pairwise(X), _sq(X, X, M))
    assert np.allclose(metric.matrix_, M) and np.allclose(metric.transform_ @ metric.transform_.T, M)
    ignoring = Mahalanobis(M).fit(X, [0])
    P = np.diag([0.0, 1, 1, 1])
    assert np.allclose(ignoring.matrix_, P @ M @ P)
    assert np.allclose(ignoring.pairwise(X), _sq(X[:, 1:], X[:, 1:], M[1:, 1:]))
    # rank-deficient matrices are fine (a metric may ignore directions)
    low = Mahalanobis(np.outer([1.0, 2, 0, 0], [1.0, 2, 0, 0])).fit(X)
    assert low.transform_.shape == (4, 1)


@pytest.mark.parametrize("matrix, match", [
    ([[1.0, 0.5], [0.3, 1.0]], r"matrix must be symmetric: matrix\[0, 1\] = 0.5 but matrix\[1, 0\] = 0.3"),
    ([[1.0, 0.0], [0.0, -2.0]], "matrix must be positive semidefinite .* smallest eigenvalue is -2"),
    ([[1.0, 2.0], [2.0, 1.0]], "smallest eigenvalue is -1"),
    ([[1.0, 0.0, 0.0]], r"square \(d, d\) matrix, got shape \(1, 3\)"),
    ([[1.0, np.nan], [np.nan, 1.0]], "NaN"),
    ([["a", "b"], ["c", "d"]], "square matrix of numbers"),
])
def test_mahalanobis_rejects_bad_matrices(matrix, match):
    with pytest.raises(ValidationError, match=match):
        Mahalanobis(matrix)


def test_mahalanobis_dimension_mismatch(rng):
    with pytest.raises(ValidationError, match="matrix is 2 x 2 but X has 3 features"):
        Mahalanobis(np.eye(2)).fit(rng.normal(size=(5, 3)))


# --------------------------------------------------------------------------------- svd-subspace


def _comparable_groups(rng, n_groups=30, size=5, d=4):
    """Groups whose members differ only along u (plus 1e-3 noise): u is the sensitive direction."""
    u = np.array([0.6, 0.0, 0.8, 0.0])
    centres = rng.normal(size=(n_groups, d)) * 3
    shift = rng.normal(size=(n_groups, size))
    X = (centres[:, None, :] + shift[..., None] * u + 1e-3 * rng.normal(size=(n_groups, size, d))).reshape(-1, d)
    return X, np.repeat(np.arange(n_groups), size), u


def test_svd_subspace_recovers_the_within_group_direction(rng):
    X, groups, u = _comparable_groups(rng)
    metric = SVDSubspace(n_components=1).fit(X, groups=groups)
    assert isinstance(metric, SubspaceMetric) and metric.direction_labels_ == ["svd[0]"]
    assert abs(metric.directions_[0] @ u) > 0.9999
    assert metric.explained_variance_ratio_[0] > 0.999
    assert metric.singular_values_[0] > 100 * metric.singular_values_[1]
    # members of a group are (nearly) at distance 0; different groups are far apart
    d = metric.pairwise(X[:10])
    assert d[0, 1:5].max() < 1e-4 and d[0, 5:10].min() > 1e-2
    # same metric through the constructor (how the estimator passes it), string labels, and -1
    same = SVDSubspace(groups=groups).fit(X)
    assert np.allclose(same.projector(), metric.projector())
    strings = SVDSubspace().fit(X, groups=np.array([f"g{g}" for g in groups]))
    assert np.allclose(strings.projector(), metric.projector())
    noisy = np.vstack([X, rng.normal(size=(20, 4)) * 10])
    ignored = SVDSubspace().fit(noisy, groups=np.concatenate([groups, -np.ones(20, dtype=int)]))
    assert np.allclose(ignored.projector(), metric.projector())


def test_svd_subspace_with_protected_indicators(rng):
    X, groups, u = _comparable_groups(rng)
    X[:, 3] = rng.integers(0, 2, len(X))
    metric = SVDSubspace().fit(X, [3], groups=groups)
    assert metric.direction_labels_ == ["indicator[3]", "svd[0]"]
    assert metric.basis_.shape == (4, 2) and metric.protected_ == (3,)
    assert np.allclose(metric.pairwise(X[:3], X[:3] + 5.0 * np.eye(4)[3]).diagonal(), 0.0)
    assert SVDSubspace(indicators=False).fit(X, [3], groups=groups).basis_.shape == (4, 1)


def test_svd_subspace_errors(rng):
    X, groups, _ = _comparable_groups(rng)
    with pytest.raises(ValidationError, match="svd-subspace needs groups of comparable individuals"):
        SVDSubspace().fit(X)
    with pytest.raises(ValidationError, match="groups has 149 labels but X has 150 rows"):
        SVDSubspace().fit(X, groups=groups[:-1])
    with pytest.raises(ValidationError, match="at least one group with two or more rows"):
        SVDSubspace().fit(X, groups=np.arange(len(X)))
    with pytest.raises(ValidationError, match="n_components=2 but the within-group variation has rank 1"):
        SVDSubspace(n_components=2).fit(X[:10] * 0 + np.repeat(rng.normal(size=(2, 4)), 5, 0)
                                        + np.outer(rng.normal(size=10), [1.0, 0, 0, 0]), groups=groups[:10])
    with pytest.raises(ValidationError, match="n_components must be an integer >= 1"):
        SVDSubspace(n_components=0)
    with pytest.raises(ValidationError, match="groups must be a 1-D array"):
        SVDSubspace(groups=[[1, 2]])


# -------------------------------------------------------------------------------------- explore


def _explore_data(rng, sigma, n=300, m=1500):
    X = rng.normal(size=(n, sigma.shape[0]))
    pairs = rng.integers(0, n, size=(m, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    phi = X[pairs[:, 0]] - X[pairs[:, 1]]
    q = np.einsum("ij,jk,ik->i", phi, sigma, phi)
    comparable = rng.random(len(pairs)) < 2.0 / (1.0 + np.exp(q))  # drawn from the EXPLORE model
    return X, pairs, comparable


def test_explore_recovers_the_model_matrix(rng):
    sigma = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 0.0]])
    X, pairs, comparable = _explore_data(rng, sigma)
    metric = Explore(l2=0.0).fit(X, pairs=pairs, comparable=comparable)
    assert isinstance(metric, ExploreMetric) and metric.converged_
    assert np.abs(metric.matrix_ - sigma).max() < 0.35
    assert np.linalg.eigvalsh(metric.matrix_)[0] >= -1e-12
    assert np.allclose(metric.pairwise(X[:10]), _sq(X[:10], X[:10], metric.matrix_), atol=1e-9)
    # fit_pairs on the same pairs is the same fit; the model's probabilities are in (0, 1]
    same = Explore(l2=0.0).fit_pairs(X[pairs[:, 0]], X[pairs[:, 1]], comparable)
    assert np.allclose(same.matrix_, metric.matrix_)
    p = metric.predict_proba(X[pairs[:50, 0]], X[pairs[:50, 1]])
    assert np.all((p > 0) & (p <= 1))
    # comparable pairs are closer on average in the learned metric
    dist = metric.distance(X[pairs[:, 0]], X[pairs[:, 1]])
    assert dist[comparable].mean() < dist[~comparable].mean()


def test_explore_ignores_protected_columns(rng):
    sigma = np.diag([1.0, 1.0, 0.0])
    X, pairs, comparable = _explore_data(rng, sigma, m=400)
    X[:, 0] = rng.integers(0, 2, len(X))
    metric = Explore(pairs=pairs, comparable=comparable).fit(X, [0])
    assert np.all(metric.matrix_[0] == 0) and np.all(metric.matrix_[:, 0] == 0)
    assert np.allclose(metric.protected_directions_, [[1.0, 0.0, 0.0]])
    kept = Explore(pairs=pairs, comparable=comparable, ignore_protected=False).fit(X, [0])
    assert kept.matrix_[0, 0] > 0.1


def test_explore_errors(rng):
    X = rng.normal(size=(10, 2))
    pairs = np.array([[0, 1], [2, 3], [4, 5]])
    with pytest.raises(ValidationError, match="explore needs labelled pairs"):
        Explore().fit(X)
    with pytest.raises(ValidationError, match="at least one comparable and one non-comparable"):
        Explore().fit(X, pairs=pairs, comparable=[1, 1, 1])
    with pytest.raises(ValidationError, match="pairs refers to row 12, but X has 10 rows"):
        Explore().fit(X, pairs=[[0, 12], [1, 2]], comparable=[0, 1])
    with pytest.raises(ValidationError, match="one label per pair"):
        Explore().fit(X, pairs=pairs, comparable=[0, 1])
    with pytest.raises(ValidationError, match="booleans or 0/1"):
        Explore().fit(X, pairs=pairs, comparable=[0, 1, 2])
    with pytest.raises(ValidationError, match=r"\(m, 2\) array of row indices"):
        Explore().fit(X, pairs=[0, 1], comparable=[1])
    with pytest.raises(ValidationError, match="given together"):
        Explore(pairs=pairs)
    X2 = X.copy()
    X2[1] = X2[0]
    with pytest.raises(ValidationError, match="pair 0 is labelled not comparable but its two points are identical"):
        Explore().fit(X2, pairs=pairs, comparable=[0, 1, 0])
    with pytest.raises(ValidationError, match="l2 must be a non-negative number"):
        Explore(l2=-1.0)


# ------------------------------------------------------------------- persistence, every metric


def _fitted_metrics(rng):
    X, groups, _ = _comparable_groups(rng, n_groups=10)
    X[:, 1] = rng.integers(0, 2, len(X))
    pairs = rng.integers(0, len(X), size=(200, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    comparable = np.abs(X[pairs[:, 0], 2] - X[pairs[:, 1], 2]) < 1.0
    return X, {
        "sensitive-subspace": SensitiveSubspace().fit(X, [1]),
        "sensitive-subspace-svd": SensitiveSubspace(n_components=1).fit(X, [1, 3]),
        "svd-subspace": SVDSubspace().fit(X, [1], groups=groups),
        "explore": Explore().fit(X, [1], pairs=pairs, comparable=comparable),
        "protected-euclidean": ProtectedEuclidean().fit(X, [1]),
        "features": Features([0, 2], weights=[1.0, 3.0]).fit(X, [1]),
        "mahalanobis": Mahalanobis(np.diag([1.0, 2.0, 3.0, 4.0])).fit(X, [1]),
    }


def test_every_metric_pickles_and_round_trips_through_json(rng, tmp_path):
    X, metrics = _fitted_metrics(rng)
    for name, metric in metrics.items():
        expected = metric.pairwise(X[:20], X[20:35])
        clone = pickle.loads(pickle.dumps(metric))
        assert np.array_equal(clone.pairwise(X[:20], X[20:35]), expected), name
        state = json.loads(json.dumps(metric.to_dict()))
        rebuilt = metric_from_dict(state)
        assert type(rebuilt) is type(metric), name
        assert np.allclose(rebuilt.pairwise(X[:20], X[20:35]), expected, atol=1e-12), name
        assert np.allclose(rebuilt.matrix_, metric.matrix_, atol=1e-12), name
        assert np.allclose(rebuilt.protected_directions_, metric.protected_directions_), name
        assert np.allclose(type(metric).from_dict(state).embed(X[:3]), metric.embed(X[:3]), atol=1e-12), name
    # the fitted scikit-learn models travel in a pickle (not in to_dict, hence not in a budro model file)
    loaded = pickle.loads(pickle.dumps(metrics["sensitive-subspace"]))
    assert loaded.models_[1].__class__.__name__ == "LogisticRegression"
    assert np.array_equal(loaded.models_[1].coef_, metrics["sensitive-subspace"].models_[1].coef_)
    assert metric_from_dict(metrics["sensitive-subspace"].to_dict()).models_ == {}
    assert metrics["explore"].to_dict()["n_iter_"] == metrics["explore"].n_iter_
    svd = metric_from_dict(metrics["svd-subspace"].to_dict())
    assert np.allclose(svd.explained_variance_ratio_, metrics["svd-subspace"].explained_variance_ratio_)
    assert svd.direction_labels_ == ["indicator[1]", "svd[0]"] and svd.attributes_ == ((1,),)


@pytest.mark.parametrize("state, match", [
    ({"format": 1}, "with a 'kind' key"),
    ({"kind": "subspace", "format": 99}, "format 99"),
    ({"kind": "nope", "format": 1}, "unknown fair-metric kind 'nope'"),
    ({"kind": "matrix", "format": 1}, "lacks 'matrix_'"),
])
def test_metric_from_dict_errors(state, match):
    with pytest.raises(ValidationError, match=match):
        metric_from_dict(state)


def test_every_metric_embeds_and_costs_consistently(rng):
    X, metrics = _fitted_metrics(rng)
    for name, metric in metrics.items():
        Z = metric.embed(X[:30])
        assert np.allclose(_sq(Z, Z), metric.pairwise(X[:30]), atol=1e-9), name
        assert np.allclose(metric.pairwise(X[:30]), _sq(X[:30], X[:30], metric.matrix_), atol=1e-9), name
        cost = metric.cost(X[:30])
        assert isinstance(cost, EmbeddingCost)
        assert np.allclose(cost.column_block(0, 30), metric.pairwise(X[:30]), atol=1e-9), name
        with pytest.raises(ValidationError, match="fitted on 4"):
            metric.embed(X[:, :3])


# ------------------------------------------------------------------------------------ registry


def test_registry_creates_every_builtin_learner_with_validated_parameters():
    names = set(registry.available("fair_metric"))
    assert {"sensitive-subspace", "svd-subspace", "explore", "protected-euclidean", "features", "mahalanobis"} <= names
    assert isinstance(registry.create("fair_metric", "features", features=[1]), Features)
    assert registry.get("fair_metric", "features").spec.parameters["features"] is not None  # REQUIRED marker
    with pytest.raises(ConfigError, match="needs parameter 'features'"):
        registry.create("fair_metric", "features")
    with pytest.raises(ConfigError, match="needs parameter 'matrix'"):
        registry.create("fair_metric", "mahalanobis")
    with pytest.raises(ConfigError, match="has no parameter 'group'"):
        registry.create("fair_metric", "svd-subspace", group=[1])
    with pytest.raises(ValidationError, match="n_components"):
        registry.create("fair_metric", "sensitive-subspace", n_components=-1)


def test_estimator_trains_with_a_learner_needing_groups_and_saves_it(rng, tmp_path):
    """The estimator calls fit(X, protected, y=y): inputs such as groups go through the constructor."""
    from budro import BuDROClassifier
    from budro.persist import load_model, save_model

    X, groups, u = _comparable_groups(rng, n_groups=12)
    y = (X[:, 1] > np.median(X[:, 1])).astype(int)
    clf = BuDROClassifier(fair_metric="svd-subspace", fair_metric_params={"groups": groups}, eps=0.05, n_steps=3,
                          backend_params={"nthread": 1}, random_state=0).fit(X, y)
    assert isinstance(clf.fair_metric_, SubspaceMetric)
    assert abs(clf.fair_metric_.directions_[0] @ u) > 0.999
    loaded = load_model(save_model(clf, tmp_path / "clf.joblib"))
    assert np.array_equal(loaded.fair_metric_.pairwise(X[:5]), clf.fair_metric_.pairwise(X[:5]))
    assert np.array_equal(loaded.predict_proba(X), clf.predict_proba(X))
