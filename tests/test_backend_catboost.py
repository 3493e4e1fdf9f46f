"""The CatBoost backend: one one-iteration fit per step, exactly one CatBoost round on D0."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

cb = pytest.importorskip("catboost")

from budro.backends.catboost import CatBoostBackend  # noqa: E402
from budro.exceptions import BudroError, ConfigError, ValidationError  # noqa: E402

N = 200
ATOL = 1e-6
FIXED = {"boosting_type": "Plain", "random_strength": 0, "bootstrap_type": "No", "logging_level": "Silent",
         "allow_writing_files": False, "thread_count": 1, "leaf_estimation_backtracking": "No"}


def make_data(n=N, d=4, K=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    score = X[:, 0] - 0.5 * X[:, 1] + rng.normal(size=n)
    cuts = np.quantile(score, np.linspace(0, 1, K + 1)[1:-1])
    return X, np.digitize(score, cuts)


def empirical(y, K):
    W = np.zeros((len(y), K))
    W[np.arange(len(y)), y] = 1.0 / len(y)
    return W


def random_weights(n, K, seed=2):
    rng = np.random.default_rng(seed)
    P = rng.random((n, K)) ** 2
    P[:15, 0] = 0.0  # rows carrying the last labels only
    P[15:30] = 0.0  # rows carrying no weight at all
    return P / P.sum()


def native(K, **params):
    loss = {"loss_function": "Logloss", "boost_from_average": False} if K == 2 else {"loss_function": "MultiClass"}
    return {"learning_rate": 0.03, **FIXED, **loss, **params}


def raw(model, X):
    return model.predict(X, prediction_type="RawFormulaVal")


# -- equality with native training --------------------------------------------------------


PARAMS = [
    {"depth": 3, "learning_rate": 0.3},
    {"depth": 5, "l2_leaf_reg": 0.5, "border_count": 32, "learning_rate": 0.5},
    {"grow_policy": "Depthwise", "depth": 4, "score_function": "L2", "learning_rate": 0.3},
]


@pytest.mark.parametrize(
    "K, params",
    [(K, p) for K in (2, 3) for p in PARAMS] + [(2, {"grow_policy": "Lossguide", "max_leaves": 8, "learning_rate": 0.3})],
)
def test_empirical_weights_reproduce_native_training(K, params):
    X, y = make_data(K=K)
    backend = CatBoostBackend(thread_count=1, **params)
    backend.start(X, y, K)
    for _ in range(3):
        backend.step(empirical(y, K))
    model = cb.CatBoost(native(K, iterations=4, **params))
    model.fit(cb.Pool(X, label=y))
    np.testing.assert_allclose(backend.margins(), raw(model, X), rtol=0, atol=ATOL)
    np.testing.assert_allclose(backend.margins(), backend.fit_native(X, y, K, 4).predict_margin(X), rtol=0, atol=ATOL)
    assert backend.n_rounds == 4 and np.ptp(backend.margins()) > 0.1


def test_scale_pos_weight_matches_logloss_class_weights():
    X, y = make_data()
    backend = CatBoostBackend(thread_count=1, depth=3, learning_rate=0.3, scale_pos_weight=2.5)
    backend.start(X, y, 2)
    for _ in range(2):
        backend.step(empirical(y, 2))
    model = cb.CatBoost(native(2, iterations=3, depth=3, learning_rate=0.3, scale_pos_weight=2.5))
    model.fit(cb.Pool(X, label=y))
    np.testing.assert_allclose(backend.margins(), raw(model, X), rtol=0, atol=ATOL)


@pytest.mark.parametrize("K", [2, 3])
def test_weight_scale_does_not_change_the_trees(K):
    # CatBoost scales l2_leaf_reg by the mean weight, so weights summing to 1 or to n agree
    X, y = make_data(K=K)
    P = random_weights(len(y), K)
    models = []
    for scale in ("n", "unit"):
        backend = CatBoostBackend(scale, thread_count=1, depth=3, learning_rate=0.3)
        backend.start(X, y, K)
        backend.step(P)
        models.append(backend.margins())
    np.testing.assert_allclose(models[0], models[1], rtol=0, atol=ATOL)
    assert np.ptp(models[0]) > 0.1


# -- per-round weights --------------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 3])
def test_step_equals_one_round_on_explicit_D0_with_l2_times_K(K):
    X, y = make_data(K=K)
    n = len(y)
    backend = CatBoostBackend(thread_count=1, depth=4, learning_rate=0.3, l2_leaf_reg=2.0)
    backend.start(X, y, K)
    backend.step(random_weights(n, K, seed=4))  # move away from f_0 first
    before = backend.margins()
    P = random_weights(n, K, seed=5)
    backend.step(P)
    new_tree = backend.margins() - before

    # D0: every x_i once per label k, weighted P[i, k] (scaled to sum to n), from the current
    # margins, with CatBoost's own loss; D0 has K times the rows, hence l2_leaf_reg * K
    D0 = cb.Pool(np.tile(X, (K, 1)), label=np.repeat(np.arange(K), n), weight=P.T.ravel() * n,
                 baseline=np.tile(before, K).reshape(-1, 1) if K == 2 else np.tile(before, (K, 1)))
    model = cb.CatBoost(native(K, iterations=1, depth=4, learning_rate=0.3, l2_leaf_reg=2.0 * K))
    model.fit(D0)
    np.testing.assert_allclose(new_tree, raw(model, X), rtol=0, atol=ATOL)
    assert np.ptp(new_tree) > 1e-2


@pytest.mark.parametrize("K", [2, 3])
def test_zero_weights_drop_rows(K):
    X, y = make_data(K=K)
    n = len(y)
    backend = CatBoostBackend(thread_count=1, depth=3, learning_rate=0.3)
    backend.start(X, y, K)
    before = backend.margins()
    keep = np.zeros(n, dtype=bool)
    keep[np.random.default_rng(3).permutation(n)[: n // 2]] = True
    W = empirical(y, K)
    W[~keep] = 0.0
    W /= W.sum()
    backend.step(W)
    new_tree = backend.margins() - before
    # CatBoost's own round on the kept rows (weight 2 each at scale "n") from f_0's margins.
    # CatBoost scales l2_leaf_reg by the mean weight, which is 1 over all n rows but 2 over the
    # kept half, hence half the l2_leaf_reg.  The quantization of the half equals that of the n
    # rows at the values the trees split on (continuous data of this size).
    half = cb.Pool(X[keep], label=y[keep], weight=np.full(keep.sum(), 2.0),
                   baseline=before[keep].reshape(-1, 1) if K == 2 else before[keep])
    ref = cb.CatBoost(native(K, iterations=1, depth=3, learning_rate=0.3, l2_leaf_reg=1.5))
    ref.fit(half)
    np.testing.assert_allclose(new_tree[keep], raw(ref, X[keep]), rtol=0, atol=ATOL)
    assert np.ptp(new_tree) > 1e-2


def test_weights_change_every_round():
    # CatBoost's fit(init_model=...) would silently keep the first weights; one fit per round cannot
    X, y = make_data()
    n = len(y)
    a, b = CatBoostBackend(thread_count=1, depth=3), CatBoostBackend(thread_count=1, depth=3)
    for backend in (a, b):
        backend.start(X, y, 2)
        backend.step(random_weights(n, 2, seed=1))
    a.step(random_weights(n, 2, seed=2))
    b.step(random_weights(n, 2, seed=3))
    assert np.abs(a.margins() - b.margins()).max() > 1e-3


def test_random_rounds_are_reproducible_and_seeded():
    X, y = make_data()
    P = random_weights(len(y), 2)

    def run(seed):
        backend = CatBoostBackend(thread_count=1, depth=3, random_strength=1.0, bootstrap_type="Bernoulli",
                                  subsample=0.7)
        backend.start(X, y, 2, random_state=seed)
        backend.step(P)
        backend.step(P)
        return backend.margins()

    np.testing.assert_array_equal(run(1), run(1))
    assert np.abs(run(1) - run(2)).max() > 1e-4


def test_margins_come_from_the_current_model():
    X, y = make_data(K=3)
    backend = CatBoostBackend(thread_count=1, depth=3, learning_rate=0.3)
    backend.start(X, y, 3)
    for seed in range(2):
        backend.step(random_weights(len(y), 3, seed=seed))
        np.testing.assert_allclose(backend.margins(), raw(backend.model, X), rtol=0, atol=1e-12)
    assert backend.margins().shape == (len(y), 3)
    m = backend.margins()
    m[:] = 0.0  # a copy
    assert np.ptp(backend.margins()) > 0


# -- the model outside budro --------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("suffix", [".cbm", ".json"])
def test_saved_model_loads_in_plain_catboost(tmp_path, K, suffix):
    X, y = make_data(K=K)
    backend = CatBoostBackend(thread_count=1, depth=3, learning_rate=0.3)
    backend.start(X, y, K)
    backend.step(random_weights(len(y), K))
    path = tmp_path / f"model{suffix}"
    backend.save_model(path)
    loaded = cb.CatBoost().load_model(str(path), format=suffix[1:])
    X_new, _ = make_data(n=40, K=K, seed=7)
    np.testing.assert_allclose(raw(loaded, X_new), backend.predict_margin(X_new), rtol=0, atol=1e-12)
    np.testing.assert_allclose(loaded.predict(X_new, prediction_type="Probability"), backend.predict_proba(X_new),
                               rtol=0, atol=1e-12)
    classifier = cb.CatBoostClassifier().load_model(str(path), format=suffix[1:])
    assert list(classifier.classes_) == list(range(K))


def test_finished_backend_pickles_and_predicts_the_same():
    X, y = make_data()
    backend = CatBoostBackend(thread_count=1, depth=3)
    backend.start(X, y, 2)
    backend.step(random_weights(len(y), 2))
    expected = backend.predict_margin(X)
    backend.finish()
    np.testing.assert_array_equal(backend.predict_margin(X), expected)
    restored = pickle.loads(pickle.dumps(backend))
    np.testing.assert_array_equal(restored.predict_margin(X), expected)
    assert restored.n_rounds == 2 and restored.n_classes_ == 2
    with pytest.raises(BudroError, match="released"):
        restored.margins()


def test_pickling_during_training_keeps_the_original_running():
    X, y = make_data()
    backend = CatBoostBackend(thread_count=1, depth=3)
    backend.start(X, y, 2)
    restored = pickle.loads(pickle.dumps(backend))
    np.testing.assert_array_equal(restored.predict_margin(X), backend.margins())
    with pytest.raises(BudroError):
        restored.step(empirical(y, 2))
    backend.step(empirical(y, 2))
    assert backend.n_rounds == 2 and restored.n_rounds == 1


def test_training_writes_no_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    X, y = make_data(n=60)
    backend = CatBoostBackend(thread_count=1, depth=2)
    backend.start(X, y, 2)
    backend.step(empirical(y, 2))
    backend.fit_native(X, y, 2, 2)
    assert os.listdir(tmp_path) == []


def test_fit_native_takes_sample_weights():
    X, y = make_data(K=3)
    backend = CatBoostBackend(thread_count=1, depth=3, learning_rate=0.3)
    w = np.random.default_rng(0).random(len(y))
    weighted = backend.fit_native(X, y, 3, 3, sample_weight=w)
    model = cb.CatBoost(native(3, iterations=3, depth=3, learning_rate=0.3))
    model.fit(cb.Pool(X, label=y, weight=w * len(y) / w.sum()))
    np.testing.assert_allclose(weighted.predict_margin(X), raw(model, X), rtol=0, atol=ATOL)
    assert weighted.n_rounds == 3


# -- configuration and input checks -------------------------------------------------------
# (those every built-in backend shares, bad weights and training data included, are in
# tests/test_backend_inputs.py)


def test_defaults_and_aliases():
    backend = CatBoostBackend(eta=0.1, max_depth=4, reg_lambda=2.0, random_state=5)
    params = backend.params
    assert params["random_strength"] == 0.0 and params["bootstrap_type"] == "No"
    assert params["learning_rate"] == 0.1 and params["depth"] == 4 and params["l2_leaf_reg"] == 2.0
    assert params["random_seed"] == 5
    assert "eta=0.1" in repr(backend) and backend.n_rounds == 0


def test_newton_score_functions_are_rejected():
    with pytest.raises(ConfigError, match="score_function"):
        CatBoostBackend(score_function="NewtonL2")


def test_every_class_must_occur():
    X, y = make_data(K=3)
    with pytest.raises(ValidationError, match=r"missing: \[1\]"):
        CatBoostBackend().start(X, np.where(y == 1, 0, y), 3)
    with pytest.raises(ValidationError, match="missing"):
        CatBoostBackend().fit_native(X, np.zeros(len(y), dtype=int), 2, 2)


def test_lossguide_is_two_class_only():
    X, y = make_data(K=3)
    with pytest.raises(ValidationError, match="Lossguide"):
        CatBoostBackend(grow_policy="Lossguide").start(X, y, 3)


def test_driven_rounds_emit_no_catboost_warnings():
    # With numba installed CatBoost 1.2.10 warns, when a model with a Python objective is
    # constructed, that it cannot compile the objective's methods: once per round here.
    import warnings

    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] > 0).astype(int)
    backend = CatBoostBackend()
    backend.start(X, y, 2, random_state=0)
    weights = np.zeros((120, 2))
    weights[np.arange(120), 1 - y] = 1 / 120
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        backend.step(weights)
        backend.step(weights)
    assert backend.n_rounds == 3
