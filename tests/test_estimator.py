"""BuDROClassifier: scikit-learn conformance, input handling and behaviour."""

import pickle

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from budro import BuDROClassifier
from budro.datasets import load_synthetic, make_synthetic
from budro.exceptions import ConfigError, UnknownPluginError, ValidationError
from budro.persist import load_model, save_model

FAST = {"nthread": 1}


@parametrize_with_checks([BuDROClassifier(n_steps=8, backend_params=FAST, random_state=0)])
def test_sklearn_conformance(estimator, check):
    check(estimator)


def test_pandas_input_with_protected_names():
    ds = load_synthetic(random_state=4)
    clf = BuDROClassifier(protected=["x1"], fair_metric_params={"fit_linear_models": False},
                          eps=0.05, n_steps=20, backend_params=FAST).fit(ds.X, ds.y)
    assert clf.protected_indices_ == (0,)
    assert clf.feature_names_in_.tolist() == ["x1", "x2"]
    assert clf.n_features_in_ == 2
    proba = clf.predict_proba(ds.X)
    assert proba.shape == (150, 2) and np.allclose(proba.sum(1), 1)
    assert np.array_equal(clf.classes_, [0, 1])


def test_history_is_consistent():
    X, y, _ = make_synthetic(random_state=5)
    clf = BuDROClassifier(protected=[0], fair_metric_params={"fit_linear_models": False},
                          eps=0.05, n_steps=15, backend_params=FAST).fit(X, y)
    assert len(clf.history_) == 15
    for rec in clf.history_:
        # the plan that moves nothing is feasible, so the robust loss is at least the plain loss
        assert rec.robust_loss >= rec.plain_loss - 1e-12
        assert rec.transport_cost <= 0.05 * (1 + 1e-9)
        assert rec.eta >= 0 and rec.time_total > 0
    assert clf.backend_.n_rounds == 16  # f_0 plus one tree per step


def test_eps_zero_is_plain_boosting():
    """With eps = 0 and no duplicates the adversary cannot move: BuDRO is native XGBoost."""
    import xgboost as xgb

    X, y, _ = make_synthetic(random_state=6)
    params = {"max_depth": 3, "learning_rate": 0.3, "nthread": 1}
    clf = BuDROClassifier(eps=0.0, n_steps=9, backend_params=params).fit(X, y)
    booster = xgb.train({**params, "objective": "binary:logistic", "base_score": 0.5}, xgb.DMatrix(X, label=y), 10)
    native = booster.predict(xgb.DMatrix(X))
    assert np.allclose(clf.predict_proba(X)[:, 1], native, atol=1e-6)


def test_string_labels_and_three_classes(rng):
    X = rng.normal(size=(120, 3))
    y = np.array(["a", "b", "c"])[np.argmax(X, axis=1)]
    clf = BuDROClassifier(eps=0.05, n_steps=10, backend_params=FAST).fit(X, y)
    assert clf.classes_.tolist() == ["a", "b", "c"]
    assert clf.predict_proba(X).shape == (120, 3)
    assert np.mean(clf.predict(X) == y) > 0.8


@pytest.mark.parametrize("params, error, match", [
    ({"eps": -0.1}, ValidationError, "eps must be a finite number >= 0"),
    ({"eps": float("inf")}, ValidationError, "eps must be a finite number >= 0"),
    ({"eps": "0.1"}, ValidationError, "eps must be a finite number >= 0, got '0.1'"),
    ({"n_steps": 2.5}, ValidationError, "n_steps must be an integer >= 0"),
    ({"random_state": "seed"}, ValidationError, "random_state must be an integer or None"),
    ({"backend": "sklearn-gbm"}, UnknownPluginError, "unknown backend 'sklearn-gbm'.*choose one of: .*xgboost"),
    ({"solver": "simplex"}, UnknownPluginError, "unknown solver 'simplex'"),
    ({"solver_params": {"tie_tol": 1}}, ConfigError, "solver_params: .*has no parameter 'tie_tol'"),
    ({"backend_params": "deep"}, ValidationError, "backend_params must be a dict or None"),
    ({"protected": "x1"}, ValidationError, "protected must be a list"),
    ({"protected": [7]}, ValidationError, "protected column index 7 is out of range for 2 features"),
    ({"protected": ["age"]}, ValidationError, "protected attribute 'age' is not a column of X; X has no column names"),
])
def test_bad_parameters_raise_at_fit(params, error, match):
    X, y, _ = make_synthetic(random_state=0)
    clf = BuDROClassifier(**{"n_steps": 2, "backend_params": FAST, **params})  # __init__ stores, never validates
    with pytest.raises(error, match=match):
        clf.fit(X, y)


def test_unknown_protected_name_lists_columns():
    ds = load_synthetic()
    with pytest.raises(ValidationError, match="protected attribute 'age' is not a column of X; the columns are: x1, x2"):
        BuDROClassifier(protected=["age"], n_steps=1).fit(ds.X, ds.y)


def test_nan_input_is_rejected_without_table_preprocessing():
    X, y, _ = make_synthetic(random_state=0)
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        BuDROClassifier(n_steps=1, preprocessing="none").fit(X, y)


def test_nan_array_goes_through_the_table_encoder():
    """An array with NaN is encoded ("auto"): the fair metric sees imputed values, never NaN."""
    X, y, _ = make_synthetic(random_state=0)
    X[3, 1] = np.nan
    clf = BuDROClassifier(n_steps=2, protected=[0], backend_params=FAST).fit(X, y)
    assert clf.table_ is not None and not hasattr(clf, "feature_names_in_")
    assert clf.protected_indices_ == (0,) and clf.table_.protected_metric_indices_ == (0,)
    assert np.isfinite(clf.metric_matrix(X)).all()
    assert clf.predict_proba(X).shape == (X.shape[0], 2)


def test_numeric_input_keeps_the_plain_path_bit_for_bit():
    """"auto" leaves numeric data without NaN to the plain path: identical to preprocessing="none"."""
    ds = load_synthetic(random_state=3)
    common = dict(protected=["x1"], eps=0.05, n_steps=6, backend_params=FAST, random_state=0)
    auto = BuDROClassifier(**common).fit(ds.X, ds.y)
    none = BuDROClassifier(**common, preprocessing="none").fit(ds.X, ds.y)
    assert auto.table_ is None
    assert np.array_equal(auto.decision_margin(ds.X), none.decision_margin(ds.X))
    assert [r.robust_loss for r in auto.history_] == [r.robust_loss for r in none.history_]


def test_save_load_and_pickle_roundtrip(tmp_path):
    X, y, _ = make_synthetic(random_state=7)
    clf = BuDROClassifier(protected=[0], eps=0.05, n_steps=5, backend_params=FAST).fit(X, y)
    path = save_model(clf, tmp_path / "m.budro")
    again = load_model(path)
    assert np.array_equal(again.predict_proba(X), clf.predict_proba(X))
    assert np.array_equal(pickle.loads(pickle.dumps(clf)).predict(X), clf.predict(X))
    (tmp_path / "junk.budro").write_bytes(b"not a model")
    with pytest.raises(ValidationError, match="not a budro model file"):
        load_model(tmp_path / "junk.budro")


def test_native_export_loads_in_plain_xgboost(tmp_path):
    import xgboost as xgb

    X, y, _ = make_synthetic(random_state=8)
    clf = BuDROClassifier(protected=[0], eps=0.05, n_steps=5, backend_params=FAST).fit(X, y)
    clf.save_native_model(tmp_path / "model.json")
    booster = xgb.Booster(model_file=str(tmp_path / "model.json"))
    assert np.allclose(booster.predict(xgb.DMatrix(X)), clf.predict_proba(X)[:, 1], atol=1e-7)


def test_callback_can_stop_training():
    seen = []

    def stop_after_three(info):
        seen.append(info.record.step)
        return info.record.step == 2

    X, y, _ = make_synthetic(random_state=9)
    clf = BuDROClassifier(n_steps=50, callbacks=[stop_after_three], backend_params=FAST).fit(X, y)
    assert seen == [0, 1, 2] and len(clf.history_) == 3


def test_sparse_neighbour_cost_matches_full_when_lists_cover_everything():
    """With m = n every pair is listed: the sparse problem is the full problem."""
    X, y, _ = make_synthetic(random_state=10)
    common = dict(protected=[0], fair_metric_params={"fit_linear_models": False}, eps=0.02, n_steps=10,
                  backend_params=FAST)
    full = BuDROClassifier(**common).fit(X, y)
    sparse = BuDROClassifier(**common, n_neighbors=150).fit(X, y)
    assert np.allclose(full.predict_proba(X), sparse.predict_proba(X), atol=1e-9)
    small = BuDROClassifier(**common, n_neighbors=8).fit(X, y)
    for rec in small.history_:
        assert rec.transport_cost <= 0.02 * (1 + 1e-9)
    with pytest.raises(ValidationError, match=r"n_neighbors must be an integer >= 1 .*\"exact\" or None"):
        BuDROClassifier(n_neighbors=0).fit(X, y)


def test_fit_prepares_the_solver_before_the_set_up(monkeypatch):
    """BuDRO.fit calls the solver's prepare(n, sparse=...) once per fit, before the neighbour
    graph is built (the set-up its background work overlaps)."""
    import budro.core
    from budro.solvers.dual import DualSolver

    seen = []
    real_prepare, real_cost = DualSolver.prepare, budro.core.NeighborCost

    def prepare(self, n, *, sparse):
        seen.append(("prepare", n, sparse))
        real_prepare(self, n, sparse=sparse)

    def neighbor_cost(*args, **kwargs):
        seen.append("graph")
        return real_cost(*args, **kwargs)

    monkeypatch.setattr(DualSolver, "prepare", prepare)
    monkeypatch.setattr(budro.core, "NeighborCost", neighbor_cost)
    X, y, _ = make_synthetic(random_state=11)
    common = dict(protected=[0], fair_metric_params={"fit_linear_models": False}, eps=1e-5, n_steps=3,
                  backend_params=FAST)
    BuDROClassifier(**common, n_neighbors=8).fit(X, y)
    BuDROClassifier(**common).fit(X, y)
    n = X.shape[0]
    assert seen == [("prepare", n, True), "graph", ("prepare", n, False)]
