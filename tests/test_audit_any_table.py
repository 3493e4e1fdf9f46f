"""Consistency and audit on any table: counterfactual flips of raw columns, group rules, table files
(CSV with or without header, parquet), the CLI, and the raw UCI files through the example configs."""

import json
import os
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from budro import BuDROClassifier
from budro.audit import audit
from budro.cli import main
from budro.config import load_config, parse_config
from budro.evaluation import ColumnValues, counterfactual_consistency, flips_from_config, table_fairness_definitions
from budro.exceptions import ConfigError, ValidationError

FAST = {"max_depth": 3, "nthread": 1}
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _table(n=160, seed=0):
    rng = np.random.default_rng(seed)
    sex = rng.choice(["Male", "Female"], n)
    race = rng.choice(["White", "Black", "Asian"], n, p=[0.6, 0.3, 0.1])
    income = rng.normal(50, 10, n)
    hours = rng.normal(40, 5, n)
    score = (income - 50) / 10 + 0.8 * (sex == "Male") + rng.normal(0, 0.5, n)
    X = pd.DataFrame({"sex": sex, "race": race, "income": income, "hours": hours})
    X.loc[rng.choice(n, 8, replace=False), "hours"] = np.nan
    y = np.where(score > 0.4, "yes", "no")
    return X, y


# ---------------------------------------------------------------------------------- flips and groups


def test_column_values_flip_strings_and_keep_everything_else():
    X, _ = _table(20)
    copies = ColumnValues.product({"sex": ["Male", "Female"]})(X)
    assert [set(c["sex"]) for c in copies] == [{"Male"}, {"Female"}]
    for c in copies:
        pd.testing.assert_frame_equal(c.drop(columns="sex"), X.drop(columns="sex"))
    two = ColumnValues.product({"sex": ["Male", "Female"], "race": ["White", "Black"]})
    assert len(two(X)) == 4 and set(two(X)[3]["race"]) == {"Black"}
    cat = X.astype({"race": "category"})
    flipped = ColumnValues.product({"race": ["Other"]})(cat)[0]  # a value the column never held
    assert isinstance(flipped["race"].dtype, pd.CategoricalDtype) and set(flipped["race"]) == {"Other"}
    arr = ColumnValues.one_hot([0, 1])(np.zeros((3, 3)))
    assert arr[0][:, 0].tolist() == [1, 1, 1] and arr[1][:, 1].tolist() == [1, 1, 1]


def test_a_budro_model_on_raw_strings_is_consistent_or_not_as_it_predicts():
    X, y = _table()
    clf = BuDROClassifier(n_steps=4, eps=0.0, backend_params=FAST, random_state=0).fit(X, y)
    flip = ColumnValues.product({"sex": ["Male", "Female"]})
    expected = np.mean(clf.predict(flip(X)[0]) == clf.predict(flip(X)[1]))
    assert counterfactual_consistency(clf, X, flip) == pytest.approx(expected)
    assert expected < 1.0  # plain boosting uses sex here, so the flip must catch it


def test_flips_from_config_forms_and_errors():
    flips = flips_from_config({"sex": ["Male", "Female"], "GR": {"sex": ["Male", "Female"], "race": ["White", "Black"]},
                               "spouse": {"one_hot": ["r=H", "r=W", "r=C"], "active": ["r=H", "r=W"]}})
    assert [len(f) for f in flips.values()] == [2, 4, 2]
    with pytest.raises(ConfigError, match=r"'counterfactuals.sex' must be a list of values"):
        flips_from_config({"sex": "Male"})
    with pytest.raises(ConfigError, match=r"'counterfactuals.GR.race' must be a list"):
        flips_from_config({"GR": {"sex": ["Male"], "race": "White"}})
    with pytest.raises(ConfigError, match=r"'counterfactuals.s.columns' is not used by a one-hot flip"):
        flips_from_config({"s": {"one_hot": ["a", "b"], "columns": ["a"]}})
    with pytest.raises(ConfigError, match="counterfactuals.age"):
        flips_from_config({"age": [20, float("nan")]})
    with pytest.raises(ConfigError, match="config key 'groups.age'"):
        parse_config({"groups": {"age": {"below": 25}}})


def test_default_groups_and_flips_of_protected_columns():
    X, _ = _table()
    X["age"] = np.arange(len(X)) % 60 + 18.0
    groups, flips, notes = table_fairness_definitions(X, ["sex", "race", "age"])
    assert set(groups["sex"]) == {"sex = Female", "sex = Male"}
    assert set(groups["race"]) == {"race = White", "race != White"}  # the most frequent value against the rest
    median = float(X["age"].median())
    assert set(groups["age"]) == {f"age < {median:g}", f"age >= {median:g}"}
    assert list(flips) == ["sex", "race"] and len(flips["race"]) == 3
    assert any("no flip for 'age'" in n for n in notes)
    groups, _, _ = table_fairness_definitions(X, ["hours"], groups={"hours": 40})
    assert set(groups["hours"]) == {"hours < 40", "hours >= 40 or missing"}
    assert (groups["hours"] == "hours < 40").sum() == (X["hours"] < 40).sum()
    with pytest.raises(ValidationError, match="'religion'"):
        table_fairness_definitions(X, ["religion"])
    with pytest.raises(ValidationError, match="not numeric"):
        table_fairness_definitions(X, ["race"], groups={"race": 3})


# ---------------------------------------------------------------------------------- audit on files


def test_audit_a_budro_model_on_a_csv_file_uses_its_own_metric_and_budget(tmp_path):
    X, y = _table()
    clf = BuDROClassifier(protected=["sex"], eps=0.05, n_steps=4, backend_params=FAST, random_state=0).fit(X, y)
    X.assign(y=y).to_csv(tmp_path / "people.csv", index=False)
    report = audit(clf, tmp_path / "people.csv", label="y")
    m = report.metrics
    assert m["n_samples"] == len(y) and m["accuracy"] == pytest.approx(np.mean(clf.predict(X) == y))
    assert {"consistency[sex]", "gap_max[sex]", "gap_rms[sex]", "certificate"} <= set(m)  # protected from the model
    assert report.eps == clf.eps_effective_ and "the model's own" in report.eps_source
    assert any("the model's own" in n for n in report.notes)
    assert m["certificate"] >= 0
    # parquet, a split, and a config's flips over the defaults
    X.assign(y=y).to_parquet(tmp_path / "people.parquet")
    split = audit(clf, str(tmp_path / "people.parquet"), label="y", protected=["sex", "race"], split_seed=1,
                  counterfactuals={"GR": {"sex": ["Male", "Female"], "race": ["White", "Black"]}}, certificate=False)
    assert split.metrics["n_samples"] == 32 and "consistency[GR]" in split.metrics
    assert "consistency[sex]" not in split.metrics and "gap_max[race]" in split.metrics


def test_audit_any_pipeline_learns_the_metric_on_the_file(tmp_path):
    from sklearn.compose import make_column_transformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    X, y = _table()
    pipe = make_pipeline(make_column_transformer((OneHotEncoder(), ["sex", "race"]),
                                                 (SimpleImputer(), ["income", "hours"])),
                         LogisticRegression()).fit(X, y)
    X.assign(y=y).to_csv(tmp_path / "p.csv", index=False)
    report = audit(pipe, tmp_path / "p.csv", label="y", protected=["sex"], split_seed=0)
    assert report.eps > 0 and "nearest-neighbour unit" in report.eps_source
    assert any("learned on the training part" in n for n in report.notes)
    assert np.isfinite(report.metrics["certificate"]) and report.metrics["consistency[sex]"] <= 1.0


def test_audit_file_errors_are_clear(tmp_path):
    X, y = _table(40)
    clf = BuDROClassifier(n_steps=2, backend_params=FAST).fit(X, y)
    X.assign(y=y).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(ValidationError, match="needs its label column"):
        audit(clf, tmp_path / "t.csv")
    with pytest.raises(ConfigError, match="'data.label': column 'target' is not in"):
        audit(clf, tmp_path / "t.csv", label="target")
    with pytest.raises(ValidationError, match="does not exist"):
        audit(clf, tmp_path / "missing.csv", label="y")
    with pytest.raises(ValidationError, match="unknown data set 'credit'"):
        audit(clf, "credit")
    X.drop(columns="income").assign(y=y).to_csv(tmp_path / "less.csv", index=False)
    with pytest.raises(ValidationError, match="columns this file does not have: \\['income'\\]"):
        audit(clf, tmp_path / "less.csv", label="y")


def test_cli_audit_a_headerless_file_and_reuse_a_config(tmp_path, capsys):
    X, y = _table()
    clf = BuDROClassifier(protected=["sex"], eps=0.05, n_steps=3, backend_params=FAST, random_state=0).fit(X, y)
    from budro.persist import save_model

    save_model(clf, tmp_path / "m.budro")
    lines = [";".join("?" if pd.isna(v) else str(v) for v in row) for row in X.assign(y=y).to_numpy()]
    (tmp_path / "t.txt").write_text("junk line\n" + "\n".join(lines) + "\n")
    args = ["audit", str(tmp_path / "m.budro"), "--data", str(tmp_path / "t.txt"), "--label", "y", "--no-header",
            "--names", "sex,race,income,hours,y", "--separator", ";", "--na-values", "?", "--skip-rows", "1",
            "--protected", "sex,race", "--output", str(tmp_path / "r.json")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "consistency[race]" in out and "gap_max[race]" in out and "certificate" in out
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["metrics"]["accuracy"] == pytest.approx(np.mean(clf.predict(X) == y))
    cfg = tmp_path / "run.toml"
    cfg.write_text(textwrap.dedent("""
        protected = ["sex"]
        [data]
        source = "csv"
        path = "t.txt"
        label = "y"
        header = false
        names = ["sex", "race", "income", "hours", "y"]
        separator = ";"
        na_values = ["?"]
        skip_rows = 1
        [counterfactuals]
        everyone_female = { sex = ["Female"] }
        [groups]
        income = 50
    """))
    assert main(["audit", str(tmp_path / "m.budro"), "--config", str(cfg), "--no-certificate"]) == 0
    out = capsys.readouterr().out
    assert "consistency[everyone_female]" in out and "gap_max[income]" in out and "gap_max[sex]" in out
    assert main(["audit", str(tmp_path / "m.budro")]) == 2
    assert "audit needs data" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- the raw UCI files


def _data_home(monkeypatch, *files: str) -> Path:
    """The data home of the raw UCI files: ``BUDRO_DATA_HOME`` when set, else ``../shared/data``
    next to the repository (the project's rule, as ``tests/conftest.py``); exported as
    ``BUDRO_DATA_HOME`` for the example configs (``path = "$BUDRO_DATA_HOME/..."``).  Skips, saying
    where to put them, only when ``files`` are absent there."""
    home = Path(os.environ.get("BUDRO_DATA_HOME") or SHARED_DATA)
    missing = [f for f in files if not (home / f).is_file()]
    if missing:
        where = "BUDRO_DATA_HOME" if os.environ.get("BUDRO_DATA_HOME") else f"{SHARED_DATA} (BUDRO_DATA_HOME is not set)"
        pytest.skip(f"{', '.join(missing)} missing under {home}: put the UCI files in {where}, or set BUDRO_DATA_HOME "
                    f"to the folder holding german/german.data and adult/adult.{{data,test}} (README.md, the data home)")
    monkeypatch.setenv("BUDRO_DATA_HOME", str(home))
    return home


def test_raw_german_file_trains_predicts_and_audits_through_the_example_config(monkeypatch, tmp_path):
    _data_home(monkeypatch, "german/german.data")
    cfg = load_config(EXAMPLES / "german-raw.toml")
    cfg.n_steps = 5
    X, y = cfg.load_data()
    assert X.shape == (1000, 20) and set(y) == {"good", "bad"} and X["checking_status"].iloc[0] == "A11"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        clf = cfg.estimator().fit(X, y)
    assert clf.table_ is not None and set(clf.predict(X)) <= {"good", "bad"}
    from budro.persist import save_model

    save_model(clf, tmp_path / "german.budro")
    report = audit(tmp_path / "german.budro", config=EXAMPLES / "german-raw.toml", split_seed=0)
    m = report.metrics
    assert m["n_samples"] == 200 and {"consistency[personal_status]", "consistency[age]", "gap_max[age]"} <= set(m)
    assert "groups of 'age': age < 25 vs age >= 25" in report.notes and np.isfinite(m["certificate"])


@pytest.mark.slow
def test_raw_adult_files_train_predict_and_audit_through_the_example_configs(monkeypatch, tmp_path):
    """Slow (18 s on 2 shared cores by ``--durations``: 32561 training rows, 16281 audited), so
    marked ``slow``: run it with ``python -m pytest -m slow tests/test_audit_any_table.py``; the
    data come from BUDRO_DATA_HOME, else ../shared/data."""
    _data_home(monkeypatch, "adult/adult.data", "adult/adult.test")
    cfg = load_config(EXAMPLES / "adult-raw.toml")
    cfg.n_steps, cfg.n_neighbors = 3, 8
    X, y = cfg.load_data()
    assert X.shape == (32561, 12) and set(y) == {"<=50K", ">50K"} and X["workclass"].isna().sum() == 1836
    clf = cfg.estimator().fit(X, y)
    from budro.persist import save_model

    save_model(clf, tmp_path / "adult.budro")
    report = audit(tmp_path / "adult.budro", config=EXAMPLES / "adult-raw-test.toml", max_samples=2000,
                   n_neighbors=16)
    m = report.metrics
    assert m["n_samples"] == 16281  # adult.test: the junk first line skipped, labels "<=50K." cleaned
    assert m["balanced_accuracy"] > 0.6
    assert {"consistency[sex]", "consistency[race]", "consistency[spouse]", "consistency[sex+race]",
            "gap_max[sex]", "gap_max[race]", "certificate"} <= set(m)
    assert "groups of 'race': race = White vs race other or missing" in report.notes or \
        "groups of 'race': race = White vs race other" in report.notes


def test_raw_german_experiment_with_the_baselines_a_grid_and_the_certificate(monkeypatch, tmp_path, capsys):
    """``budro experiment examples/german-raw.toml --splits 2 --grid eps=...`` on the raw UCI file:
    BuDRO at two budgets against gbdt, project and reweigh (on the raw personal_status), every
    method certified in BuDRO's own fair metric (few rounds here, for speed)."""
    import csv

    from budro.experiment import _certificate_metric

    _data_home(monkeypatch, "german/german.data")
    out = tmp_path / "out"
    args = ["experiment", str(EXAMPLES / "german-raw.toml"), "--splits", "2", "--grid", "eps=0.3,1", "n_steps=4",
            "--grid", "Baseline.n_rounds=5", "--grid", "Project.n_rounds=5", "--grid", "Reweigh.n_rounds=5",
            "-o", str(out), "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # budget warnings of the tiny runs
        assert main(args) == 0
    text = capsys.readouterr().out
    for row in ("| BuDRO | eps=0.3,n_steps=4 |", "| BuDRO | eps=1,n_steps=4 |", "| Baseline | n_rounds=5 |",
                "| Project | n_rounds=5 |", "| Reweigh | n_rounds=5 |"):
        assert row in text
    with open(out / "grid-splits.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 10 and {r["method"] for r in rows} == {"BuDRO", "Baseline", "Project", "Reweigh"}
    for r in rows:
        assert float(r["certificate"]) >= 0 and 0.5 < float(r["accuracy"]) <= 1
        assert {"consistency[personal_status]", "consistency[age]", "gap_max[age]"} <= set(r) and r["gap_max[age]"]
    # The certificate's metric is BuDRO's own: the same table embedding and sensitive subspace.
    cfg = load_config(EXAMPLES / "german-raw.toml")
    cfg.n_steps = 2
    train, test = cfg.load_dataset().train_test_split(0.2, random_state=0)
    metric, embedding, nn_scale = _certificate_metric(cfg, train)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        clf = cfg.make_method("BuDRO").fit(train.X, train.y)
    assert nn_scale is None and np.array_equal(embedding(test.X), clf.metric_matrix(test.X))
    Z = clf.metric_matrix(test.X)
    assert np.allclose(metric.embed(Z), clf.fair_metric_.embed(Z))
