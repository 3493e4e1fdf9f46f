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
from budro.exceptions import PluginError, ValidationError

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
