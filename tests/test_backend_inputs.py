"""What the built-in backends accept and hand back: native model bytes, missing values and
categorical codes, and parameter values checked before any data."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from budro import registry
from budro.backends.base import Backend
from budro.exceptions import BudroError, ConfigError, PluginError, ValidationError

BACKENDS = {
    "xgboost": {"max_depth": 3, "nthread": 1},
    "lightgbm": {"num_leaves": 7, "num_threads": 1},
    "catboost": {"depth": 3, "thread_count": 1},
}


def make_data(n=150, d=4, K=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.argmax(X[:, :K] * 2.0 + rng.gumbel(size=(n, K)), axis=1) if K > 2 else (X[:, 0] + rng.normal(size=n) > 0).astype(int)
    return X, y


def random_weights(n, K, seed=3):
    P = np.random.default_rng(seed).random((n, K)) ** 2
    return P / P.sum()


def trained(name, K, rounds=3, X=None, y=None, **start_kw):
    pytest.importorskip(name)
    if X is None:
        X, y = make_data(K=K)
    backend = registry.create("backend", name, **BACKENDS[name])
    backend.start(X, y, K, **start_kw)
    for t in range(rounds - 1):
        backend.step(random_weights(len(y), K, seed=t))
    return backend


# -- native model bytes ------------------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("name", sorted(BACKENDS))
@pytest.mark.parametrize("finished", [False, True])
def test_native_bytes_round_trip_predicts_bitwise_the_same(name, K, finished):
    backend = trained(name, K)
    if finished:
        backend.finish()
    X_new, _ = make_data(n=60, K=K, seed=9)
    data = backend.to_native_bytes()
    assert isinstance(data, bytes) and data
    assert backend.native_format
    loaded = registry.create("backend", name, **BACKENDS[name])
    loaded.load_native_bytes(data, n_classes=K, n_features=X_new.shape[1])
    assert loaded.n_rounds == backend.n_rounds == 3
    assert loaded.n_classes_ == K and loaded.n_features_in_ == X_new.shape[1]
    np.testing.assert_array_equal(loaded.predict_margin(X_new), backend.predict_margin(X_new))
    np.testing.assert_array_equal(loaded.predict_proba(X_new), backend.predict_proba(X_new))
    # finished: no training structures
    with pytest.raises(Exception, match="released|no model"):
        loaded.step(random_weights(150, K))
    # and it exports the same bytes again
    again = loaded.to_native_bytes()
    other = registry.create("backend", name, **BACKENDS[name])
    other.load_native_bytes(again, n_classes=K, n_features=X_new.shape[1])
    np.testing.assert_array_equal(other.predict_margin(X_new), backend.predict_margin(X_new))


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_native_bytes_that_contradict_the_description_are_rejected(name):
    backend = trained(name, 2, rounds=2)
    data = backend.to_native_bytes()
    fresh = lambda: registry.create("backend", name, **BACKENDS[name])  # noqa: E731
    with pytest.raises(ValidationError, match="features"):
        fresh().load_native_bytes(data, n_classes=2, n_features=5)
    with pytest.raises(ValidationError, match="3 classes"):
        fresh().load_native_bytes(data, n_classes=3, n_features=4)
    library = {"xgboost": "XGBoost", "lightgbm": "LightGBM", "catboost": "CatBoost"}[name]
    for junk in (b"garbage bytes", data[: len(data) // 5], b""):
        with pytest.raises(ValidationError, match=f"not a valid {library} model"):
            fresh().load_native_bytes(junk, n_classes=2, n_features=4)
    with pytest.raises(ValidationError, match="expected bytes"):
        fresh().load_native_bytes("text", n_classes=2, n_features=4)
    with pytest.raises(ValidationError, match="n_classes"):
        fresh().load_native_bytes(data, n_classes=1, n_features=4)
    with pytest.raises(ValidationError, match="categorical_features"):
        fresh().load_native_bytes(data, n_classes=2, n_features=4, categorical_features=(4,))


def test_third_party_backend_without_native_bytes_gets_a_clear_error():
    class Minimal(Backend):
        name = "minimal"
        start = step = margins = predict_margin = save_model = fit_native = lambda *a, **k: None
        n_rounds = model = property(lambda self: 0)

    with pytest.raises(PluginError, match="minimal.*to_native_bytes"):
        Minimal().to_native_bytes()
    with pytest.raises(PluginError, match="cannot load a model from bytes"):
        Minimal().load_native_bytes(b"x", n_classes=2, n_features=1)


def test_a_cut_lightgbm_text_is_rejected_before_lightgbm_parses_it():
    """LightGBM trusts the tree sizes of its header: a model text cut inside a tree crashes it."""
    from budro.backends.lightgbm import check_lightgbm_text

    text = trained("lightgbm", 3, rounds=2).to_native_bytes().decode()
    check_lightgbm_text(text, 4)
    cut = text[: text.index("Tree=2") + 40]
    with pytest.raises(ValidationError, match="tree 2 is not where 'tree_sizes' says"):
        check_lightgbm_text(cut, 4)
    script = f"import lightgbm as lgb; lgb.Booster(model_str={cut!r}); print('loaded')"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode != 0, (proc.returncode, proc.stdout, proc.stderr)
    # same byte length, so the tree sizes still fit: the node-level checks speak
    i = text.index("split_feature=", text.index("Tree=1")) + len("split_feature=")
    token = text[i:].split()[0]
    edited = text[:i] + "9" * len(token) + text[i + len(token):]
    with pytest.raises(ValidationError, match=r"tree 1, node 0: split feature 9+ is not in \[0, 4\)"):
        check_lightgbm_text(edited, 4)
    i = text.index("left_child=", text.index("Tree=1")) + len("left_child=")
    token = text[i:].split()[0]
    edited = text[:i] + "9" * len(token) + text[i + len(token):]
    with pytest.raises(ValidationError, match=r"tree 1, node 0: left_child 9+ is neither"):
        check_lightgbm_text(edited, 4)


# -- XGBoost's JSON model checked before XGBoost reads it ---------------------------------------


def _xgb_json(K=2):
    backend = trained("xgboost", K, rounds=2)
    return json.loads(backend.to_native_bytes())


def _first_split_node(tree):
    return next(i for i, c in enumerate(tree["left_children"]) if c != -1)


def test_check_xgboost_json_accepts_real_models():
    from budro.backends.xgboost import check_xgboost_json

    for K in (2, 3):
        check_xgboost_json(_xgb_json(K), 4)
        check_xgboost_json(_xgb_json(K), None)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda t: t["split_indices"].__setitem__(_first_split_node(t), 10**6), r"tree 1, node \d+: split index 1000000"),
        (lambda t: t["split_indices"].__setitem__(_first_split_node(t), -1), r"tree 1, node \d+: split index -1"),
        (lambda t: t["left_children"].__setitem__(_first_split_node(t), 10**6), r"tree 1, node \d+: left_children index"),
        (lambda t: t["right_children"].__setitem__(_first_split_node(t), -7), r"tree 1, node \d+: right_children index"),
        (lambda t: t["right_children"].__setitem__(_first_split_node(t), -1), r"tree 1, node \d+ has one child"),
        (lambda t: t["split_indices"].pop(), r"tree 1: 'split_indices' has"),
        (lambda t: t["parents"].__setitem__(1, 99999), r"tree 1, node 1: parent index"),
        (lambda t: t["tree_param"].__setitem__("num_nodes", "1000"), r"tree 1: 'left_children' has"),
        (lambda t: t.__setitem__("left_children", "abc"), r"tree 1: 'left_children' must be a list of integers"),
    ],
)
def test_check_xgboost_json_names_the_broken_tree_and_node(mutate, match):
    from budro.backends.xgboost import XGBoostBackend, check_xgboost_json

    model = _xgb_json()
    mutate(model["learner"]["gradient_booster"]["model"]["trees"][1])
    with pytest.raises(ValidationError, match=match):
        check_xgboost_json(model, 4)
    with pytest.raises(ValidationError, match=match):
        XGBoostBackend(nthread=1).load_native_bytes(json.dumps(model).encode(), n_classes=2, n_features=4)


def test_check_xgboost_json_checks_the_header():
    from budro.backends.xgboost import check_xgboost_json

    model = _xgb_json()
    with pytest.raises(ValidationError, match="for 5 features: its num_feature is 4"):
        check_xgboost_json(model, 5)
    model["learner"]["learner_model_param"]["num_feature"] = "0"
    with pytest.raises(ValidationError, match="num_feature is 0"):
        check_xgboost_json(model, None)
    model = _xgb_json()
    model["learner"]["learner_model_param"]["num_class"] = "x"
    with pytest.raises(ValidationError, match="num_class is 'x'"):
        check_xgboost_json(model, 4)
    model = _xgb_json()
    model["learner"]["gradient_booster"]["model"]["tree_info"][0] = 5
    with pytest.raises(ValidationError, match="tree 0: output group 5"):
        check_xgboost_json(model, 4)
    with pytest.raises(ValidationError, match="no 'learner'"):
        check_xgboost_json({"x": 1}, 4)


def test_a_split_index_out_of_range_crashes_xgboost_but_not_budro(tmp_path):
    """The model that check_xgboost_json rejects really crashes XGBoost (in a subprocess)."""
    model = _xgb_json()
    tree = model["learner"]["gradient_booster"]["model"]["trees"][1]
    tree["split_indices"][_first_split_node(tree)] = 10**6
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(model))
    script = textwrap.dedent(
        f"""
        import numpy as np, xgboost as xgb
        b = xgb.Booster(); b.load_model({str(path)!r})
        print(b.inplace_predict(np.zeros((5, 4))))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode < 0 or proc.returncode > 128, (proc.returncode, proc.stdout, proc.stderr)
    from budro.backends.xgboost import XGBoostBackend

    with pytest.raises(ValidationError, match="split index 1000000"):
        XGBoostBackend(nthread=1).load_native_bytes(path.read_bytes(), n_classes=2, n_features=4)


# -- missing values and native categorical features -----------------------------------------

CATS = (1, 3)


def mixed_data(n=240, K=2, seed=0, missing=0.1):
    """Numeric columns 0, 2, 4 (with NaN) and categorical codes in columns 1 (6 levels) and 3
    (4 levels, with NaN); the label depends on a non-monotone set of categories."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    X[:, 1] = rng.integers(0, 6, n)
    X[:, 3] = rng.integers(0, 4, n)
    score = X[:, 0] + 2.0 * np.isin(X[:, 1], (1, 4)) - 1.0 * (X[:, 3] == 2)
    for c in (0, 2, 3):
        X[rng.random(n) < missing, c] = np.nan
    if K == 2:
        y = (score + rng.normal(size=n) > 0.5).astype(int)
    else:
        y = np.digitize(score + rng.normal(size=n), np.quantile(score, np.linspace(0, 1, K + 1)[1:-1]))
    return X, y


def empirical(y, K):
    W = np.zeros((len(y), K))
    W[np.arange(len(y)), y] = 1.0 / len(y)
    return W


def new_rows(K):
    X, _ = mixed_data(n=40, K=K, seed=7)
    X[:5, 1] = np.nan  # missing / unseen category
    X[5:10, 0] = np.nan
    X[10:15, 3] = 5.0  # a code never seen in training
    return X


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_missing_values_and_categories_equal_native_training(name, K):
    pytest.importorskip(name)
    X, y = mixed_data(K=K)
    backend = registry.create("backend", name, **BACKENDS[name])
    backend.start(X, y, K, categorical_features=CATS)
    for _ in range(3):
        backend.step(empirical(y, K))
    native = backend.fit_native(X, y, K, 4, categorical_features=list(CATS))
    np.testing.assert_allclose(backend.margins(), native.predict_margin(X), rtol=0, atol=1e-6)
    X_new = new_rows(K)
    m = backend.predict_margin(X_new)
    assert np.isfinite(m).all()
    np.testing.assert_allclose(m, native.predict_margin(X_new), rtol=0, atol=1e-6)
    assert backend.categorical_features == native.categorical_features == CATS
    # the columns really are categorical for the library
    meta = {
        "xgboost": lambda b: tuple(i for i, t in enumerate(b.model.feature_types) if t == "c"),
        "lightgbm": _lgb_categorical,
        "catboost": lambda b: tuple(sorted(b.model.get_cat_feature_indices())),
    }[name]
    assert meta(backend) == CATS
    # and the model bytes carry them
    data = backend.to_native_bytes()
    loaded = registry.create("backend", name, **BACKENDS[name])
    loaded.load_native_bytes(data, n_classes=K, n_features=5, categorical_features=CATS)
    np.testing.assert_array_equal(loaded.predict_margin(X_new), backend.predict_margin(X_new))
    with pytest.raises(ValidationError, match="categorical"):
        registry.create("backend", name, **BACKENDS[name]).load_native_bytes(data, n_classes=K, n_features=5)


def _lgb_categorical(backend):
    from budro.backends.lightgbm import _categorical_of

    return _categorical_of(backend.to_native_bytes().decode())


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_categorical_columns_are_checked_when_predicting(name):
    backend = trained(name, 2, rounds=2, X=mixed_data()[0], y=mixed_data()[1], categorical_features=CATS)
    X_new = new_rows(2)
    X_new[0, 1] = 2.5
    with pytest.raises(ValidationError, match=r"column 1 is categorical.*found 2\.5"):
        backend.predict_margin(X_new)
    X_new[0, 1] = 1.0
    X_new[0, 0] = -np.inf
    with pytest.raises(ValidationError, match="infinite"):
        backend.predict_margin(X_new)


def _library_margins(name, X, y, rounds, X_new):
    """The library's own training on numeric ``X`` with NaN, outside budro."""
    lib = pytest.importorskip(name)
    if name == "xgboost":
        params = {"objective": "binary:logistic", "base_score": 0.5, "tree_method": "hist", "max_depth": 3, "nthread": 1}
        booster = lib.train(params, lib.DMatrix(X, label=y), num_boost_round=rounds)
        return booster.predict(lib.DMatrix(X_new), output_margin=True)
    if name == "lightgbm":
        params = {"objective": "binary", "num_leaves": 7, "num_threads": 1, "min_data_in_leaf": 0,
                  "min_sum_hessian_in_leaf": 1.0, "boost_from_average": False, "verbosity": -1}
        return lib.train(params, lib.Dataset(X, label=y), num_boost_round=rounds).predict(X_new, raw_score=True)
    model = lib.CatBoost({"loss_function": "Logloss", "iterations": rounds, "depth": 3, "thread_count": 1,
                          "learning_rate": 0.03, "random_strength": 0, "bootstrap_type": "No",
                          "boosting_type": "Plain", "boost_from_average": False, "logging_level": "Silent",
                          "allow_writing_files": False})
    model.fit(lib.Pool(X, label=y))
    return model.predict(X_new, prediction_type="RawFormulaVal")


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_missing_values_are_the_librarys_missing_values(name):
    """NaN reaches the library as its missing value: budro's rounds equal the library's own
    training on the same matrix (no categorical columns), at training and at new rows."""
    X, y = mixed_data(missing=0.3)
    backend = registry.create("backend", name, **BACKENDS[name])
    backend.start(X, y, 2)
    for _ in range(3):
        backend.step(empirical(y, 2))
    X_new = new_rows(2)
    X_new[:, 1] = np.nan
    np.testing.assert_allclose(backend.predict_margin(X_new), _library_margins(name, X, y, 4, X_new), rtol=0, atol=1e-6)
    assert np.isnan(X).any() and np.isnan(X_new).any()


def test_lightgbm_categorical_step_equals_one_round_on_explicit_D0():
    """With budro's default max_cat_to_onehot (every categorical split one-vs-rest) a step on the
    n rows is the round on the 2n rows of D0; LightGBM's many-vs-many search (its default
    max_cat_to_onehot=4) counts rows, which D0 has twice as many of, and grows another tree."""
    lgb = pytest.importorskip("lightgbm")
    X, _ = mixed_data(n=2000)
    n = len(X)
    rng = np.random.default_rng(1)
    X[:, 1] = rng.integers(0, 40, n)
    y = (rng.normal(size=40)[X[:, 1].astype(int)] * 2 + rng.normal(size=n) > 0).astype(int)
    differences = {}
    for label, extra in (("budro", {}), ("lightgbm", {"max_cat_to_onehot": 4})):
        backend = registry.create("backend", "lightgbm", num_leaves=15, num_threads=1, **extra)
        backend.start(X, y, 2, categorical_features=CATS)
        backend.step(random_weights(n, 2, seed=4))
        before = backend.margins()
        P = random_weights(n, 2, seed=5)
        backend.step(P)
        new_tree = backend.margins() - before
        params = {**backend.params, "objective": "binary", "boost_from_average": False, "metric": "None"}
        reference = lgb.Dataset(X, label=y, params=params, categorical_feature=list(CATS))
        D0 = lgb.Dataset(np.tile(X, (2, 1)), label=np.repeat([0, 1], n), weight=P.T.ravel() * n,
                         init_score=np.tile(before, 2), reference=reference, categorical_feature=list(CATS))
        ref = lgb.train(params, D0, num_boost_round=1)
        differences[label] = np.abs(new_tree - ref.predict(X, raw_score=True)).max()
        assert np.ptp(new_tree) > 1e-2
    assert differences["budro"] < 1e-6, differences
    assert differences["lightgbm"] > 1e-3, differences  # the default matters


def test_xgboost_categorical_step_equals_one_round_on_explicit_D0():
    xgb = pytest.importorskip("xgboost")
    X, y = mixed_data(n=400)
    n = len(y)
    X[:, 0] = np.round(X[:, 0], 1)  # few distinct values: the same bins for n and 2n rows
    X[:, 2] = np.round(X[:, 2], 1)
    X[:, 4] = np.round(X[:, 4], 1)
    backend = registry.create("backend", "xgboost", max_depth=4, nthread=1, max_cat_to_onehot=1)
    backend.start(X, y, 2, categorical_features=CATS)
    backend.step(random_weights(n, 2, seed=4))
    before = backend.margins()
    P = random_weights(n, 2, seed=5)
    backend.step(P)
    new_tree = backend.margins() - before
    types = ["c" if c in CATS else "q" for c in range(5)]
    D0 = xgb.DMatrix(np.tile(X, (2, 1)), label=np.repeat([0, 1], n), weight=P.T.ravel() * n,
                     base_margin=np.tile(before, 2), feature_types=types, enable_categorical=True)
    params = {**backend.params, "objective": "binary:logistic"}
    ref = xgb.train(params, D0, num_boost_round=1)
    tree = ref.predict(xgb.DMatrix(X, base_margin=np.zeros(n), feature_types=types, enable_categorical=True),
                       output_margin=True)
    np.testing.assert_allclose(new_tree, tree, rtol=0, atol=1e-5)
    assert np.ptp(new_tree) > 1e-2


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_category_whose_rows_carry_no_weight(name):
    """Rows of one category weighted zero in a round (BuDRO's adversary may do so): the round is
    finite and reproducible."""
    X, y = mixed_data()
    runs = []
    for _ in range(2):
        backend = trained(name, 2, rounds=1, X=X, y=y, categorical_features=CATS)
        P = random_weights(len(y), 2, seed=6)
        P[X[:, 1] == 4] = 0.0
        backend.step(P / P.sum())
        runs.append(backend.margins())
    assert np.isfinite(runs[0]).all()
    np.testing.assert_array_equal(runs[0], runs[1])


# -- parameter values checked before any data -------------------------------------------------

BAD_VALUES = [
    # the four cases of issue 11
    ("xgboost", {"max_depth": -1}, r"'max_depth' must be an integer >= 0, got -1"),
    ("xgboost", {"learning_rate": -0.5}, r"'learning_rate' must be a number >= 0, got -0.5"),
    ("xgboost", {"learning_rate": "fast"}, r"'learning_rate' must be a number >= 0, got 'fast'"),
    ("lightgbm", {"num_leaves": 1}, r"'num_leaves' must be an integer in \[2, 131072\], got 1"),
    ("catboost", {"subsample": 0.5}, r"'subsample' needs bootstrap_type 'Bernoulli', 'Poisson', 'MVS'"),
    # more: explicit rules
    ("lightgbm", {"learning_rate": -0.5}, r"'learning_rate' must be a number > 0"),
    ("lightgbm", {"learning_rate": "fast"}, r"'learning_rate' must be a number > 0, got 'fast'"),
    ("lightgbm", {"subsample": 1.5}, r"'subsample' must be a number in \(0, 1\], got 1.5"),
    ("lightgbm", {"max_depth": 2.5}, r"'max_depth' must be an integer, got 2.5"),
    ("catboost", {"learning_rate": -0.5}, r"'learning_rate' must be a number > 0"),
    ("catboost", {"depth": 0}, r"'depth' must be an integer in \[1, 16\]"),
    ("catboost", {"bagging_temperature": 1.0}, r"'bagging_temperature' needs bootstrap_type 'Bayesian'"),
    ("xgboost", {"subsample": 0}, r"'subsample' must be a number in \(0, 1\], got 0"),
    ("xgboost", {"reg_lambda": float("nan")}, r"'reg_lambda' must be a number >= 0, got nan"),
    ("xgboost", {"max_bin": True}, r"'max_bin' must be an integer >= 2, got True"),
    # more: the library's own check, the key found by trying each parameter alone
    ("xgboost", {"max_depth": 3, "tree_method": "fastest"}, r"'tree_method' = 'fastest' is not accepted by XGBoost:.*valid values"),
    ("xgboost", {"grow_policy": "sideways"}, r"'grow_policy' = 'sideways' is not accepted by XGBoost"),
    ("lightgbm", {"num_leaves": 8, "extra_trees": "maybe"}, r"'extra_trees' = 'maybe' is not accepted by LightGBM"),
    ("catboost", {"grow_policy": "Spiral"}, r"'grow_policy' = 'Spiral' is not accepted by CatBoost"),
    ("catboost", {"bootstrap_type": "Bernoulli", "subsample": 0.5, "sampling_frequency": "Often"}, r"'sampling_frequency' = 'Often'"),
]


@pytest.mark.parametrize("name, params, match", BAD_VALUES, ids=[f"{n}-{'-'.join(p)}" for n, p, _ in BAD_VALUES])
def test_bad_parameter_values_are_config_errors_naming_the_key(name, params, match):
    pytest.importorskip(name)
    with pytest.raises(ConfigError, match=match):
        registry.create("backend", name, **params)


@pytest.mark.parametrize("name, params, match", BAD_VALUES[:5], ids=[f"{n}-{'-'.join(p)}" for n, p, _ in BAD_VALUES[:5]])
def test_bad_parameter_values_fail_the_config_before_any_data(name, params, match, tmp_path):
    """parse_config fails on the value, naming the section and key; the data file named by the
    config does not even exist."""
    from budro.config import parse_config

    pytest.importorskip(name)
    raw = {"eps": 0.1, "n_steps": 2, "protected": [0], "backend": {"name": name, **params},
           "data": {"source": "csv", "path": str(tmp_path / "no-such-file.csv"), "label": "y"}}
    with pytest.raises(ConfigError, match=r"\[backend\]") as info:
        parse_config(raw)
    assert list(params)[-1] in str(info.value)
    assert not (tmp_path / "no-such-file.csv").exists()


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_good_parameter_values_pass_and_are_probed_once(name, monkeypatch):
    from budro.backends import _common

    pytest.importorskip(name)
    cls = type(registry.create("backend", name, **BACKENDS[name]))
    calls = []
    original = cls._probe.__func__
    monkeypatch.setattr(cls, "_probe", classmethod(lambda c, p: (calls.append(p), original(c, p))[1]))
    monkeypatch.setattr(_common, "_PROBED", {})
    params = {**BACKENDS[name], "learning_rate": 0.25}
    for _ in range(3):
        assert registry.create("backend", name, **params).params["learning_rate" if name != "xgboost" else "eta"] == 0.25
    assert len(calls) == 1


# -- configuration and input checks, every built-in backend alike ----------------------------------

#: A misspelt parameter per backend, and what its error must say: the key, the closest accepted
#: name and the accepted list.
MISSPELT = {
    "xgboost": ({"max_dept": 3}, r"'max_dept'.*did you mean 'max_depth'.*accepted:.*min_child_weight"),
    "lightgbm": ({"num_leafs": 3}, r"'num_leafs'.*did you mean 'num_leaves'.*accepted:.*min_sum_hessian_in_leaf"),
    "catboost": ({"l2_leaf_regg": 3}, r"'l2_leaf_regg'.*did you mean 'l2_leaf_reg'.*accepted:.*border_count"),
}

#: Parameters budro sets itself (objective, number of rounds or classes, ...), per backend.
CONTROLLED = (
    [("xgboost", key) for key in ("objective", "num_class", "n_estimators", "num_boost_round", "booster")]
    + [("lightgbm", key) for key in ("objective", "num_class", "n_estimators", "num_iterations", "boosting",
                                    "boost_from_average", "metric", "is_unbalance", "path_smooth",
                                    "pos_bagging_fraction", "linear_tree")]
    + [("catboost", key) for key in ("loss_function", "iterations", "n_estimators", "boosting_type", "eval_metric",
                                    "min_data_in_leaf", "class_weights", "verbose", "leaf_estimation_backtracking")]
)

#: An alias given with the native name it stands for, and the name the error must give.
ALIAS_CLASH = {
    "xgboost": ({"eta": 0.1, "learning_rate": 0.2}, "eta"),
    "lightgbm": ({"learning_rate": 0.1, "eta": 0.2}, "learning_rate"),
}

#: What save_model accepts, as its error for another suffix says (LightGBM's text takes any name).
MODEL_SUFFIXES = {"xgboost": r"\.json or \.ubj", "catboost": r"\.cbm or \.json"}
#: A file name each backend's save_model takes.
MODEL_FILES = {"xgboost": "model.json", "lightgbm": "model.txt", "catboost": "model.cbm"}


def backend(name, **params):
    pytest.importorskip(name)
    return registry.create("backend", name, **params)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_unknown_parameter_is_named(name):
    params, match = MISSPELT[name]
    with pytest.raises(ConfigError, match=match):
        backend(name, **params)


@pytest.mark.parametrize("name, key", CONTROLLED, ids=[f"{n}-{k}" for n, k in CONTROLLED])
def test_budro_controlled_parameters_are_rejected(name, key):
    with pytest.raises(ConfigError, match=key):
        backend(name, **{key: 1})


@pytest.mark.parametrize("name", sorted(ALIAS_CLASH))
def test_alias_and_native_name_together_are_rejected(name):
    params, match = ALIAS_CLASH[name]
    with pytest.raises(ConfigError, match=match):
        backend(name, **params)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_bad_weight_scale(name):
    with pytest.raises(ConfigError, match="weight_scale"):
        backend(name, weight_scale="sum")


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_scale_pos_weight_needs_two_classes(name):
    X, y = make_data(K=3)
    with pytest.raises(ValidationError, match="scale_pos_weight"):
        backend(name, scale_pos_weight=2.0, **BACKENDS[name]).start(X, y, 3)


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def started(request):
    """A backend of each kind after start on 100 rows: (name, backend, X, y)."""
    name = request.param
    X, y = make_data(n=100)
    b = backend(name, **BACKENDS[name])
    b.start(X, y, 2)
    return name, b, X, y


def _uniform(shape=(100, 2), **edit):
    W = np.full(shape, 1.0 / np.prod(shape))
    for key, value in edit.items():
        W[tuple(int(i) for i in key[1:].split("_"))] = value
    return W


@pytest.mark.parametrize(
    "weights, match",
    [
        (_uniform((100, 3)), "shape"),
        (_uniform((99, 2)), "shape"),
        (_uniform((100,)), "shape"),
        (_uniform(w0_0=-1e-3, w1_0=1e-3 + 2 / 200), "non-negative"),
        (_uniform(w0_0=np.nan), "finite"),
        (_uniform(w0_0=np.inf), "finite"),
        (_uniform() * 100, "sum to 1"),
        ([["a", "b"]] * 100, "numeric"),
    ],
    ids=["K", "n", "1-D", "negative", "nan", "inf", "sum", "strings"],
)
def test_bad_weights_are_refused_before_a_round(started, weights, match):
    _, b, _, _ = started
    rounds = b.n_rounds
    with pytest.raises(ValidationError, match=match):
        b.step(weights)
    assert b.n_rounds == rounds


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_bad_training_data(name):
    X, y = make_data(n=50)
    b = backend(name, **BACKENDS[name])
    X_inf = X.copy()
    X_inf[3, 1] = np.inf  # NaN is a missing value; inf is an error
    codes = np.column_stack([X, np.arange(len(y)) % 3])
    negative, fractional = codes.copy(), codes.copy()
    negative[5, -1], fractional[5, -1] = -2.0, 1.5
    cases = [
        (lambda: b.start(X_inf, y, 2), "X must not hold infinite values"),
        (lambda: b.start(negative, y, 2, categorical_features=[4]), r"column 4 is categorical.*found -2\.0"),
        (lambda: b.start(fractional, y, 2, categorical_features=[4]), r"column 4 is categorical.*found 1\.5"),
        (lambda: b.start(X, y, 2, categorical_features=[X.shape[1]]), "categorical_features must hold column indices"),
        (lambda: b.start(X[:, 0], y, 2), "X must be 2-D"),
        (lambda: b.start(X, y[:-1], 2), "y must have shape"),
        (lambda: b.start(X, y + 1, 2), r"y must hold integer labels in \[0, 2\)"),
        (lambda: b.start(X, y, 1), "n_classes"),
        (lambda: b.start(X, y, 2, random_state=-1), "random_state"),
        (lambda: b.fit_native(X, y, 2, 0), "n_rounds"),
    ]
    for call, match in cases:
        with pytest.raises(ValidationError, match=match):
            call()
    assert b.n_rounds == 0


def test_calls_before_start_and_bad_prediction_input(started, tmp_path):
    name, b, X, _ = started
    fresh = backend(name)
    for call in (lambda: fresh.step(_uniform()), fresh.margins, lambda: fresh.predict_margin(np.zeros((1, 4)))):
        with pytest.raises(BudroError, match="start"):
            call()
    with pytest.raises(ValidationError, match="features"):
        b.predict_margin(X[:, :3])
    if name in MODEL_SUFFIXES:
        with pytest.raises(ValidationError, match=MODEL_SUFFIXES[name]):
            b.save_model(tmp_path / "model.bin")
        assert not (tmp_path / "model.bin").exists()


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_save_model_is_atomic(name, tmp_path, monkeypatch):
    """A save that fails leaves the file that was there (no partial model, no temporary file);
    one that succeeds replaces it whole, and the library reads it back."""
    b = trained(name, 2)
    path = tmp_path / MODEL_FILES[name]
    path.write_bytes(b"the previous model")

    def broken(fd):
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr("budro._archive.os.fsync", broken)
        with pytest.raises(OSError, match="disk full"):
            b.save_model(path)
    assert path.read_bytes() == b"the previous model"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    b.save_model(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    data = path.read_bytes()
    assert data != b"the previous model" and len(data) > 100
    fresh = registry.create("backend", name, **BACKENDS[name])
    fresh.load_native_bytes(data, n_classes=2, n_features=4)  # the file holds the library's own model
    X, _ = make_data(n=30, seed=4)
    np.testing.assert_array_equal(fresh.predict_margin(X), b.predict_margin(X))


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_import_does_not_load_the_library(name):
    code = (f"import sys, budro.backends.{name}, budro.backends.plugins; "
            f"assert {name!r} not in sys.modules, sorted(m for m in sys.modules if {name!r} in m)")
    subprocess.run([sys.executable, "-c", code], check=True)
