"""The XGBoost backend: each step is exactly one XGBoost round on the weighted D0."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

xgb = pytest.importorskip("xgboost")

from budro.backends.xgboost import XGBoostBackend  # noqa: E402
from budro.exceptions import BudroError  # noqa: E402

from _direct_rounds import assert_same_rounds, record_rounds  # noqa: E402

N = 300
ATOL = 1e-6


def continuous_data(n=N, d=5, K=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    logits = X[:, :K] @ rng.normal(size=(K, K)) if K > 2 else X[:, :1] * 1.5
    if K == 2:
        y = (logits[:, 0] + rng.normal(size=n) > 0).astype(int)
    else:
        y = np.argmax(logits + rng.gumbel(size=(n, K)), axis=1)
    return X, y


def integer_data(n=N, d=4, K=2, levels=6, seed=1):
    """Few distinct feature values: every value appears in every large subset of rows, so
    XGBoost's histogram bins (all distinct values) do not depend on which rows or weights it sees."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, levels, size=(n, d)).astype(float)
    score = X[:, 0] - X[:, 1] + rng.normal(size=n)
    y = (score > 0).astype(int) if K == 2 else np.digitize(score, np.quantile(score, np.linspace(0, 1, K + 1)[1:-1]))
    return X, y


def empirical(y, K):
    W = np.zeros((len(y), K))
    W[np.arange(len(y)), y] = 1.0 / len(y)
    return W


def random_weights(n, K, seed=2):
    rng = np.random.default_rng(seed)
    P = rng.random((n, K)) ** 2
    P[:15, 0] = 0.0  # rows carrying label 1 (or the last labels) only
    P[15:30] = 0.0  # rows carrying no weight at all
    return P / P.sum()


def native_params(K, **params):
    out = {"base_score": 0.5, "tree_method": "hist", "nthread": 1, **params}
    if K == 2:
        out["objective"] = "binary:logistic"
    else:
        out.update(objective="multi:softprob", num_class=K)
    return out


def tree_output(booster, X, K):
    """Margins of ``booster``'s trees alone (a zero base margin replaces the intercept)."""
    base = np.zeros(len(X)) if K == 2 else np.zeros((len(X), K))
    return booster.predict(xgb.DMatrix(X, base_margin=base), output_margin=True)


def unit_params(n, **params):
    """Parameters for weights summing to 1 that grow the same trees as ``params`` at scale "n"."""
    return {**params, "lambda": params.get("lambda", 1.0) / n, "min_child_weight": params.get("min_child_weight", 1.0) / n}


# -- equality with native training --------------------------------------------------------


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("max_depth", [3, 6])
def test_empirical_steps_equal_native_training(K, max_depth):
    X, y = continuous_data(K=K)
    T = 4
    backend = XGBoostBackend(max_depth=max_depth, nthread=1)
    backend.start(X, y, K)
    for _ in range(T):
        backend.step(empirical(y, K))
    assert backend.n_rounds == T + 1

    native = xgb.train(native_params(K, max_depth=max_depth), xgb.DMatrix(X, label=y), num_boost_round=T + 1)
    expected = native.predict(xgb.DMatrix(X), output_margin=True)
    np.testing.assert_allclose(backend.margins(), expected, rtol=0, atol=ATOL)

    X_new, _ = continuous_data(n=50, K=K, seed=9)
    np.testing.assert_allclose(
        backend.predict_margin(X_new), native.predict(xgb.DMatrix(X_new), output_margin=True), rtol=0, atol=ATOL
    )


@pytest.mark.parametrize("K", [2, 3])
def test_sampling_follows_the_same_random_stream_as_native(K):
    X, y = continuous_data(K=K)
    params = dict(max_depth=4, subsample=0.7, colsample_bytree=0.6, nthread=1)
    backend = XGBoostBackend(**params)
    backend.start(X, y, K, random_state=11)
    for _ in range(3):
        backend.step(empirical(y, K))
    native = backend.fit_native(X, y, K, 4, random_state=11)
    np.testing.assert_allclose(backend.margins(), native.predict_margin(X), rtol=0, atol=ATOL)
    other_seed = backend.fit_native(X, y, K, 4, random_state=12)
    assert np.abs(other_seed.predict_margin(X) - native.predict_margin(X)).max() > 1e-3


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize(
    "options",
    [
        {"tree_method": "approx"},
        {"tree_method": "exact"},
        {"grow_policy": "lossguide", "max_leaves": 8},
        {"num_parallel_tree": 2, "subsample": 0.7},
        {"subsample": 0.7, "seed_per_iteration": True},
        {"multi_strategy": "multi_output_tree"},
        {"max_delta_step": 0.5, "reg_alpha": 0.5, "gamma": 0.1},
    ],
    ids=lambda o: ",".join(o),
)
def test_other_tree_options_equal_native_training(K, options):
    X, y = continuous_data(K=K)
    backend = XGBoostBackend(max_depth=4, nthread=1, **options)
    backend.start(X, y, K)
    for _ in range(3):
        backend.step(empirical(y, K))
    native = backend.fit_native(X, y, K, 4)
    np.testing.assert_allclose(backend.margins(), native.predict_margin(X), rtol=0, atol=ATOL)


@pytest.mark.parametrize("K", [2, 3])
def test_unit_scale_equals_native_training_with_weights_one_over_n(K):
    X, y = continuous_data(K=K)
    n = len(y)
    unit = XGBoostBackend("unit", **unit_params(n, max_depth=5, nthread=1))
    unit.start(X, y, K)
    for _ in range(3):
        unit.step(empirical(y, K))
    native = xgb.train(
        native_params(K, **unit.params), xgb.DMatrix(X, label=y, weight=np.full(n, 1.0 / n)), num_boost_round=4
    )
    np.testing.assert_allclose(unit.margins(), native.predict(xgb.DMatrix(X), output_margin=True), rtol=0, atol=ATOL)
    np.testing.assert_allclose(unit.margins(), unit.fit_native(X, y, K, 4).predict_margin(X), rtol=0, atol=ATOL)


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("data, tree_method", [(integer_data, "hist"), (continuous_data, "exact")])
def test_unit_scale_matches_n_scale_with_regularisation_divided_by_n(K, data, tree_method):
    # The documented relationship.  It needs bins that do not depend on the weights' scale
    # (XGBoost's quantile sketch does: weights 1/n give other cut values than weights 1), hence
    # few distinct values for "hist", or the exact method.
    X, y = data(K=K)
    n = len(y)
    unit = XGBoostBackend("unit", **unit_params(n, max_depth=5, nthread=1, tree_method=tree_method))
    unit.start(X, y, K)
    for _ in range(3):
        unit.step(empirical(y, K))
    native = xgb.train(native_params(K, max_depth=5, tree_method=tree_method), xgb.DMatrix(X, label=y), num_boost_round=4)
    np.testing.assert_allclose(unit.margins(), native.predict(xgb.DMatrix(X), output_margin=True), rtol=0, atol=ATOL)


def test_unit_scale_with_default_regularisation_learns_nothing():
    X, y = continuous_data()
    backend = XGBoostBackend("unit", max_depth=4, nthread=1)
    backend.start(X, y, 2)
    assert np.ptp(backend.margins()) == 0.0  # every hessian sum is below min_child_weight = 1


# -- per-round weights --------------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("weight_scale", ["n", "unit"])
def test_zero_weights_drop_rows(K, weight_scale):
    X, y = integer_data(K=K)
    n = len(y)
    params = dict(max_depth=4, nthread=1)
    if weight_scale == "unit":
        params = unit_params(n, **params)
    backend = XGBoostBackend(weight_scale, **params)
    backend.start(X, y, K)
    before = backend.margins()

    keep = np.zeros(n, dtype=bool)
    keep[np.random.default_rng(3).permutation(n)[: n // 2]] = True
    for j in range(X.shape[1]):  # the premise of integer_data: same distinct values in the half
        assert set(np.unique(X[keep, j])) == set(np.unique(X[:, j]))
    W = empirical(y, K)
    W[~keep] = 0.0
    W /= W.sum()
    backend.step(W)
    new_tree = backend.margins() - before

    # reference: XGBoost's own round on the kept rows only, starting from f_0's margins
    row_weight = W[keep].sum(axis=1) * (n if weight_scale == "n" else 1.0)
    half = xgb.DMatrix(X[keep], label=y[keep], weight=row_weight, base_margin=before[keep])
    ref = xgb.train(native_params(K, **backend.params), half, num_boost_round=1)
    np.testing.assert_allclose(new_tree, tree_output(ref, X, K), rtol=0, atol=ATOL)
    assert np.ptp(new_tree) > 1e-3  # the reference tree is not trivial


@pytest.mark.parametrize(
    "K, weight_scale, extra",
    [(2, "n", {}), (2, "unit", {}), (2, "n", {"scale_pos_weight": 2.5}), (3, "n", {}), (3, "unit", {})],
)
def test_step_equals_one_round_on_explicit_D0(K, weight_scale, extra):
    X, y = integer_data(K=K)
    n = len(y)
    params = dict(max_depth=5, nthread=1, **extra)
    if weight_scale == "unit":
        params = unit_params(n, **params)
    backend = XGBoostBackend(weight_scale, **params)
    backend.start(X, y, K)
    backend.step(random_weights(n, K, seed=4))  # move away from f_0 first
    before = backend.margins()
    P = random_weights(n, K, seed=5)
    backend.step(P)
    new_tree = backend.margins() - before

    # D0: every x_i once per label k, weighted P[i, k], continuing from the current margins
    scale = n if weight_scale == "n" else 1.0
    D0 = xgb.DMatrix(
        np.tile(X, (K, 1)),
        label=np.repeat(np.arange(K), n),
        weight=P.T.ravel() * scale,
        base_margin=np.concatenate([before] * K),
    )
    ref = xgb.train(native_params(K, **backend.params), D0, num_boost_round=1)
    np.testing.assert_allclose(new_tree, tree_output(ref, X, K), rtol=0, atol=ATOL)
    assert np.ptp(new_tree) > 1e-3


def test_margins_come_from_the_current_model():
    X, y = continuous_data(K=3)
    backend = XGBoostBackend(max_depth=3, nthread=1)
    backend.start(X, y, 3)
    for seed in range(3):
        backend.step(random_weights(len(y), 3, seed=seed))
        fresh = backend.model.predict(xgb.DMatrix(X), output_margin=True)
        np.testing.assert_array_equal(backend.margins(), fresh.astype(np.float64))
        np.testing.assert_array_equal(backend.predict_margin(X), backend.margins())
    assert backend.margins().shape == (len(y), 3)
    m = backend.margins()
    m[:] = 0.0  # a copy: the cache is not exposed
    assert np.ptp(backend.margins()) > 0
    np.testing.assert_allclose(backend.losses()[np.arange(len(y)), y].mean(), -np.log(backend.predict_proba(X)[np.arange(len(y)), y]).mean())


@pytest.mark.parametrize(
    "K, weight_scale, extra",
    [(2, "n", {}), (2, "unit", {}), (2, "n", {"scale_pos_weight": 2.5}), (3, "n", {})],
)
def test_direct_rounds_equal_the_public_api(monkeypatch, K, weight_scale, extra):
    """The per-round calls made to XGBoost's C functions directly (the default where the package
    exposes them) give the margins, losses and model of the public Python API, to the bit."""
    import budro.backends.xgboost as bx

    X, y = continuous_data(K=K)
    n = len(y)

    params = dict(max_depth=4, nthread=1, **extra)
    if weight_scale == "unit":
        params = unit_params(n, **params)

    def run():
        return record_rounds(XGBoostBackend(weight_scale, **params), X, y, K, lambda seed: random_weights(n, K, seed=seed))

    direct, seen_direct = run()
    assert type(direct._rounds) is bx._DirectRounds
    monkeypatch.setattr(bx, "_rounds", lambda booster, dtrain, n, K: bx._Rounds(booster, dtrain, n, K))
    public, seen_public = run()
    assert type(public._rounds) is bx._Rounds
    assert_same_rounds(seen_direct, seen_public, n, K)
    assert bytes(direct.model.save_raw("json")) == bytes(public.model.save_raw("json"))
    # the kept margins buffer is overwritten by the next round: what margins() returned is a copy
    before = direct.margins()
    direct.step(random_weights(n, K, seed=9))
    assert not np.array_equal(before, direct.margins())


def test_rounds_take_the_public_api_where_xgboost_lacks_the_functions(monkeypatch):
    import xgboost.core

    import budro.backends.xgboost as bx

    X, y = continuous_data()
    backend = XGBoostBackend(max_depth=2, nthread=1)
    backend.start(X, y, 2)
    assert type(backend._rounds) is bx._DirectRounds
    monkeypatch.setattr(xgboost.core, "_LIB", object())  # a library without those C functions
    rounds = bx._rounds(backend.model, backend._dtrain, len(y), 2)
    monkeypatch.undo()
    assert type(rounds) is bx._Rounds
    backend._rounds = rounds
    backend.step(random_weights(len(y), 2))
    np.testing.assert_array_equal(backend.margins(), backend.model.predict(xgb.DMatrix(X), output_margin=True))


# -- the model outside budro --------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("suffix", [".json", ".ubj"])
def test_saved_model_loads_in_plain_xgboost(tmp_path, K, suffix):
    X, y = continuous_data(K=K)
    backend = XGBoostBackend(max_depth=3, nthread=1)
    backend.start(X, y, K)
    backend.step(random_weights(len(y), K))
    path = tmp_path / f"model{suffix}"
    backend.save_model(path)
    loaded = xgb.Booster(model_file=str(path))
    X_new, _ = continuous_data(n=40, K=K, seed=7)
    np.testing.assert_array_equal(loaded.predict(xgb.DMatrix(X_new), output_margin=True), backend.predict_margin(X_new))
    proba = loaded.predict(xgb.DMatrix(X_new))
    expected = backend.predict_proba(X_new)[:, 1] if K == 2 else backend.predict_proba(X_new)
    np.testing.assert_allclose(proba, expected, atol=1e-6)


def test_finished_backend_pickles_and_predicts_the_same():
    X, y = continuous_data()
    backend = XGBoostBackend(max_depth=3, nthread=1)
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
    X, y = continuous_data()
    backend = XGBoostBackend(max_depth=3, nthread=1)
    backend.start(X, y, 2)
    restored = pickle.loads(pickle.dumps(backend))
    np.testing.assert_array_equal(restored.predict_margin(X), backend.margins())
    with pytest.raises(BudroError):
        restored.step(empirical(y, 2))
    backend.step(empirical(y, 2))
    assert backend.n_rounds == 2 and restored.n_rounds == 1


def test_fit_native_returns_a_predicting_backend():
    X, y = continuous_data(K=3)
    native = XGBoostBackend(max_depth=3, nthread=1).fit_native(X, y, 3, 5)
    assert isinstance(native, XGBoostBackend) and native.n_rounds == 5
    assert native.predict_proba(X).shape == (len(y), 3)
    np.testing.assert_allclose(native.predict_proba(X).sum(axis=1), 1.0)


# -- configuration and input checks -------------------------------------------------------
# (those every built-in backend shares, bad weights and training data included, are in
# tests/test_backend_inputs.py)


def test_defaults_and_aliases():
    backend = XGBoostBackend(learning_rate=0.1, reg_lambda=2.0, n_jobs=1, random_state=5)
    params = backend.params
    assert params["base_score"] == 0.5 and params["tree_method"] == "hist"
    assert params["eta"] == 0.1 and params["lambda"] == 2.0 and params["nthread"] == 1 and params["seed"] == 5
    assert "learning_rate=0.1" in repr(backend)
    assert backend.n_rounds == 0
