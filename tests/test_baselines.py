"""Baselines of the paper's experiments: the method table, plain GBDT, project and reweigh."""

import numpy as np
import pytest

from budro import BuDROClassifier
from budro.baselines import (
    METHODS,
    GBDTClassifier,
    ProjectClassifier,
    ReweighClassifier,
    available_methods,
    get_method,
    make_method,
    reweighing_weights,
)
from budro.config import parse_config
from budro.exceptions import ConfigError, ValidationError

xgb = pytest.importorskip("xgboost")
pd = pytest.importorskip("pandas")

FAST = {"max_depth": 2, "nthread": 1}


def _data(rng, n=240):
    """Two features, a binary protected column s correlated with x0, labels from x0 and x1."""
    s = (rng.random(n) < 0.4).astype(float)
    x0 = rng.normal(size=n) + 1.2 * s
    x1 = rng.normal(size=n)
    y = ((x0 + 0.5 * x1 + 0.3 * rng.normal(size=n)) > 0.6).astype(int)
    X = pd.DataFrame({"x0": x0, "x1": x1, "s": s})
    return X, y


# ---------------------------------------------------------------------------------- method table


def test_method_table_names_classes_and_aliases():
    assert available_methods() == ["budro", "gbdt", "project", "reweigh"]
    assert METHODS["budro"].estimator is BuDROClassifier
    assert get_method("baseline").name == "gbdt" and get_method("reweighing").name == "reweigh"
    assert isinstance(make_method("gbdt", n_rounds=3), GBDTClassifier)
    assert isinstance(make_method("project", protected=["s"]), ProjectClassifier)
    assert isinstance(make_method("reweigh", protected=["s"]), ReweighClassifier)
    assert isinstance(make_method("budro", eps=0.2), BuDROClassifier)
    assert "n_rounds" in METHODS["reweigh"].parameters and "eps" not in METHODS["gbdt"].parameters
    with pytest.raises(ConfigError, match=r"unknown method 'projekt' \(did you mean 'project'\?\)"):
        get_method("projekt")
    with pytest.raises(ConfigError, match=r"method 'gbdt' has no parameter 'eps'"):
        make_method("gbdt", eps=0.1)


def test_config_methods_inherit_the_top_level():
    cfg = parse_config({
        "eps": 0.3, "n_steps": 7, "protected": ["s"], "random_state": 4,
        "backend": {"name": "xgboost", "max_depth": 3},
        "methods": {
            "Fair": {"method": "budro", "eps": 0.5},
            "Plain": {"method": "baseline", "backend": {"name": "xgboost", "max_depth": 6}},
            "Project": {},  # the label names the method
            "Reweigh": {"n_rounds": 12},
        },
    })
    fair = cfg.make_method("Fair")
    assert isinstance(fair, BuDROClassifier) and fair.eps == 0.5 and fair.n_steps == 7
    assert fair.backend_params == {"max_depth": 3} and fair.protected == ["s"] and fair.random_state == 4
    plain = cfg.make_method("Plain")
    assert isinstance(plain, GBDTClassifier) and plain.backend_params == {"max_depth": 6}
    assert plain.n_rounds == 8  # n_steps + 1: as many trees as BuDRO grows
    project = cfg.make_method("Project")
    assert project.protected == ["s"] and project.fair_metric == "sensitive-subspace"
    assert cfg.make_method("Reweigh").n_rounds == 12
    assert cfg.method_labels() == ["Fair", "Plain", "Project", "Reweigh"]


@pytest.mark.parametrize("methods, match", [
    ({"A": {"method": "boost"}}, r"methods.A.method.*unknown method 'boost'"),
    ({"Mine": {"n_rounds": 3}}, r"methods.Mine.method.*the label 'Mine' is not a method name"),
    ({"B": {"method": "gbdt", "eps": 0.1}}, r"unknown config key 'methods.B.eps': method 'gbdt' accepts"),
    ({"B": {"method": "gbdt", "n_rounds": 0}}, r"methods.B.n_rounds' must be >= 1"),
    ({"B": {"method": "gbdt", "backend": {"name": "xgboost", "max_dept": 2}}}, r"max_dept"),
])
def test_bad_method_sections_name_the_key(methods, match):
    with pytest.raises(ConfigError, match=match):
        parse_config({"methods": methods})


# ---------------------------------------------------------------------------------- plain GBDT


def test_gbdt_is_native_xgboost(rng):
    X, y = _data(rng)
    clf = GBDTClassifier(backend_params=FAST, n_rounds=15, random_state=0).fit(X, y)
    booster = xgb.train({"max_depth": 2, "nthread": 1, "base_score": 0.5, "tree_method": "hist",
                         "objective": "binary:logistic", "seed": 0},
                        xgb.DMatrix(X.to_numpy(), label=y), num_boost_round=15)
    expected = booster.predict(xgb.DMatrix(X.to_numpy()))
    assert np.allclose(clf.predict_proba(X)[:, 1], expected, atol=1e-6)
    labels = np.array(["no", "yes"])[y]
    assert set(GBDTClassifier(backend_params=FAST, n_rounds=3).fit(X, labels).predict(X)) <= {"no", "yes"}


# ---------------------------------------------------------------------------------- sample weights


@pytest.mark.parametrize("scale", ["n", "unit"])
def test_fit_native_sample_weight(rng, scale):
    from budro.backends.xgboost import XGBoostBackend

    X, y = _data(rng)
    X = X.to_numpy()
    extra = {} if scale == "n" else {"reg_lambda": 1e-3, "min_child_weight": 1e-4}  # defaults grow stumps at "unit"
    backend = XGBoostBackend(weight_scale=scale, **FAST, **extra)
    plain = backend.fit_native(X, y, 2, 10, random_state=0)
    equal = backend.fit_native(X, y, 2, 10, random_state=0, sample_weight=np.full(len(y), 7.0))
    assert np.allclose(plain.predict_margin(X), equal.predict_margin(X), atol=1e-6)  # only relative weights count
    w = rng.uniform(0.2, 3.0, size=len(y))
    weighted = backend.fit_native(X, y, 2, 10, random_state=0, sample_weight=w)
    dm = xgb.DMatrix(X, label=y, weight=w * (len(y) / w.sum()) if scale == "n" else w / w.sum())
    params = {**backend.params, "objective": "binary:logistic", "seed": 0}
    ref = xgb.train(params, dm, num_boost_round=10)
    assert np.allclose(weighted.predict_margin(X), ref.predict(xgb.DMatrix(X), output_margin=True), atol=1e-6)
    assert not np.allclose(weighted.predict_margin(X), plain.predict_margin(X))
    for bad, match in [(np.ones(3), "shape"), (-np.ones(len(y)), "non-negative"), (np.zeros(len(y)), "all zero")]:
        with pytest.raises(ValidationError, match=match):
            backend.fit_native(X, y, 2, 2, sample_weight=bad)


# ---------------------------------------------------------------------------------- reweigh


def test_reweighing_weights_by_hand():
    # s: a a a b b b b b ;  y: 1 1 0 1 0 0 0 0   (n = 8)
    s = np.array([0, 0, 0, 1, 1, 1, 1, 1])
    y = np.array([1, 1, 0, 1, 0, 0, 0, 0])
    # P(s=0)=3/8, P(s=1)=5/8, P(y=1)=3/8, P(y=0)=5/8
    # P(0,1)=2/8 -> w=(3/8)(3/8)/(2/8)=9/16 ; P(0,0)=1/8 -> w=(3/8)(5/8)/(1/8)=15/8
    # P(1,1)=1/8 -> w=(5/8)(3/8)/(1/8)=15/8 ; P(1,0)=4/8 -> w=(5/8)(5/8)/(4/8)=25/32
    expected = np.array([9 / 16, 9 / 16, 15 / 8, 15 / 8, 25 / 32, 25 / 32, 25 / 32, 25 / 32])
    w = reweighing_weights(s, y)
    assert np.allclose(w, expected)
    assert np.isclose(w.mean(), 1.0)
    # Weighted, s and y are independent: P_w(y=1 | s) is the same in both groups.
    for g in (0, 1):
        rows = s == g
        assert np.isclose(np.sum(w[rows] * y[rows]) / np.sum(w[rows]), 3 / 8)
    # Two attributes: the groups are their combinations.
    s2 = np.column_stack([s, [0, 1, 0, 1, 0, 1, 0, 1]])
    assert np.allclose(reweighing_weights(s2, y), reweighing_weights(s * 2 + s2[:, 1], y))


def test_reweigh_trains_on_the_weights(rng):
    X, y = _data(rng)
    clf = ReweighClassifier(backend_params=FAST, n_rounds=12, protected=["s"], random_state=0).fit(X, y)
    w = reweighing_weights(X["s"].to_numpy(), y)
    assert np.allclose(clf.sample_weight_, w)
    ref = GBDTClassifier(backend_params=FAST, n_rounds=12, random_state=0).fit(X, y, sample_weight=w)
    assert np.allclose(clf.predict_proba(X), ref.predict_proba(X))
    unweighted = GBDTClassifier(backend_params=FAST, n_rounds=12, random_state=0).fit(X, y)
    assert not np.allclose(clf.predict_proba(X), unweighted.predict_proba(X))


def test_reweigh_needs_a_discrete_protected_attribute(rng):
    X, y = _data(rng)
    with pytest.raises(ValidationError, match="reweigh needs discrete protected attributes: 'x0' takes"):
        ReweighClassifier(protected=["x0"], n_rounds=2).fit(X, y)
    with pytest.raises(ValidationError, match="at least one protected attribute"):
        ReweighClassifier(n_rounds=2).fit(X, y)


# ---------------------------------------------------------------------------------- project


def test_project_equals_plain_boosting_on_projected_data(rng):
    from budro import registry

    X, y = _data(rng)
    clf = ProjectClassifier(backend_params=FAST, n_rounds=10, protected=["s"], random_state=0).fit(X, y)
    metric = registry.create("fair_metric", "sensitive-subspace").fit(X.to_numpy(), [2], y=y)
    Q = metric.complement_ @ metric.complement_.T
    assert np.allclose(clf.projector_, Q)
    Xp = X.to_numpy() @ Q
    ref = GBDTClassifier(backend_params=FAST, n_rounds=10, random_state=0).fit(Xp, y)
    assert np.allclose(clf.predict_proba(X), ref.predict_proba(Xp))
    # Blind to the protected column and to the direction predicting it.
    flipped = X.assign(s=1.0 - X["s"])
    assert np.allclose(clf.predict_proba(X), clf.predict_proba(flipped))
    assert np.allclose(Xp[:, 2], 0.0, atol=1e-10)


@pytest.mark.parametrize("backend", ["xgboost", "lightgbm", "catboost"])
def test_every_backend_takes_sample_weight(rng, backend):
    from budro import registry

    if backend not in registry.available("backend"):
        pytest.skip(f"backend {backend!r} is not registered")
    X, y = _data(rng, n=120)
    X = X.to_numpy()
    b = registry.create("backend", backend)
    plain = b.fit_native(X, y, 2, 5, random_state=0).predict_margin(X)
    equal = b.fit_native(X, y, 2, 5, random_state=0, sample_weight=np.full(len(y), 0.5)).predict_margin(X)
    assert np.allclose(plain, equal, atol=1e-6)
    w = np.where(y == 1, 5.0, 0.2)
    weighted = b.fit_native(X, y, 2, 5, random_state=0, sample_weight=w).predict_margin(X)
    assert weighted.mean() > plain.mean()  # up-weighting the ones pushes the margins up


# ---------------------------------------------------------------------------------- raw tables


def _raw_table(rng, n=200):
    """Strings (with a missing value), a pandas categorical, a boolean and a numeric column with NaN."""
    sex = rng.choice(["Male", "Female"], n).astype(object)
    sex[3] = None
    race = pd.Categorical(rng.choice(["White", "Black", "Asian"], n, p=[0.6, 0.3, 0.1]))
    income = rng.normal(50, 10, n) + 6 * (sex == "Male")
    income[rng.choice(n, 10, replace=False)] = np.nan
    owner = rng.random(n) < 0.5
    score = (np.nan_to_num(income, nan=50) - 50) / 10 + 0.5 * owner + rng.normal(0, 0.5, n)
    X = pd.DataFrame({"sex": sex, "race": race, "income": income, "owner": owner})
    return X, np.where(score > 0.3, "yes", "no")


@pytest.mark.parametrize("backend", ["xgboost", "lightgbm", "catboost"])
def test_gbdt_takes_raw_tables_with_the_backends_native_categoricals(rng, backend):
    from budro import registry

    if backend not in registry.available("backend"):
        pytest.skip(f"backend {backend!r} is not registered")
    X, y = _raw_table(rng)
    clf = GBDTClassifier(backend=backend, n_rounds=6, random_state=0).fit(X, y)
    table = clf.table_
    assert table is not None and table.categorical_features_ == (2, 3)  # sex, race as codes after the numerics
    M = table.booster_matrix(X)
    assert np.isnan(M[:, 0]).sum() == 10 and np.isnan(M[3, 2])  # missing kept for the backend
    classes, y_enc = np.unique(y, return_inverse=True)
    ref = registry.create("backend", backend).fit_native(M, y_enc, 2, 6, random_state=0,
                                                         categorical_features=table.categorical_features_)
    assert np.array_equal(clf.predict_proba(X), ref.predict_proba(M))
    assert set(clf.predict(X)) <= {"no", "yes"} and list(clf.feature_names_in_) == list(X.columns)
    with pytest.raises(ValidationError, match="missing column 'owner'"):
        clf.predict(X.drop(columns="owner"))


def test_project_on_a_raw_table_projects_the_metric_embedding_and_ignores_the_protected_column(rng):
    from budro import registry

    X, y = _raw_table(rng)
    clf = ProjectClassifier(n_rounds=8, protected=["sex"], backend_params=FAST, random_state=0).fit(X, y)
    table = clf.table_
    Z = table.metric_matrix(X)
    assert clf.projector_.shape == (Z.shape[1], Z.shape[1]) and clf.protected_indices_ == (0,)
    metric = registry.create("fair_metric", "sensitive-subspace").fit(Z, table.protected_metric_indices_,
                                                                     y=np.unique(y, return_inverse=True)[1])
    assert np.allclose(clf.projector_, metric.complement_ @ metric.complement_.T)
    # Blind to every one-hot column of sex: flipping it changes nothing.
    for value in ("Male", "Female"):
        assert np.array_equal(clf.predict_proba(X.assign(sex=value)), clf.predict_proba(X.assign(sex="Female")))
    assert 0.6 < np.mean(clf.predict(X) == y)


def test_reweigh_on_a_raw_table_groups_by_the_raw_values_missing_as_a_level(rng):
    X, y = _raw_table(rng)
    clf = ReweighClassifier(n_rounds=6, protected=["sex", "race"], backend_params=FAST, random_state=0).fit(X, y)
    groups = np.column_stack([X["sex"].fillna("(missing)").astype(str), X["race"].astype(str)])
    assert np.allclose(clf.sample_weight_, reweighing_weights(groups, y))
    ref = GBDTClassifier(n_rounds=6, backend_params=FAST, random_state=0).fit(X, y, sample_weight=clf.sample_weight_)
    assert np.array_equal(clf.predict_proba(X), ref.predict_proba(X))
    head = X.iloc[:40]
    levels = head["income"].nunique() + int(head["income"].isna().any())  # missing: one more level
    assert head["income"].isna().any()
    with pytest.raises(ValidationError, match=f"'income' takes {levels} values"):
        ReweighClassifier(n_rounds=2, protected=["income"]).fit(head, y[:40])


def test_prepared_numeric_german_trains_the_same_models_as_before_tables(data_home):
    """The paper's prepared data never goes through the table encoder: preprocessing "auto" and
    "none" give bitwise the same predictions for every method on a fixed split."""
    from budro.datasets import load_german

    train, test = load_german(data_home=data_home, download=False).train_test_split(0.2, random_state=3)
    for name, kw in (("gbdt", {}), ("project", {"protected": ["age"]}),
                     ("reweigh", {"protected": ["personal_status=A92", "foreign_worker=A201"]})):
        auto = make_method(name, n_rounds=10, random_state=0, backend_params=FAST, **kw).fit(train.X, train.y)
        none = make_method(name, n_rounds=10, random_state=0, backend_params=FAST, preprocessing="none",
                           **kw).fit(train.X, train.y)
        assert auto.table_ is None
        assert np.array_equal(auto.predict_proba(test.X), none.predict_proba(test.X))


@pytest.mark.parametrize("backend", ["xgboost", "lightgbm", "catboost"])
def test_values_beyond_float32_are_refused_at_the_backend_boundary(rng, backend):
    """XGBoost and CatBoost store features as float32: 1e39 would be XGBoost's own error or a silent
    inf in CatBoost.  Every built-in backend refuses it, naming the column; float32's largest value
    itself trains."""
    from budro import registry
    from budro.backends._common import FLOAT32_MAX

    if backend not in registry.available("backend"):
        pytest.skip(f"backend {backend!r} is not registered")
    X, y = _data(rng, n=60)
    big = X.assign(x1=X["x1"].where(X.index != 7, 1e39))
    with pytest.raises(ValidationError, match=r"column 'x1' holds 1e\+39 \(row 7\), beyond the float32 range"):
        GBDTClassifier(backend=backend, n_rounds=2).fit(big, y)
    # a raw table (booster columns numeric first): the user's column is named, before any training
    table = big.assign(kind=np.where(y == 1, "a", "b"))[["kind", "x0", "x1"]]
    for clf in (BuDROClassifier(backend=backend, n_steps=2), GBDTClassifier(backend=backend, n_rounds=2)):
        with pytest.raises(ValidationError, match=r"column 'x1' holds 1e\+39 \(row 7\)"):
            clf.fit(table, y)
    b = registry.create("backend", backend)
    with pytest.raises(ValidationError, match=r"column 1 holds -1e\+39 \(row 7\)"):
        b.fit_native(-big.to_numpy(), y, 2, 2)
    with pytest.raises(ValidationError, match="column 1 holds 1e\\+39"):
        b.start(big.to_numpy(), y, 2, random_state=0)
    edge = X.assign(x1=X["x1"].where(X.index != 7, FLOAT32_MAX)).to_numpy()
    model = b.fit_native(edge, y, 2, 2, random_state=0)
    assert np.isfinite(model.predict_margin(edge)).all()
    with pytest.raises(ValidationError, match="column 1 holds 1e\\+39"):
        model.predict_margin(big.to_numpy())
