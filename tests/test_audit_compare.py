"""budro audit (any saved classifier) and budro compare (the same BuDRO on each backend)."""

import csv
import json
import pickle
import textwrap

import joblib
import numpy as np
import pytest

from budro import BuDROClassifier, registry
from budro.audit import audit, load_any_model
from budro.cli import main
from budro.compare import backend_params_for, run_compare
from budro.config import parse_config
from budro.evaluation import evaluate
from budro.exceptions import ConfigError, ValidationError

xgb = pytest.importorskip("xgboost")
pytest.importorskip("pandas")


@pytest.fixture
def german_split(data_home):
    from budro.datasets import load_german

    return load_german().train_test_split(0.2, random_state=3)


def test_audit_random_forest_pickle(tmp_path, german_split, capsys):
    from sklearn.ensemble import RandomForestClassifier

    train, test = german_split
    forest = RandomForestClassifier(n_estimators=20, max_depth=6, random_state=0, n_jobs=1)
    forest.fit(train.X.to_numpy(), train.y)  # trained on a plain array: no feature names
    path = tmp_path / "forest.pkl"
    path.write_bytes(pickle.dumps(forest))
    report = audit(load_any_model(path, trust_pickle=True), "german", split_seed=3, eps=1.0)
    direct = evaluate(forest, test.X.to_numpy(), test.y, groups=test.groups)
    assert report.metrics["accuracy"] == pytest.approx(direct["accuracy"])
    assert report.metrics["gap_rms[age]"] == pytest.approx(direct["gap_rms[age]"])
    assert 0.0 <= report.metrics["consistency[S-cons]"] <= 1.0
    assert report.metrics["certificate"] >= 0.0 and report.eps == 1.0
    assert report.metrics["n_samples"] == 200 and "seed 3" in report.rows
    # The same through the command line, with the paper's eps for German by default.
    out = tmp_path / "report.json"
    assert main(["audit", str(path), "--trust-pickle", "--data", "german", "--split-seed", "3", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "RandomForestClassifier" in text and "certificate eps: 1 (the paper's eps for german)" in text
    saved = json.loads(out.read_text())
    assert saved["metrics"]["accuracy"] == pytest.approx(direct["accuracy"])


def test_audit_xgbclassifier_joblib_and_native_json(tmp_path, german_split):
    train, test = german_split
    by_name = xgb.XGBClassifier(n_estimators=20, max_depth=3, n_jobs=1).fit(train.X, train.y)  # DataFrame: names
    joblib.dump(by_name, tmp_path / "xgb.joblib")
    report = audit(load_any_model(tmp_path / "xgb.joblib", trust_pickle=True), "german", split_seed=3, certificate=False)
    assert report.metrics["accuracy"] == pytest.approx(np.mean(by_name.predict(test.X) == test.y))
    assert "certificate" not in report.metrics

    by_name.get_booster().save_model(str(tmp_path / "native.json"))
    model = load_any_model(tmp_path / "native.json")
    assert np.allclose(model.predict_proba(test.X.to_numpy())[:, 1], by_name.predict_proba(test.X)[:, 1], atol=1e-6)
    native = audit(model, "german", split_seed=3, eps=0.5)
    assert native.metrics["accuracy"] == pytest.approx(report.metrics["accuracy"])
    assert native.metrics["certificate"] >= 0.0


def test_audit_budro_model_uses_its_own_eps(tmp_path, german_split):
    from budro.persist import save_model

    train, _ = german_split
    est = BuDROClassifier(protected=["age"], eps=0.7, n_steps=3, backend_params={"nthread": 1, "max_depth": 2})
    save_model(est.fit(train.X, train.y), tmp_path / "m.budro")
    report = audit(tmp_path / "m.budro", "german", split_seed=3, max_samples=100)
    assert report.eps == 0.7 and report.eps_source == "the model's own eps"
    assert any("subsample of 100" in note for note in report.notes)


def test_audit_rejects_a_model_for_other_data(tmp_path, data_home):
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression().fit(np.random.default_rng(0).normal(size=(20, 4)), [0, 1] * 10)
    joblib.dump(model, tmp_path / "lr.joblib")
    with pytest.raises(ValidationError, match="expects 4 features, the data set has 61"):
        audit(load_any_model(tmp_path / "lr.joblib", trust_pickle=True), "german")
    (tmp_path / "junk.bin").write_bytes(b"not a model")
    with pytest.raises(ValidationError, match="not a budro model archive"):
        load_any_model(tmp_path / "junk.bin")
    with pytest.raises(ValidationError, match="neither a budro model archive nor a readable pickle"):
        load_any_model(tmp_path / "junk.bin", trust_pickle=True)
    with pytest.raises(ValidationError, match="unknown data set 'credit'"):
        audit(model, "credit")


# ---------------------------------------------------------------------------------- compare

COMPARE = {
    "eps": 0.05, "n_steps": 4, "protected": ["x1"], "random_state": 0,
    "data": {"source": "synthetic", "random_state": 2},
    "backend": {"name": "xgboost", "max_depth": 2, "nthread": 1},
    "fair_metric": {"name": "sensitive-subspace", "fit_linear_models": False},
}


def test_compare_on_synthetic_with_xgboost(tmp_path):
    cfg = parse_config(COMPARE)
    result = run_compare(cfg, ["xgboost"], splits=2, output=tmp_path, progress=False)
    assert [e["method"] for e in result.summary] == ["xgboost"]
    # The row is the config's BuDRO, evaluated on the same splits.
    dataset = cfg.load_dataset()
    accs = []
    for k in range(2):
        train, test = dataset.train_test_split(0.2, random_state=k)
        accs.append(evaluate(cfg.estimator().fit(train.X, train.y), test)["accuracy"])
    assert result.summary[0]["accuracy_mean"] == pytest.approx(np.mean(accs))
    rows = list(csv.DictReader(open(tmp_path / "compare.csv", newline="")))
    assert rows[0]["backend"] == "xgboost" and float(rows[0]["fit_seconds_mean"]) > 0
    for key in ("accuracy_mean", "balanced_accuracy_std", "consistency[cluster]_mean", "gap_max[x1]_mean"):
        assert key in rows[0]
    md = (tmp_path / "compare.md").read_text()
    assert "| xgboost |" in md and "Train (s)" in md and "eps 0.05" in md


def test_compare_cli_and_backend_parameters(tmp_path, capsys):
    (tmp_path / "c.toml").write_text(textwrap.dedent("""
        eps = 0.05
        n_steps = 2
        protected = ["x1"]
        [data]
        source = "synthetic"
        [backend]
        name = "xgboost"
        nthread = 1
        max_depth = 2
        [fair_metric]
        name = "sensitive-subspace"
        fit_linear_models = false
    """))
    assert main(["compare", str(tmp_path / "c.toml"), "--backends", "xgboost", "-o", str(tmp_path / "o"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "| xgboost |" in out and (tmp_path / "o" / "compare.csv").is_file()
    assert main(["compare", str(tmp_path / "c.toml"), "--backends", "xgbost", "-o", str(tmp_path / "o")]) == 2
    assert "unknown backend 'xgbost'" in capsys.readouterr().err
    cfg = parse_config(COMPARE)
    assert backend_params_for(cfg, "xgboost") == ({"max_depth": 2, "nthread": 1}, [])
    others = [b for b in registry.available("backend") if b != "xgboost"]
    if others:  # another backend keeps the parameters it accepts and names the others
        cfg = parse_config({**COMPARE, "backend": {"name": "xgboost", "max_depth": 2, "gamma": 0.0}})
        kept, dropped = backend_params_for(cfg, others[0])
        assert set(kept) | set(dropped) == {"max_depth", "gamma"}
        own = parse_config({**COMPARE, "compare": {others[0]: {}}})
        assert backend_params_for(own, others[0]) == ({}, [])
    with pytest.raises(ConfigError, match=r"\[compare.xgboost\].*max_dept"):
        parse_config({**COMPARE, "compare": {"xgboost": {"max_dept": 3}}})
