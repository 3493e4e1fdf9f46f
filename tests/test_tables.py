"""Tables as users have them: TableEncoder and BuDROClassifier on DataFrames with strings,
categories, booleans and missing values (pandas, polars, pyarrow)."""

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budro import BuDROClassifier
from budro.exceptions import ValidationError
from budro.tables import TableEncoder, UnseenCategoryWarning, is_table, table_needs_encoding

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")
pa = pytest.importorskip("pyarrow")

FAST = {"nthread": 1}
RACES = ["Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other", "White"]


def people(n=60, seed=0):
    """A small Adult-like table: numeric with NaN, nullable int, bool, string, categorical."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 80, n).astype(float)
    age[rng.random(n) < 0.1] = np.nan
    hours = pd.array(rng.integers(10, 60, n), dtype="Int64")
    hours[3] = pd.NA
    workclass = rng.choice(["Private", "Self-emp", "State-gov"], n).astype(object)
    workclass[rng.random(n) < 0.1] = None
    frame = pd.DataFrame({
        "age": age,
        "hours": hours,
        "married": rng.random(n) < 0.5,
        "workclass": workclass,
        "sex": pd.Categorical(rng.choice(["Male", "Female"], n)),
        "race": rng.choice(RACES, n),
    })
    y = (np.nan_to_num(age, nan=40) / 80 + (frame["sex"] == "Male") * 0.3 + rng.normal(0, 0.2, n) > 0.8).astype(int)
    return frame, y


def as_polars(frame):
    return pl.from_pandas(frame)


def as_arrow(frame):
    return pa.Table.from_pandas(frame, preserve_index=False)


# -- TableEncoder ----------------------------------------------------------------------------
@pytest.mark.parametrize("native", [True, False])
def test_pandas_polars_and_arrow_give_the_same_matrices(native):
    frame, _ = people()
    enc = TableEncoder().fit(frame, protected=["sex", "race", "age"], native_categorical=native)
    assert enc.kinds_ == {"age": "numeric", "hours": "numeric", "married": "boolean", "workclass": "categorical",
                          "sex": "categorical", "race": "categorical"}
    assert enc.categories_["race"] == tuple(RACES) and enc.categories_["sex"] == ("Female", "Male")
    B, M = enc.booster_matrix(frame), enc.metric_matrix(frame)
    for other in (as_polars(frame), as_arrow(frame)):
        assert np.array_equal(enc.booster_matrix(other), B, equal_nan=True)
        assert np.array_equal(enc.metric_matrix(other), M)
        again = TableEncoder().fit(other, protected=["sex", "race", "age"], native_categorical=native)
        assert np.array_equal(again.booster_matrix(other), B, equal_nan=True)
        assert np.array_equal(again.metric_matrix(frame), M)
    # booster: NaN kept for numbers; categories as sorted codes (native) or one-hot
    assert np.isnan(B[:, enc.booster_feature_names_.index("age")]).sum() == frame["age"].isna().sum()
    if native:
        j = enc.booster_feature_names_.index("race")
        assert enc.categorical_features_ == (3, 4, 5)
        assert np.array_equal(B[:, j], frame["race"].map(RACES.index).to_numpy(dtype=float))
        wc = B[:, enc.booster_feature_names_.index("workclass")]
        assert np.array_equal(np.isnan(wc), frame["workclass"].isna().to_numpy())
    else:
        assert enc.categorical_features_ == ()
        cols = [enc.booster_feature_names_.index(f"race={r}") for r in RACES]
        assert np.array_equal(B[:, cols].argmax(1), frame["race"].map(RACES.index).to_numpy())
        wc = [enc.booster_feature_names_.index(f"workclass={w}") for w in ("Private", "Self-emp", "State-gov")]
        assert np.array_equal(B[:, wc].sum(1) == 0, frame["workclass"].isna().to_numpy())
    # metric: no NaN, numbers standardised, every one-hot column of sex and race protected
    assert np.isfinite(M).all()
    names = enc.metric_feature_names_
    assert [names[i] for i in enc.protected_metric_indices_] == (
        ["age", "sex=Female", "sex=Male"] + [f"race={r}" for r in RACES])
    assert abs(M[:, names.index("hours")].mean()) < 1e-12
    assert np.array_equal(M[:, [names.index(f"race={r}") for r in RACES]].sum(1), np.ones(len(frame)))
    # a missing category is imputed with the most frequent training one (not all zeros)
    gone = frame["workclass"].isna().to_numpy()
    top = frame["workclass"].value_counts().idxmax()
    assert gone.any() and (M[gone, names.index(f"workclass={top}")] == 1).all()
    assert (M[gone][:, [i for i, n in enumerate(names) if n.startswith("workclass=")]].sum(1) == 1).all()


def test_category_order_and_dtype_do_not_change_the_codes():
    """A pandas categorical listing its categories in another order, a polars Categorical
    (appearance order) and a plain string column all give the training codes."""
    frame, _ = people()
    enc = TableEncoder().fit(frame, native_categorical=True)
    B = enc.booster_matrix(frame)
    reordered = frame.assign(race=pd.Categorical(frame["race"], categories=RACES[::-1]),
                             sex=frame["sex"].astype(str))
    assert np.array_equal(enc.booster_matrix(reordered), B, equal_nan=True)
    cat_polars = as_polars(frame).with_columns(pl.col("race").cast(pl.Categorical))
    assert np.array_equal(enc.booster_matrix(cat_polars), B, equal_nan=True)


@settings(max_examples=25, deadline=None)
@given(perm_seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 60))
def test_rows_are_encoded_independently_of_the_other_rows(perm_seed, n_rows):
    """Encoding any subset of rows in any order gives those rows of the full encoding."""
    frame, _ = people()
    enc = TableEncoder().fit(frame, protected=["sex"], native_categorical=True)
    B, M = enc.booster_matrix(frame), enc.metric_matrix(frame)
    rows = np.random.default_rng(perm_seed).permutation(len(frame))[:n_rows]
    part = frame.iloc[rows]
    part = part.assign(race=pd.Categorical(part["race"]))  # categories re-inferred from the subset
    assert np.array_equal(enc.booster_matrix(part), B[rows], equal_nan=True)
    assert np.array_equal(enc.metric_matrix(as_polars(part)), M[rows])


def test_unseen_category_warns_once_and_is_missing_for_the_booster():
    frame, _ = people()
    enc = TableEncoder().fit(frame, native_categorical=True)
    new = frame.head(3).assign(race=["Martian", "White", "Venusian"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        B = enc.booster_matrix(new)
        M = enc.metric_matrix(new)
    msgs = [str(w.message) for w in caught if issubclass(w.category, UnseenCategoryWarning)]
    assert len(msgs) == 2 and "'race'" in msgs[0] and "'Martian'" in msgs[0] and "'Venusian'" in msgs[0]
    j = enc.booster_feature_names_.index("race")
    assert np.isnan(B[[0, 2], j]).all() and B[1, j] == RACES.index("White")
    race_cols = [enc.metric_feature_names_.index(f"race={r}") for r in RACES]
    assert np.array_equal(M[:, race_cols].sum(1), [0, 1, 0])


@pytest.mark.parametrize("change, match", [
    (lambda f: f.drop(columns=["hours"]), "missing column 'hours'"),
    (lambda f: f.assign(zip="12345"), "column not seen in training 'zip'"),
    (lambda f: f.assign(age=f["age"].astype(str)), "column 'age' is categorical .* but was numeric in training"),
    (lambda f: f.assign(race=np.arange(len(f))), "column 'race' is numeric .* but was categorical in training"),
    (lambda f: f.to_numpy(), "X has no column names, but the model was trained on a table"),
])
def test_wrong_columns_at_predict_time_name_the_column(change, match):
    frame, _ = people()
    enc = TableEncoder().fit(frame, native_categorical=False)
    with pytest.raises(ValidationError, match=match):
        enc.booster_matrix(change(frame))


def test_columns_in_another_order_are_matched_by_name():
    frame, _ = people()
    enc = TableEncoder().fit(frame, native_categorical=True)
    assert np.array_equal(enc.booster_matrix(frame[frame.columns[::-1]]), enc.booster_matrix(frame), equal_nan=True)


def test_fit_errors_name_the_column():
    frame, _ = people()
    with pytest.raises(ValidationError, match="column 'empty' has no values"):
        TableEncoder().fit(frame.assign(empty=np.nan), native_categorical=True)
    ids = frame.assign(name=[f"person-{i}" for i in range(len(frame))])
    with pytest.raises(ValidationError, match=r"column 'name' has 60 distinct values \(more than max_categories=50\).*drop it"):
        TableEncoder(max_categories=50).fit(ids, native_categorical=True)
    assert TableEncoder(max_categories=60).fit(ids, native_categorical=True).categories_["name"][0] == "person-0"
    with pytest.raises(ValidationError, match="protected column 'sex' has a single value \\('Male'\\)"):
        TableEncoder().fit(frame.assign(sex="Male"), protected=["sex"], native_categorical=True)
    with pytest.raises(ValidationError, match="protected attribute 'gender' is not a column of X"):
        TableEncoder().fit(frame, protected=["gender"], native_categorical=True)
    with pytest.raises(ValidationError, match="column 'when' has dtype Datetime"):
        TableEncoder().fit(frame.assign(when=pd.Timestamp("2024-01-01")), native_categorical=True)
    with pytest.raises(ValidationError, match="column 'age' holds infinite values \\(first in row 2\\)"):
        TableEncoder().fit(frame.assign(age=[1.0, 2.0, np.inf] + [3.0] * 57), native_categorical=True)
    with pytest.raises(ValidationError, match="native_categorical=True needs native_missing=True"):
        TableEncoder().fit(frame, native_categorical=True, native_missing=False)


@pytest.mark.parametrize("native", ["pandas", "pyarrow"])
def test_repeated_column_names_are_refused_by_name(native):
    """A table whose column names repeat is refused at fit and predict, naming the repeated
    names (before: read as a bare array, so a protected name was 'not a column of X')."""
    frame, y = people()
    frame.columns = ["age", "age", "married", "workclass", "sex", "race"]
    X = frame if native == "pandas" else pa.Table.from_arrays([pa.array(frame.iloc[:, i]) for i in range(6)],
                                                               names=list(frame.columns))
    with pytest.raises(ValidationError, match=r"X has duplicate column names \('age' 2 times\)"):
        BuDROClassifier(n_steps=2, protected=["sex"], backend_params=FAST).fit(X, y)
    fitted = BuDROClassifier(n_steps=2, protected=["sex"], backend_params=FAST).fit(people()[0], y)
    with pytest.raises(ValidationError, match="duplicate column names"):
        fitted.predict(frame)


def test_an_identifier_with_a_hundred_thousand_values_is_refused():
    n = 100_000
    frame = pd.DataFrame({"id": [f"c{i:06d}" for i in range(n)], "x": np.arange(n, dtype=float)})
    with pytest.raises(ValidationError, match="column 'id' has 100000 distinct values .*identifier"):
        TableEncoder().fit(frame, native_categorical=True)


def test_booster_without_missing_support_gets_the_training_median():
    frame, _ = people()
    enc = TableEncoder().fit(frame, native_categorical=False, native_missing=False)
    B = enc.booster_matrix(frame)
    assert np.isfinite(B).all()
    age = B[:, enc.booster_feature_names_.index("age")]
    assert np.array_equal(age[frame["age"].isna().to_numpy()], np.full(frame["age"].isna().sum(), frame["age"].median()))


@pytest.mark.parametrize("native", [True, False])
def test_state_round_trip_gives_identical_matrices(native):
    frame, _ = people()
    enc = TableEncoder().fit(frame, protected=["race"], native_categorical=native)
    meta, blobs = enc.to_state()
    meta = json.loads(json.dumps(meta))
    again = TableEncoder.from_state(meta, blobs)
    new = as_polars(frame.sample(frac=1.0, random_state=1))
    assert np.array_equal(again.booster_matrix(new), enc.booster_matrix(new), equal_nan=True)
    assert np.array_equal(again.metric_matrix(new), enc.metric_matrix(new))
    assert again.protected_metric_indices_ == enc.protected_metric_indices_
    assert again.categorical_features_ == enc.categorical_features_


def test_stored_state_with_foreign_types_is_refused():
    import skops.io as sio
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    frame, _ = people()
    meta, blobs = TableEncoder().fit(frame, native_categorical=True).to_state()
    evil = {"metric_numeric": FunctionTransformer(np.log)}
    with pytest.raises(ValidationError, match="holds types budro does not load"):
        TableEncoder.from_state(meta, {name: sio.dumps(evil) for name in blobs})
    wrong = {"metric_numeric": StandardScaler().fit(np.ones((2, 2)))}
    with pytest.raises(ValidationError, match="not what budro stores"):
        TableEncoder.from_state(meta, {name: sio.dumps(wrong) for name in blobs})
    with pytest.raises(ValidationError, match="not a stored TableEncoder"):
        TableEncoder.from_state({"format": "pickle"}, blobs)


def test_needs_encoding_only_for_what_a_float_matrix_cannot_hold():
    frame, _ = people()
    numeric = pd.DataFrame({"a": [1.0, 2.0], "b": [True, False], "c": [1, 2]})
    assert is_table(frame) and is_table(as_polars(frame)) and is_table(as_arrow(frame)) and not is_table(np.zeros((2, 2)))
    assert table_needs_encoding(frame) and table_needs_encoding(as_arrow(frame))
    assert not table_needs_encoding(numeric) and not table_needs_encoding(as_polars(numeric))
    assert table_needs_encoding(numeric.assign(a=[1.0, np.nan]))
    assert table_needs_encoding(pl.DataFrame({"a": [1.0, float("nan")]}))  # NaN, not null, in polars
    assert table_needs_encoding(np.array([[1.0, np.nan]])) and not table_needs_encoding(np.ones((2, 2)))
    assert table_needs_encoding(np.array([["a", 1]], dtype=object))


@pytest.mark.parametrize("case, expected", [
    ("pandas Int64 with NA", True), ("pandas Int64", False), ("pandas boolean with NA", True),
    ("pandas Float64 with NA", True), ("pandas float16 NaN", True), ("polars int null", True),
    ("polars bool null", True), ("polars float null", True), ("arrow int null", True),
    ("arrow float NaN", True), ("arrow float null", True), ("arrow numeric", False),
])
def test_missing_values_are_found_in_every_numeric_and_nullable_dtype(case, expected):
    """Numeric columns are read as numpy (integers and booleans hold no missing value, floats
    hold them as NaN); nullable columns (pandas' Int64 / boolean / Float64, nulls of polars and
    pyarrow) are found too."""
    import pyarrow as pa

    frames = {
        "pandas Int64 with NA": pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": pd.array([1, None, 3], dtype="Int64")}),
        "pandas Int64": pd.DataFrame({"b": pd.array([1, 2, 3], dtype="Int64")}),
        "pandas boolean with NA": pd.DataFrame({"b": pd.array([True, None, False], dtype="boolean")}),
        "pandas Float64 with NA": pd.DataFrame({"b": pd.array([1.0, None, 2.0], dtype="Float64")}),
        "pandas float16 NaN": pd.DataFrame({"a": np.array([1.0, np.nan], dtype=np.float16)}),
        "polars int null": pl.DataFrame({"b": [1, None, 3]}),
        "polars bool null": pl.DataFrame({"b": [True, None, False]}),
        "polars float null": pl.DataFrame({"a": [1.0, None, 3.0], "b": [1, 2, 3]}),
        "arrow int null": pa.table({"b": [1, None, 3]}),
        "arrow float NaN": pa.table({"a": [1.0, float("nan"), 3.0]}),
        "arrow float null": pa.table({"a": [1.0, None, 3.0]}),
        "arrow numeric": pa.table({"a": [1.0, 2.0, 3.0], "b": [1, 2, 3], "c": [True, False, True]}),
    }
    assert table_needs_encoding(frames[case]) is expected


# -- BuDROClassifier on tables ---------------------------------------------------------------
def _clf(**kw):
    return BuDROClassifier(eps=0.01, n_steps=4, backend_params=FAST, random_state=0,
                           fair_metric_params={"fit_linear_models": False}, **kw)


def test_classifier_trains_on_a_raw_table_and_predicts_from_any_library():
    frame, y = people(120)
    clf = _clf(protected=["sex", "race"]).fit(frame, y)
    assert clf.table_ is not None
    assert clf.feature_names_in_.tolist() == list(frame.columns) and clf.n_features_in_ == 6
    assert clf.protected_indices_ == (4, 5)
    assert clf.fair_metric_ is not None and len(clf.history_) == 4
    p = clf.predict_proba(frame)
    assert p.shape == (120, 2) and np.allclose(p.sum(1), 1)
    assert np.array_equal(clf.predict_proba(as_polars(frame)), p)
    assert np.array_equal(clf.predict_proba(as_arrow(frame)), p)
    again = _clf(protected=["sex", "race"]).fit(as_polars(frame), y)
    assert np.array_equal(again.predict_proba(frame), p)
    with pytest.raises(ValidationError, match="missing column 'race'"):
        clf.predict(frame.drop(columns=["race"]))
    with pytest.raises(ValidationError, match="column 'age' is categorical"):
        clf.predict(frame.assign(age="old"))


@pytest.mark.parametrize("backend, params", [("xgboost", {"nthread": 1}), ("lightgbm", {"num_threads": 1}),
                                             ("catboost", {"thread_count": 1})])
def test_backends_get_category_codes_when_they_declare_it(backend, params):
    from budro import registry

    frame, y = people(100)
    clf = BuDROClassifier(backend=backend, backend_params=params, eps=0.01, n_steps=3, random_state=0,
                          protected=["sex"], fair_metric_params={"fit_linear_models": False}).fit(frame, y)
    caps = registry.get("backend", backend).spec.capabilities
    native = {"native-categorical", "missing-values"} <= caps
    assert clf.table_.native_categorical_ == native and clf.table_.native_missing_ == ("missing-values" in caps)
    assert clf.backend_.n_features_in_ == (6 if native else 11)  # one code column each, or 3 + 2 + 5 one-hot
    p = clf.predict_proba(frame)
    assert np.isfinite(p).all() and np.array_equal(clf.predict_proba(as_polars(frame)), p)


@pytest.fixture(scope="module")
def fitted_on_people():
    frame, y = people(120)
    return frame, _clf(protected=["sex"]).fit(frame, y)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 120), reverse=st.booleans())
def test_predictions_do_not_depend_on_row_or_category_order(fitted_on_people, seed, n_rows, reverse):
    frame, clf = fitted_on_people
    full = clf.predict_proba(frame)
    rows = np.random.default_rng(seed).permutation(len(frame))[:n_rows]
    part = frame.iloc[rows]
    cats = sorted(part["race"].unique(), reverse=reverse)
    part = part.assign(race=pd.Categorical(part["race"], categories=cats), sex=part["sex"].astype(str))
    assert np.array_equal(clf.predict_proba(part), full[rows])
    assert np.array_equal(clf.predict_proba(as_polars(part)), full[rows])


def test_metric_sees_the_embedding_and_booster_the_raw_columns():
    frame, y = people(80)
    clf = _clf(protected=["race"]).fit(frame, y)
    M = clf.metric_matrix(frame)
    assert M.shape == (80, len(clf.table_.metric_feature_names_)) and np.isfinite(M).all()
    # the fitted metric was learnt on the embedding: race's one-hot directions are projected out,
    # so rows differing only in race are at fair distance 0
    swapped = frame.assign(race=np.where(frame["race"] == "White", "Black", "White"))
    d = clf.fair_metric_.embed(M) - clf.fair_metric_.embed(clf.metric_matrix(swapped))
    assert np.isfinite(d).all() and np.abs(d).max() < 1e-9
    assert np.abs(M - clf.metric_matrix(swapped)).max() == 1.0
    assert clf.backend_.n_features_in_ == len(clf.table_.booster_feature_names_)


def test_three_string_labels_are_three_classes():
    frame, y = people(90)
    labels = np.array(["low", "mid", "high"])[np.arange(90) % 3]
    clf = _clf(protected=["sex"]).fit(frame, labels)
    assert clf.classes_.tolist() == ["high", "low", "mid"]
    assert clf.predict_proba(frame).shape == (90, 3)
    assert set(clf.predict(as_polars(frame))) <= {"high", "low", "mid"}


def test_missing_labels_are_refused():
    frame, y = people()
    labels = np.where(np.arange(60) == 7, None, np.where(y == 1, "yes", "no")).astype(object)
    with pytest.raises(ValidationError, match="y has 1 missing labels \\(first at row 7\\)"):
        _clf().fit(frame, labels)


def test_preprocessing_parameter():
    frame, y = people()
    with pytest.raises(ValidationError, match="preprocessing must be one of 'auto', 'table', 'none'"):
        _clf(preprocessing="pandas").fit(frame, y)
    with pytest.raises(ValueError):
        _clf(preprocessing="none").fit(frame, y)
    numeric = pd.DataFrame({"a": np.linspace(0, 1, 60), "b": np.arange(60) % 2 == 0})
    assert _clf().fit(numeric, y).table_ is None
    forced = _clf(preprocessing="table").fit(numeric, y)
    assert forced.table_ is not None and forced.table_.kinds_ == {"a": "numeric", "b": "boolean"}
    plain = _clf().fit(numeric, y)
    with pytest.raises(ValidationError, match="trained on numeric data without table preprocessing"):
        plain.predict(numeric.assign(a=["x"] * 60))


def test_numeric_table_with_missing_values_trains():
    """A numeric frame with NaN (scikit-learn's NaN error before) goes through the encoder."""
    frame, y = people()
    numeric = frame[["age", "hours"]]
    clf = _clf(protected=["age"]).fit(numeric, y)
    assert clf.table_ is not None and clf.table_.protected_metric_indices_ == (0,)
    assert np.isfinite(clf.predict_proba(numeric)).all()


# -- the engine ------------------------------------------------------------------------------
def test_engine_keeps_nan_away_from_the_metric():
    from budro import registry
    from budro.core import BuDRO

    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    y = (X[:, 0] > 0).astype(int)
    make = lambda: BuDRO(registry.create("backend", "xgboost", nthread=1), registry.create("solver", "dual"),  # noqa: E731
                         registry.create("fair_metric", "sensitive-subspace", fit_linear_models=False), eps=0.1, n_steps=1)
    Xnan = X.copy()
    Xnan[0, 0] = np.nan
    with pytest.raises(ValidationError, match="X has missing \\(NaN\\)"):
        make().fit(Xnan, y)
    with pytest.raises(ValidationError, match="metric_X has missing"):
        make().fit(X, y, metric_X=Xnan)
    with pytest.raises(ValidationError, match="metric_X must be \\(n, d'\\) with the n = 30 rows"):
        make().fit(X, y, metric_X=X[:5])
    with pytest.raises(ValidationError, match="categorical_features must be column indices of X"):
        make().fit(X, y, categorical_features=[3])
    # the metric is fitted on metric_X: its embedding has metric_X's width
    trainer = make().fit(X, y, metric_X=np.hstack([X, X[:, :1]]))
    assert trainer.metric_.embed(np.hstack([X, X[:, :1]])).shape[1] == 4
