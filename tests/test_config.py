"""Configuration-driven composition: dicts, TOML files, and the errors that name the key."""

import textwrap

import numpy as np
import pytest

from budro.config import load_config, parse_config
from budro.exceptions import ConfigError

GOOD = {
    "eps": 0.05,
    "n_steps": 5,
    "random_state": 0,
    "protected": ["x1"],
    "data": {"source": "synthetic", "random_state": 3},
    "backend": {"name": "xgboost", "max_depth": 2, "nthread": 1},
    "solver": "dual-bisection",
    "fair_metric": {"name": "sensitive-subspace", "fit_linear_models": False},
}


def test_good_config_builds_an_estimator_and_trains():
    cfg = parse_config(GOOD)
    assert cfg.solver == "dual"  # the alias resolves to the canonical name
    assert cfg.backend_params == {"max_depth": 2, "nthread": 1}
    X, y = cfg.load_data()
    est = cfg.estimator().fit(X, y)
    assert len(est.history_) == 5
    assert est.protected_indices_ == (0,)
    assert est.backend_.n_rounds == 6 and est.backend_.params["max_depth"] == 2
    assert set(est.predict(X)) <= {0, 1}


@pytest.mark.parametrize("change, match", [
    ({"epsilon": 1.0}, "unknown config key 'epsilon'"),
    ({"eps": -1}, "config key 'eps' must be >= 0"),
    ({"eps": "big"}, "config key 'eps' must be a finite number"),
    ({"eps": True}, "config key 'eps' must be a finite number"),
    ({"n_steps": 2.5}, "config key 'n_steps' must be an integer"),
    ({"n_steps": -3}, "config key 'n_steps' must be >= 0"),
    ({"n_neighbors": 0}, "config key 'n_neighbors' must be >= 1"),
    ({"protected": "x1"}, "config key 'protected' must be a list"),
    ({"solver": "simplex"}, r"config key 'solver.name': unknown solver 'simplex'.*choose one of: .*dual"),
    ({"solver": {"name": "dual", "tie_tol": 1}}, r"\[solver\].*has no parameter 'tie_tol'.*tie_rtol"),
    ({"solver": {"name": "dual", "tie_rtol": -1}}, r"\[solver\].*tie_rtol"),
    ({"solver": {"tie_rtol": 1e-9}}, r"\[solver\] needs a 'name' key"),
    ({"backend": {"name": "xgboost", "max_dept": 3}}, r"\[backend\].*max_dept"),
    ({"fair_metric": {"name": "sensitive-subspace", "l2": 0}}, r"\[fair_metric\].*l2 must be a positive number"),
    ({"fair_metric": 3}, "config key 'fair_metric' must be a plugin name or a table"),
    ({"data": {"source": "kaggle"}}, "config key 'data.source' must be one of: synthetic, csv"),
    ({"data": {"source": "csv", "path": "x.csv"}}, "config key 'data.label' is required"),
    ({"data": {"source": "synthetic", "n": "many"}}, "config key 'data.n' must be of type int"),
    ({"data": {"source": "synthetic", "rows": 5}}, "config key 'data.rows' is not used by data source 'synthetic'"),
])
def test_bad_config_names_the_key(change, match):
    with pytest.raises(ConfigError, match=match):
        parse_config({**GOOD, **change})


def test_toml_file_and_relative_csv(tmp_path):
    from budro.datasets import make_synthetic

    X, y, _ = make_synthetic(random_state=2)
    lines = ["x1,x2,label"] + [f"{a},{b},{c}" for (a, b), c in zip(X, y)]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "run.toml").write_text(textwrap.dedent("""
        eps = 0.05
        n_steps = 3
        protected = ["x1"]
        [data]
        source = "csv"
        path = "train.csv"
        label = "label"
        [backend]
        name = "xgboost"
        nthread = 1
    """))
    cfg = load_config(tmp_path / "run.toml")
    Xc, yc = cfg.load_data()
    assert list(Xc.columns) == ["x1", "x2"] and np.array_equal(yc, y)
    est = cfg.estimator().fit(Xc, yc)
    assert est.feature_names_in_.tolist() == ["x1", "x2"]


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("eps = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    cfg = parse_config({"data": {"source": "csv", "path": "nope.csv", "label": "y"}}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match="data.path.*does not exist"):
        cfg.load_data()
    with pytest.raises(ConfigError, match="no \\[data\\] section"):
        parse_config({}).load_data()


# -- raw files: header or not, separators, missing markers, labels to clean, parquet ---------------
ADULT_NAMES = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
               "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
               "income"]
ADULT_LIKE = """|1x3 Cross validator
25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, 40, United-States, <=50K.
38, Private, 89814, HS-grad, 9, Married-civ-spouse, Farming-fishing, Husband, White, Male, 0, 0, 50, United-States, <=50K.
28, Local-gov, 336951, Assoc-acdm, 12, Married-civ-spouse, Protective-serv, Husband, White, Male, 0, 0, 40, United-States, >50K.
44, Private, 160323, Some-college, 10, Married-civ-spouse, Machine-op-inspct, Husband, Black, Male, 7688, 0, 40, United-States, >50K.
18, ?, 103497, Some-college, 10, Never-married, ?, Own-child, White, Female, 0, 0, 30, United-States, <=50K.
34, Private, 198693, 10th, 6, Never-married, Other-service, Not-in-family, White, Female, 0, 0, 30, ?, <=50K.
"""


def _adult_like(tmp_path, **data):
    (tmp_path / "adult.test").write_text(ADULT_LIKE)
    base = {"source": "csv", "path": "adult.test", "header": False, "names": ADULT_NAMES, "separator": ", ",
            "skip_rows": 1, "na_values": ["?"], "label": "income", "label_strip": "."}
    return parse_config({"n_steps": 2, "eps": 0.01, "protected": ["sex", "race"], "random_state": 0,
                         "backend": {"name": "xgboost", "nthread": 1},
                         "fair_metric": {"name": "sensitive-subspace", "fit_linear_models": False},
                         "data": {**base, **data}}, base_dir=tmp_path)


def test_headerless_file_with_junk_line_spaces_question_marks_and_dotted_labels(tmp_path):
    cfg = _adult_like(tmp_path)
    X, y = cfg.load_data()
    assert list(X.columns) == ADULT_NAMES[:-1] and X.shape == (6, 14)
    assert y.tolist() == ["<=50K", "<=50K", ">50K", ">50K", "<=50K", "<=50K"]
    assert X["age"].dtype.kind == "i" and X["capital-gain"].tolist() == [0, 0, 0, 7688, 0, 0]
    assert X["workclass"].tolist()[:4] == ["Private", "Private", "Local-gov", "Private"]  # spaces stripped
    assert X["workclass"].isna().tolist() == [False] * 4 + [True, False]
    assert X["native-country"].isna().sum() == 1 and X["occupation"].isna().sum() == 1
    est = cfg.estimator().fit(X, y)
    assert est.table_ is not None and est.feature_names_in_.tolist() == ADULT_NAMES[:-1]
    assert set(est.predict(X)) <= {"<=50K", ">50K"}


def test_label_map_and_drop(tmp_path):
    cfg = _adult_like(tmp_path, label_map={"<=50K.": 0, ">50K.": 1}, drop=["fnlwgt", "education-num"])
    del cfg.data["label_strip"]
    X, y = cfg.load_data()
    assert y.tolist() == [0, 0, 1, 1, 0, 0] and "fnlwgt" not in X.columns and X.shape == (6, 12)


def test_names_must_match_the_file(tmp_path):
    cfg = _adult_like(tmp_path, names=ADULT_NAMES[:-2] + ["income"])
    with pytest.raises(ConfigError, match="'data.names' lists 14 columns, but .*adult.test' has 15"):
        cfg.load_data()
    cfg = _adult_like(tmp_path, drop=["salary"])
    with pytest.raises(ConfigError, match="'data.drop': column 'salary' is not in"):
        cfg.load_data()


def test_missing_labels_are_named(tmp_path):
    (tmp_path / "t.csv").write_text("a,b,y\n1,x,1\n2,?,?\n3,y,0\n")
    cfg = parse_config({"data": {"source": "csv", "path": "t.csv", "label": "y", "na_values": ["?"]}}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match="label column 'y' .* has 1 missing values \\(first in data row 2\\)"):
        cfg.load_data()


@pytest.mark.parametrize("data, match", [
    ({"separator": "::"}, "'data.separator' must be one character"),
    ({"names": ["a", 1]}, "'data.names' must be a list of strings"),
    ({"names": ["a", "a", "income"]}, "'data.names' lists the column 'a' twice"),
    ({"names": ["a", "b"]}, "'data.label': 'income' is not one of data.names"),
    ({"skip_rows": -1}, "'data.skip_rows' must be >= 0"),
    ({"header": "no"}, "'data.header' must be of type bool"),
    ({"label_map": {"a": [1]}}, "'data.label_map.a' must map to a string or an integer"),
    ({"na_values": "?"}, "'data.na_values' must be of type list"),
    ({"sheet": 1}, "'data.sheet' is not used by data source 'csv'"),
])
def test_bad_file_keys_name_the_key(tmp_path, data, match):
    with pytest.raises(ConfigError, match=match):
        _adult_like(tmp_path, **data)


def test_parquet_source_keeps_strings_categories_and_missing_values(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame({
        "age": [25.0, np.nan, 40.0, 33.0, 51.0, 62.0],
        "sex": pd.Categorical(["Male", "Female", "Female", "Male", None, "Male"]),
        "job": ["a", "b", None, "a", "b", "c"],
        "y": ["no", "yes", "no", "yes", "no", "yes"],
    })
    frame.to_parquet(tmp_path / "t.parquet")
    cfg = parse_config({"n_steps": 2, "eps": 0.01, "protected": ["sex"], "backend": {"name": "xgboost", "nthread": 1},
                        "data": {"source": "parquet", "path": "t.parquet", "label": "y"}}, base_dir=tmp_path)
    X, y = cfg.load_data()
    assert list(X.columns) == ["age", "sex", "job"] and X["sex"].dtype == "category" and X["age"].isna().sum() == 1
    est = cfg.estimator().fit(X, y)
    assert est.table_.kinds_ == {"age": "numeric", "sex": "categorical", "job": "categorical"}
    assert est.predict_proba(X).shape == (6, 2)
    with pytest.raises(ConfigError, match="'data.label' is required for data source 'parquet'"):
        parse_config({"data": {"source": "parquet", "path": "t.parquet"}})


# -- the raw UCI files --------------------------------------------------------------------------
def _raw_file(*parts):
    import os
    from pathlib import Path

    home = Path(os.environ.get("BUDRO_DATA_HOME") or Path(__file__).resolve().parents[1].parent / "shared" / "data")
    path = home.joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"raw data file {path} is absent: set BUDRO_DATA_HOME to the folder holding german/ and adult/ "
                    f"(the UCI files; see docs or ../shared/data/README.md)")
    return path


def test_raw_german_credit_loads_and_trains():
    path = _raw_file("german", "german.data")
    names = [f"attribute{i}" for i in range(1, 21)] + ["credit"]
    names[12] = "age"
    cfg = parse_config({"n_steps": 3, "eps": 0.01, "protected": ["age"], "random_state": 0,
                        "backend": {"name": "xgboost", "nthread": 1},
                        "data": {"source": "csv", "path": str(path), "header": False, "separator": " ",
                                 "names": names, "label": "credit"}})
    X, y = cfg.load_data()
    assert X.shape == (1000, 20) and sorted(set(y.tolist())) == [1, 2]
    assert X["attribute1"].iloc[0] == "A11"
    est = cfg.estimator().fit(X, y)
    # 7 numeric attributes and 54 one-hot columns: the paper's 61 features
    assert len(est.table_.metric_feature_names_) == 61
    assert est.table_.protected_metric_indices_ == (est.table_.metric_feature_names_.index("age"),)
    assert est.score(X, y) > 0.6


def test_raw_adult_train_and_test_files_load_and_train():
    data, test = _raw_file("adult", "adult.data"), _raw_file("adult", "adult.test")
    common = {"source": "csv", "header": False, "names": ADULT_NAMES, "separator": ", ", "na_values": ["?"],
              "label": "income", "label_strip": "."}
    cfg = parse_config({"n_steps": 2, "eps": 0.01, "protected": ["sex", "race"], "random_state": 0, "n_neighbors": 8,
                        "backend": {"name": "xgboost", "nthread": 1},
                        "data": {**common, "path": str(data)}})
    X, y = cfg.load_data()
    assert X.shape == (32561, 14) and X["workclass"].isna().sum() == 1836 and X["occupation"].isna().sum() == 1843
    cfg_test = parse_config({"data": {**common, "path": str(test), "skip_rows": 1}})
    X_test, y_test = cfg_test.load_data()
    assert X_test.shape == (16281, 14) and sorted(set(y_test)) == sorted(set(y)) == ["<=50K", ">50K"]
    est = cfg.estimator().fit(X.iloc[:2000], y[:2000])
    assert len(est.table_.protected_metric_indices_) == 2 + 5  # sex: 2 one-hot columns, race: 5
    assert est.score(X_test.iloc[:2000], y_test[:2000]) > 0.75
