"""The LightGBM backend: each step is exactly one LightGBM round on the weighted D0."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

lgb = pytest.importorskip("lightgbm")

from budro.backends.lightgbm import PARAM_ALIASES, RESERVED_PARAMS, LightGBMBackend  # noqa: E402
from budro.exceptions import BudroError, ValidationError  # noqa: E402

from _direct_rounds import assert_same_rounds, record_rounds  # noqa: E402

N = 300
ATOL = 1e-6


def make_data(n=N, d=5, K=2, seed=0):
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


def native_params(K, **params):
    out = {"boost_from_average": False, "metric": "None", "verbosity": -1, "num_threads": 1,
           "min_data_in_leaf": 0, "min_sum_hessian_in_leaf": 1.0, **params}
    if K == 2:
        out["objective"] = "binary"
    else:
        out.update(objective="multiclass", num_class=K)
    return out


def unit_params(n, **params):
    """Parameters for weights summing to 1 that grow the same trees as ``params`` at scale "n"."""
    hessian_scale = {"lambda_l1": 0.0, "lambda_l2": 0.0, "min_gain_to_split": 0.0, "min_sum_hessian_in_leaf": 1.0}
    return {**params, **{key: params.get(key, default) / n for key, default in hessian_scale.items()}}


# -- equality with native training --------------------------------------------------------


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize(
    "params",
    [
        {"num_leaves": 7},
        {"num_leaves": 31, "max_depth": 4, "learning_rate": 0.3, "lambda_l2": 2.0},
        {"bagging_fraction": 0.7, "bagging_freq": 1, "extra_trees": True, "feature_fraction_bynode": 0.6},
    ],
)
def test_empirical_weights_reproduce_native_training(K, params):
    X, y = make_data(K=K)
    backend = LightGBMBackend(num_threads=1, **params)
    backend.start(X, y, K, random_state=3)
    for _ in range(4):
        backend.step(empirical(y, K))
    native = lgb.train(native_params(K, seed=3, **params), lgb.Dataset(X, label=y), num_boost_round=5)
    np.testing.assert_allclose(backend.margins(), native.predict(X, raw_score=True), rtol=0, atol=ATOL)
    np.testing.assert_allclose(backend.margins(), backend.fit_native(X, y, K, 5, random_state=3).predict_margin(X),
                               rtol=0, atol=ATOL)
    assert backend.n_rounds == 5 and np.ptp(backend.margins()) > 0.1


def test_scale_pos_weight_matches_the_binary_objective():
    X, y = make_data()
    backend = LightGBMBackend(num_threads=1, num_leaves=7, scale_pos_weight=2.5)
    backend.start(X, y, 2)
    for _ in range(3):
        backend.step(empirical(y, 2))
    native = lgb.train(native_params(2, num_leaves=7, scale_pos_weight=2.5), lgb.Dataset(X, label=y), num_boost_round=4)
    np.testing.assert_allclose(backend.margins(), native.predict(X, raw_score=True), rtol=0, atol=ATOL)


@pytest.mark.parametrize("K", [2, 3])
def test_feature_fraction_rounds_are_lightgbms_custom_objective_rounds(K):
    # With feature_fraction < 1 the rounds equal LightGBM's own training with a custom objective
    # (lightgbm.train, callable objective); its built-in objective draws the subsets one off.
    X, y = make_data(K=K)
    Y = np.eye(K)[y]

    def objective(m, _data):
        if K == 2:
            p = 1.0 / (1.0 + np.exp(-m))
            return p - y, p * (1.0 - p)
        p = np.exp(m - m.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return p - Y, K / (K - 1) * p * (1.0 - p)

    backend = LightGBMBackend(num_threads=1, num_leaves=7, feature_fraction=0.6, seed=1)
    backend.start(X, y, K)
    for _ in range(4):
        backend.step(empirical(y, K))
    params = {**native_params(K, num_leaves=7, feature_fraction=0.6, seed=1), "objective": objective}
    custom = lgb.train(params, lgb.Dataset(X, label=y), num_boost_round=5)
    np.testing.assert_allclose(backend.margins(), custom.predict(X, raw_score=True), rtol=0, atol=ATOL)


@pytest.mark.parametrize("K", [2, 3])
def test_unit_scale_matches_n_scale_with_hessian_parameters_divided_by_n(K):
    X, y = make_data(K=K)
    n = len(y)
    P = random_weights(n, K)
    # values off the data's exact boundaries (at f_0 every gradient is +-1/2 and every hessian
    # 1/4 per row, so e.g. lambda_l1 = 0.5 or min_sum_hessian_in_leaf = 2 tie in float rounding)
    params = dict(num_threads=1, num_leaves=15, lambda_l2=1.0, lambda_l1=0.3, min_gain_to_split=0.2,
                  min_sum_hessian_in_leaf=2.2)
    scaled = LightGBMBackend("n", **params)
    unit = LightGBMBackend("unit", **unit_params(n, **params))
    for backend in (scaled, unit):
        backend.start(X, y, K)
        backend.step(P)
    np.testing.assert_allclose(unit.margins(), scaled.margins(), rtol=0, atol=ATOL)
    np.testing.assert_allclose(unit.fit_native(X, y, K, 3).predict_margin(X),
                               scaled.fit_native(X, y, K, 3).predict_margin(X), rtol=0, atol=ATOL)
    assert np.ptp(scaled.margins()) > 0.1


def test_unit_scale_with_default_regularisation_learns_nothing_and_adds_no_round():
    X, y = make_data()
    backend = LightGBMBackend("unit", num_threads=1)
    backend.start(X, y, 2)
    backend.step(random_weights(len(y), 2))
    assert np.ptp(backend.margins()) == 0.0  # every hessian sum is below min_sum_hessian_in_leaf = 1
    # LightGBM keeps a constant first tree but drops later trees without a split
    assert backend.n_rounds == 1


# -- per-round weights --------------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("weight_scale", ["n", "unit"])
def test_step_equals_one_round_on_explicit_D0(K, weight_scale):
    X, y = make_data(K=K)
    n = len(y)
    params = {"num_leaves": 15, "num_threads": 1}
    if weight_scale == "unit":
        params = unit_params(n, **params)
    backend = LightGBMBackend(weight_scale, **params)
    backend.start(X, y, K)
    backend.step(random_weights(n, K, seed=4))  # move away from f_0 first
    before = backend.margins()
    P = random_weights(n, K, seed=5)
    backend.step(P)
    new_tree = backend.margins() - before

    # D0: every x_i once per label k, weighted P[i, k], continuing from the current margins,
    # binned like the n rows (reference=) and trained with LightGBM's built-in objective
    scale = n if weight_scale == "n" else 1.0
    reference = lgb.Dataset(X, label=y, params=native_params(K, **backend.params))
    D0 = lgb.Dataset(
        np.tile(X, (K, 1)),
        label=np.repeat(np.arange(K), n),
        weight=P.T.ravel() * scale,
        init_score=np.tile(before, K) if K == 2 else np.tile(before, (K, 1)),
        reference=reference,
    )
    ref = lgb.train(native_params(K, **backend.params), D0, num_boost_round=1)
    np.testing.assert_allclose(new_tree, ref.predict(X, raw_score=True), rtol=0, atol=ATOL)
    assert np.ptp(new_tree) > 1e-2  # the reference tree is not trivial


def test_positive_min_data_in_leaf_counts_original_rows_not_D0_rows():
    # Documented: with min_data_in_leaf > 0 a step is a round on the n rows (each x_i once),
    # not on the 2n rows of D0.
    X, y = make_data()
    n = len(y)
    backend = LightGBMBackend(num_threads=1, num_leaves=31, min_data_in_leaf=20)
    backend.start(X, y, 2)
    before = backend.margins()
    P = random_weights(n, 2, seed=5)
    backend.step(P)
    new_tree = backend.margins() - before
    params = native_params(2, num_leaves=31, min_data_in_leaf=20)
    reference = lgb.Dataset(X, label=y, params=params)
    D0 = lgb.Dataset(np.tile(X, (2, 1)), label=np.repeat([0, 1], n), weight=P.T.ravel() * n,
                     init_score=np.tile(before, 2), reference=reference)
    on_D0 = lgb.train(params, D0, num_boost_round=1).predict(X, raw_score=True)
    assert np.abs(new_tree - on_D0).max() > 1e-2


@pytest.mark.parametrize("K", [2, 3])
def test_zero_weights_drop_rows(K):
    X, y = make_data(K=K)
    n = len(y)
    backend = LightGBMBackend(num_threads=1, num_leaves=7)
    backend.start(X, y, K)
    before = backend.margins()
    keep = np.zeros(n, dtype=bool)
    keep[np.random.default_rng(3).permutation(n)[: n // 2]] = True
    W = empirical(y, K)
    W[~keep] = 0.0
    W /= W.sum()
    backend.step(W)
    new_tree = backend.margins() - before

    # LightGBM's own round on the kept rows (weight 2 each at scale "n"), from f_0's margins,
    # binned like the full data
    params = native_params(K, num_leaves=7)
    reference = lgb.Dataset(X, label=y, params=params)
    half = lgb.Dataset(X[keep], label=y[keep], weight=np.full(keep.sum(), 2.0), init_score=before[keep],
                       reference=reference)
    ref = lgb.train(params, half, num_boost_round=1)
    np.testing.assert_allclose(new_tree, ref.predict(X, raw_score=True), rtol=0, atol=ATOL)
    assert np.ptp(new_tree) > 1e-2


def test_weights_change_every_round():
    # Dataset.set_weight would silently keep the first weights; budro's gradients cannot.
    X, y = make_data()
    n = len(y)
    a, b = LightGBMBackend(num_threads=1), LightGBMBackend(num_threads=1)
    for backend in (a, b):
        backend.start(X, y, 2)
        backend.step(random_weights(n, 2, seed=1))
    a.step(random_weights(n, 2, seed=2))
    b.step(random_weights(n, 2, seed=3))
    assert np.abs(a.margins() - b.margins()).max() > 1e-2


def test_margins_come_from_the_current_model():
    X, y = make_data(K=3)
    backend = LightGBMBackend(num_threads=1, num_leaves=7)
    backend.start(X, y, 3)
    for seed in range(3):
        backend.step(random_weights(len(y), 3, seed=seed))
        np.testing.assert_allclose(backend.margins(), backend.model.predict(X, raw_score=True), rtol=0, atol=1e-12)
    assert backend.margins().shape == (len(y), 3)
    m = backend.margins()
    m[:] = 0.0  # a copy: the cache is not exposed
    assert np.ptp(backend.margins()) > 0
    np.testing.assert_allclose(backend.losses()[np.arange(len(y)), y].mean(),
                               -np.log(backend.predict_proba(X)[np.arange(len(y)), y]).mean())


# -- the model outside budro --------------------------------------------------------------


@pytest.mark.parametrize(
    "K, weight_scale, extra",
    [(2, "n", {}), (2, "unit", {}), (2, "n", {"scale_pos_weight": 2.5}), (3, "n", {}), (3, "n", {"feature_fraction": 0.6})],
)
def test_direct_rounds_equal_the_public_api(monkeypatch, K, weight_scale, extra):
    """The rounds after f_0 made by LightGBM's C functions directly (the default where the
    package exposes them) give the margins, losses and model of ``Booster.update``, to the bit,
    and leave the booster's own reading of the training score current."""
    import budro.backends.lightgbm as bl

    X, y = make_data(K=K)
    n = len(y)
    params = dict(num_leaves=8, num_threads=1, **extra)
    if weight_scale == "unit":
        params = unit_params(n, **params)

    def run():
        return record_rounds(LightGBMBackend(weight_scale, **params), X, y, K, lambda seed: random_weights(n, K, seed=seed),
                             random_state=3)

    direct, seen_direct = run()
    assert type(direct._direct) is bl._DirectRounds
    # the booster's own training score (Booster.eval_train) follows the direct rounds
    got = []
    direct.model.eval_train(feval=lambda preds, _data: got.append(np.array(preds)) or ("m", 0.0, False))
    np.testing.assert_array_equal(got[0].reshape(n, -1).squeeze() if K == 2 else got[0], seen_direct[-1][0])
    monkeypatch.setattr(bl, "_direct_rounds", lambda *args: None)
    public, seen_public = run()
    assert public._direct is None
    assert_same_rounds(seen_direct, seen_public, n, K)
    assert direct.model.model_to_string() == public.model.model_to_string()
    before = direct.margins()
    direct.step(random_weights(n, K, seed=9))
    last = direct.margins()
    assert not np.array_equal(before, last)  # margins() returned a copy
    direct.finish()
    assert direct._direct is None
    np.testing.assert_allclose(direct.predict_margin(X).reshape(last.shape), last, atol=ATOL)


def test_direct_rounds_need_the_library_functions_the_handle_and_the_score_flags(monkeypatch):
    """Without any of them ``_direct_rounds`` gives None and the fit's rounds go through
    ``Booster.update`` (whose rounds test_direct_rounds_equal_the_public_api compares)."""
    from types import SimpleNamespace

    import lightgbm.basic

    import budro.backends.lightgbm as bl

    X, y = make_data()
    backend = LightGBMBackend(num_leaves=4, num_threads=1)
    backend.start(X, y, 2)
    booster, n = backend.model, len(y)
    flags = booster._Booster__is_predicted_cur_iter
    assert type(bl._direct_rounds(lgb, booster, n, 2)) is bl._DirectRounds
    assert bl._direct_rounds(lgb, SimpleNamespace(_Booster__is_predicted_cur_iter=flags), n, 2) is None
    assert bl._direct_rounds(lgb, SimpleNamespace(_handle=booster._handle), n, 2) is None
    monkeypatch.setattr(lightgbm.basic, "_LIB", object())  # a library without those C functions
    assert bl._direct_rounds(lgb, booster, n, 2) is None


@pytest.mark.parametrize("K", [2, 3])
def test_saved_model_loads_in_plain_lightgbm_with_its_objective(tmp_path, K):
    X, y = make_data(K=K)
    backend = LightGBMBackend(num_threads=1, num_leaves=7)
    backend.start(X, y, K)
    backend.step(random_weights(len(y), K))
    path = tmp_path / "model.txt"
    backend.save_model(path)
    loaded = lgb.Booster(model_file=str(path))
    X_new, _ = make_data(n=40, K=K, seed=7)
    np.testing.assert_array_equal(loaded.predict(X_new, raw_score=True), backend.predict_margin(X_new))
    proba = loaded.predict(X_new)
    expected = backend.predict_proba(X_new)[:, 1] if K == 2 else backend.predict_proba(X_new)
    np.testing.assert_allclose(proba, expected, rtol=0, atol=1e-12)
    # saving does not disturb training
    backend.step(random_weights(len(y), K, seed=9))
    assert backend.n_rounds == 3


@pytest.mark.parametrize("reserve", [None, 0])
@pytest.mark.parametrize("case", ["binary", "multiclass", "categorical", "large"])
def test_model_text_is_model_to_string_serialised_once(case, reserve, monkeypatch):
    """``_model_text`` (LightGBM's C serialisation called once into a reserved buffer) gives
    ``model_to_string``'s text exactly: two and three classes, native categorical splits (their
    bitsets), a model of over 1 MiB (where ``model_to_string`` serialises twice), and a
    reservation too short (``reserve=0``: 64 KiB, the second call with the reported size)."""
    from budro.backends import lightgbm as bl

    if reserve is not None:
        monkeypatch.setattr(bl, "_TEXT_BYTES_PER_NODE", reserve)
    K = 3 if case == "multiclass" else 2
    n = 3000 if case == "large" else N
    X, y = make_data(n=n, K=K)
    categorical = ()
    if case == "categorical":
        X[:, 2] = np.random.default_rng(3).integers(0, 12, len(y))
        categorical = (2,)
    backend = LightGBMBackend(num_threads=1, num_leaves=255 if case == "large" else 7, min_data_in_leaf=1)
    backend.start(X, y, K, categorical_features=categorical)
    for r in range(45 if case == "large" else 3):
        backend.step(random_weights(len(y), K, seed=r))
    booster = backend.model
    expected = booster.model_to_string(num_iteration=-1)
    if case == "large":
        assert len(expected) > 1 << 20
    assert bl._model_text(booster) == expected
    if case == "categorical":
        assert "cat_threshold=" in expected


def test_model_text_falls_back_to_model_to_string_when_the_reservation_is_refused(monkeypatch):
    """A buffer the system refuses (MemoryError) is no failure: ``model_to_string``'s own text."""
    from budro.backends import lightgbm as bl

    X, y = make_data()
    backend = LightGBMBackend(num_threads=1, num_leaves=7)
    backend.start(X, y, 2)
    backend.step(random_weights(len(y), 2))
    expected = backend.model.model_to_string(num_iteration=-1)

    monkeypatch.setattr(bl, "_TEXT_BYTES_PER_NODE", 1 << 50)  # petabytes a node: numpy refuses
    with pytest.raises(MemoryError):
        np.empty((1 << 50) * 10, dtype=np.uint8)
    assert bl._model_text(backend.model) == expected


def test_objective_line_goes_after_max_feature_idx_in_the_header_only():
    """The objective line is inserted after ``max_feature_idx`` (where LightGBM writes it), the
    text left as it was around it; a text whose header has one keeps it; a line that starts with
    ``objective=`` further down (never in LightGBM's trees) is not read as the header's."""
    from budro.backends.lightgbm import _with_objective_line

    text = "tree\nversion=v4\nnum_class=1\nmax_feature_idx=4\nfeature_names=a b\n\nTree=0\nnum_leaves=1\n\nend of trees\n"
    out = _with_objective_line(text, "binary sigmoid:1")
    assert out == text.replace("max_feature_idx=4\n", "max_feature_idx=4\nobjective=binary sigmoid:1\n")
    assert _with_objective_line(out, "multiclass num_class:3") == out
    later = text + "objective=none\n"
    assert _with_objective_line(later, "binary sigmoid:1") == out + "objective=none\n"
    X, y = make_data()
    backend = LightGBMBackend(num_threads=1, num_leaves=7)
    backend.start(X, y, 2)
    backend.step(random_weights(len(y), 2))
    plain = backend.model.model_to_string(num_iteration=-1)
    assert "\nobjective=" not in plain
    lines = plain.split("\n")
    lines.insert(lines.index(next(l for l in lines if l.startswith("max_feature_idx="))) + 1, "objective=binary sigmoid:1")
    assert backend._model_string() == "\n".join(lines)


def test_finished_backend_pickles_and_predicts_probabilities():
    X, y = make_data()
    backend = LightGBMBackend(num_threads=1, num_leaves=7)
    backend.start(X, y, 2)
    backend.step(random_weights(len(y), 2))
    expected = backend.predict_margin(X)
    backend.finish()
    np.testing.assert_array_equal(backend.predict_margin(X), expected)
    np.testing.assert_allclose(backend.model.predict(X), backend.predict_proba(X)[:, 1], rtol=0, atol=1e-12)
    restored = pickle.loads(pickle.dumps(backend))
    np.testing.assert_array_equal(restored.predict_margin(X), expected)
    assert restored.n_rounds == 2 and restored.n_classes_ == 2
    with pytest.raises(BudroError, match="released"):
        restored.margins()


def test_pickling_during_training_keeps_the_original_running():
    X, y = make_data()
    backend = LightGBMBackend(num_threads=1, num_leaves=7)
    backend.start(X, y, 2)
    restored = pickle.loads(pickle.dumps(backend))
    np.testing.assert_array_equal(restored.predict_margin(X), backend.margins())
    np.testing.assert_allclose(restored.model.predict(X), backend.predict_proba(X)[:, 1], rtol=0, atol=1e-12)
    with pytest.raises(BudroError):
        restored.step(empirical(y, 2))
    backend.step(empirical(y, 2))
    assert backend.n_rounds == 2 and restored.n_rounds == 1


def test_fit_native_returns_a_predicting_backend_and_takes_sample_weights():
    X, y = make_data(K=3)
    backend = LightGBMBackend(num_threads=1, num_leaves=7)
    native = backend.fit_native(X, y, 3, 4)
    assert isinstance(native, LightGBMBackend) and native.n_rounds == 4
    np.testing.assert_allclose(native.predict_proba(X).sum(axis=1), 1.0)
    w = np.random.default_rng(0).random(len(y))
    weighted = backend.fit_native(X, y, 3, 4, sample_weight=w)
    expected = lgb.train(native_params(3, num_leaves=7), lgb.Dataset(X, label=y, weight=w * len(y) / w.sum()),
                         num_boost_round=4)
    np.testing.assert_allclose(weighted.predict_margin(X), expected.predict(X, raw_score=True), rtol=0, atol=ATOL)
    with pytest.raises(ValidationError, match="sample_weight"):
        backend.fit_native(X, y, 3, 4, sample_weight=w[:-1])


# -- configuration and input checks -------------------------------------------------------
# (those every built-in backend shares, bad weights and training data included, are in
# tests/test_backend_inputs.py)


def test_defaults_and_aliases():
    backend = LightGBMBackend(eta=0.1, reg_lambda=2.0, n_jobs=1, random_state=5, min_child_weight=3.0)
    params = backend.params
    assert params["min_data_in_leaf"] == 0 and params["verbosity"] == -1
    assert params["learning_rate"] == 0.1 and params["lambda_l2"] == 2.0 and params["num_threads"] == 1
    assert params["seed"] == 5 and params["min_sum_hessian_in_leaf"] == 3.0
    assert "eta=0.1" in repr(backend)
    assert backend.n_rounds == 0


def test_aliases_are_lightgbms_own():
    basic = pytest.importorskip("lightgbm.basic")
    table = getattr(getattr(basic, "_ConfigAliases", None), "_get_all_param_aliases", None)
    if table is None:
        pytest.skip("this LightGBM does not expose its alias table")
    aliases = table()
    for alias, native in PARAM_ALIASES.items():
        assert alias in aliases[native], (alias, native)
    for key in ("objective", "num_iterations", "boosting", "metric", "num_class", "is_unbalance"):
        assert set(aliases[key]) <= set(RESERVED_PARAMS), key
