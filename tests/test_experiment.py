"""budro experiment: repeated splits, per-split result files (resume), tables, CSV and the grid plot."""

import csv
import json
import textwrap

import numpy as np
import pytest

import budro.experiment as experiment
from budro.cli import main
from budro.config import load_config, parse_config
from budro.exceptions import ConfigError, ValidationError
from budro.experiment import parse_grid_arguments, run_experiment

pytest.importorskip("xgboost")
pytest.importorskip("pandas")

CONFIG = {
    "eps": 0.05,
    "n_steps": 3,
    "protected": ["x1"],
    "random_state": 0,
    "data": {"source": "synthetic", "random_state": 1},
    "backend": {"name": "xgboost", "max_depth": 2, "nthread": 1},
    "fair_metric": {"name": "sensitive-subspace", "fit_linear_models": False},
    "experiment": {"splits": 3, "certificate": True},
    "methods": {
        "BuDRO": {"method": "budro"},
        "Baseline": {"method": "gbdt", "n_rounds": 4},
    },
    "grid": {"x": "accuracy", "BuDRO": {"eps": [0.01, 0.2]}},
}


def _read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_tables_and_csv_hold_mean_and_std(tmp_path):
    cfg = parse_config(CONFIG)
    result = run_experiment(cfg, output=tmp_path, progress=False)
    assert result.n_computed == 6 and result.n_reused == 0
    splits = _read_csv(tmp_path / "splits.csv")
    assert len(splits) == 6 and {r["method"] for r in splits} == {"BuDRO", "Baseline"}
    summary = {r["method"]: r for r in _read_csv(tmp_path / "summary.csv")}
    for label in ("BuDRO", "Baseline"):
        for metric in ("accuracy", "balanced_accuracy", "consistency[cluster]", "gap_rms[x1]", "certificate", "fit_seconds"):
            values = np.array([float(r[metric]) for r in splits if r["method"] == label])
            assert float(summary[label][f"{metric}_mean"]) == pytest.approx(values.mean())
            assert float(summary[label][f"{metric}_std"]) == pytest.approx(values.std(ddof=1))
        assert summary[label]["n_splits"] == "3"
    md = (tmp_path / "results.md").read_text()
    acc = [float(r["accuracy"]) for r in splits if r["method"] == "BuDRO"]
    assert f"| BuDRO | {np.mean(acc):.3f} ± {np.std(acc, ddof=1):.3f} |" in md
    assert "| Method | Acc | BAcc | cluster | x1 Gap_Max | x1 Gap_RMS | Certificate | Train (s) |" in md
    assert "over 3 random 80/20 splits" in md
    # The splits are the same for every method (same seeds, same test rows).
    assert [r["seed"] for r in splits if r["method"] == "BuDRO"] == ["0", "1", "2"]


def test_rerun_skips_finished_splits_and_resumes_after_an_interruption(tmp_path, monkeypatch):
    cfg = parse_config(CONFIG)
    calls = []
    real = experiment._run_unit

    def counting(cfg_, unit, train, test):
        calls.append((unit.label, unit.split))
        if len(calls) == 4 and interrupt:
            raise KeyboardInterrupt  # killed during the fourth fit
        return real(cfg_, unit, train, test)

    monkeypatch.setattr(experiment, "_run_unit", counting)
    interrupt = True
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, output=tmp_path, progress=False)
    done = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "runs").rglob("*.json"))
    assert done == sorted(["runs/BuDRO/split-000.json", "runs/BuDRO/split-001.json", "runs/Baseline/split-000.json"])
    assert not list((tmp_path / "runs").rglob("*.tmp*"))

    interrupt = False
    calls.clear()
    first = run_experiment(cfg, output=tmp_path, progress=False)
    assert calls == [("Baseline", 1), ("BuDRO", 2), ("Baseline", 2)]
    assert (first.n_computed, first.n_reused) == (3, 3)

    calls.clear()
    stamp = (tmp_path / "runs/BuDRO/split-000.json").stat().st_mtime_ns
    again = run_experiment(cfg, output=tmp_path, splits=4, progress=False)  # one more split: only it is fitted
    assert calls == [("BuDRO", 3), ("Baseline", 3)]
    assert (tmp_path / "runs/BuDRO/split-000.json").stat().st_mtime_ns == stamp
    assert [r["accuracy"] for r in again.rows[:6]] == [r["accuracy"] for r in first.rows]

    # A changed parameter invalidates that method's files only.
    changed = parse_config({**CONFIG, "methods": {**CONFIG["methods"], "Baseline": {"method": "gbdt", "n_rounds": 5}}})
    calls.clear()
    run_experiment(changed, output=tmp_path, progress=False)
    assert calls == [("Baseline", 0), ("Baseline", 1), ("Baseline", 2)]
    calls.clear()
    run_experiment(changed, output=tmp_path, progress=False, fresh=True)
    assert len(calls) == 6
    payload = json.loads((tmp_path / "runs/Baseline/split-000.json").read_text())
    assert payload["split"] == 0 and "accuracy" in payload["metrics"] and len(payload["fingerprint"]) == 64


def test_grid_writes_the_tradeoff_plot(tmp_path):
    cfg = parse_config({**CONFIG, "experiment": {"splits": 2}})
    result = run_experiment(cfg, output=tmp_path, grid=True, progress=False)
    assert result.n_computed == 2 * 3  # BuDRO at two budgets, the baseline once, on two splits
    grid = _read_csv(tmp_path / "grid.csv")
    assert [(r["method"], r["point"]) for r in grid] == [("BuDRO", "eps=0.01"), ("BuDRO", "eps=0.2"), ("Baseline", "")]
    assert grid[0]["param:eps"] == "0.01" and "gap_rms[x1]_std" in grid[0]
    assert (tmp_path / "tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| BuDRO | eps=0.2 |" in (tmp_path / "grid.md").read_text()
    # The baseline's fits are those of the plain experiment: reused there; and a grid point equal
    # to the configured parameters (eps = 0.05) is the plain BuDRO run.
    plain = run_experiment(cfg, output=tmp_path, progress=False)
    assert (plain.n_computed, plain.n_reused) == (2, 2)
    again = run_experiment(cfg, output=tmp_path, grid={"BuDRO": {"eps": [0.05, 0.2]}}, progress=False)
    assert (again.n_computed, again.n_reused) == (0, 6)


def test_grid_arguments_and_errors():
    cfg = parse_config(CONFIG)
    assert parse_grid_arguments(cfg, ["eps=0.1,1", "BuDRO.backend.max_depth=2,3"]) == {
        "BuDRO": {"eps": [0.1, 1], "backend.max_depth": [2, 3]}}
    with pytest.raises(ConfigError, match="expected LABEL.PARAM"):
        parse_grid_arguments(cfg, ["eps"])
    with pytest.raises(ConfigError, match="method 'gbdt' has no parameter 'eps'"):
        run_experiment(cfg, grid={"Baseline": {"eps": [0.1]}}, progress=False)
    with pytest.raises(ConfigError, match="grid.Nope.*no method labelled 'Nope'"):
        parse_config({**CONFIG, "grid": {"Nope": {"eps": [1.0]}}})
    with pytest.raises(ConfigError, match="grid.BuDRO.eps.*non-empty list"):
        parse_config({**CONFIG, "grid": {"BuDRO": {"eps": 1.0}}})
    with pytest.raises(ConfigError, match="experiment.methods.*no method labelled 'SenSR'"):
        parse_config({**CONFIG, "experiment": {"methods": ["SenSR"]}})
    with pytest.raises(ConfigError, match="unknown config key 'experiment.folds'"):
        parse_config({**CONFIG, "experiment": {"folds": 3}})


def test_cli_experiment(tmp_path, capsys):
    (tmp_path / "exp.toml").write_text(textwrap.dedent("""
        eps = 0.05
        n_steps = 2
        protected = ["x1"]
        [data]
        source = "synthetic"
        [backend]
        name = "xgboost"
        nthread = 1
        [fair_metric]
        name = "sensitive-subspace"
        fit_linear_models = false
        [methods.BuDRO]
        [methods.Baseline]
        method = "gbdt"
    """))
    out = tmp_path / "out"
    assert main(["experiment", str(tmp_path / "exp.toml"), "--splits", "2", "-o", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "| BuDRO |" in text and "| Baseline |" in text and "4 fit(s) computed, 0 reused" in text
    assert main(["experiment", str(tmp_path / "exp.toml"), "--splits", "2", "-o", str(out), "-q",
                 "--grid", "eps=0.01,0.1", "--methods", "BuDRO"]) == 0
    text = capsys.readouterr().out
    assert "| BuDRO | eps=0.01 |" in text and (out / "tradeoff.png").is_file()
    assert main(["experiment", str(tmp_path / "exp.toml"), "--methods", "SenSR", "-o", str(out)]) == 2
    assert "no method labelled 'SenSR'" in capsys.readouterr().err
    cfg = load_config(tmp_path / "exp.toml")
    assert cfg.method_labels() == ["BuDRO", "Baseline"]


def test_named_data_sources(data_home):
    cfg = parse_config({"data": {"source": "german", "data_home": str(data_home)}, "protected": ["age"]})
    X, y = cfg.load_data()  # budro fit: standardised with all rows
    assert X.shape == (1000, 61) and abs(X["age"].mean()) < 1e-9 and y.mean() == pytest.approx(0.3)
    ds = cfg.load_dataset()  # experiments: raw, standardised per training split
    assert ds.name == "german" and "S-cons" in ds.counterfactuals and ds.X["age"].min() >= 19
    with pytest.raises(ConfigError, match="data.path' is not used by data source 'compas'"):
        parse_config({"data": {"source": "compas", "path": "x.csv"}})


# ---------------------------------------------------------------------------------- stale results, Ctrl-C, outputs

CSV_CONFIG = {
    "eps": 0.05,
    "n_steps": 2,
    "protected": ["x1"],
    "random_state": 0,
    "data": {"source": "csv", "path": "train.csv", "label": "y"},
    "backend": {"name": "xgboost", "max_depth": 2, "nthread": 1},
    "fair_metric": {"name": "sensitive-subspace", "fit_linear_models": False},
    "experiment": {"splits": 2},
    "methods": {"Baseline": {"method": "gbdt", "n_rounds": 3}},
}


def _write_train_csv(path, flip: bool):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 2))
    y = (X[:, 0] > 0).astype(int)
    if flip:  # labels unrelated to the features: the accuracy drops
        y = (rng.random(80) < 0.5).astype(int)
    lines = ["x0,x1,y"] + [f"{a:.6f},{b:.6f},{c}" for (a, b), c in zip(X, y)]
    path.write_text("\n".join(lines) + "\n")


def test_changed_input_file_is_recomputed_and_says_why(tmp_path):
    _write_train_csv(tmp_path / "train.csv", flip=False)
    cfg = parse_config(CSV_CONFIG, base_dir=tmp_path)
    first = run_experiment(cfg, output=tmp_path / "out", progress=False)
    assert first.n_computed == 2 and first.notes == []
    # The same file: reused.  Another file at the same path: recomputed (never the old table).
    assert run_experiment(cfg, output=tmp_path / "out", progress=False).n_reused == 2
    _write_train_csv(tmp_path / "train.csv", flip=True)
    notes = []
    second = run_experiment(cfg, output=tmp_path / "out", progress=False, log=notes.append)
    assert (second.n_computed, second.n_reused) == (2, 0)
    assert notes == second.notes and len(notes) == 1
    assert "recomputing 2 finished split(s)" in notes[0] and "train.csv" in notes[0] and "changed" in notes[0]
    # The table is that of the new data (a fresh run elsewhere), not the old one.
    fresh = run_experiment(cfg, output=tmp_path / "fresh", progress=False)
    assert [r["accuracy"] for r in second.rows] == [r["accuracy"] for r in fresh.rows]
    assert [r["accuracy"] for r in second.rows] != [r["accuracy"] for r in first.rows]


def test_budro_version_is_in_the_fingerprint(tmp_path, monkeypatch):
    import budro

    _write_train_csv(tmp_path / "train.csv", flip=False)
    cfg = parse_config(CSV_CONFIG, base_dir=tmp_path)
    run_experiment(cfg, output=tmp_path, progress=False)
    before = budro.__version__
    monkeypatch.setattr(budro, "__version__", "99.0")
    again = run_experiment(cfg, output=tmp_path, progress=False)
    assert again.n_computed == 2
    assert again.notes == [f"recomputing 2 finished split(s): budro version changed ({before} -> 99.0)"]
    assert json.loads((tmp_path / "runs/Baseline/split-000.json").read_text())["budro_version"] == "99.0"


def test_builtin_data_files_are_in_the_fingerprint(data_home):
    cfg = parse_config({"data": {"source": "german"}})
    digests = experiment.input_digests(cfg)
    assert digests == {"german/german.data": "b21f3d81db8071257d5ff1deaeba1fd4303b62712e6fcc9715c7a86202cb5871"}


def test_ctrl_c_keeps_finished_splits_and_exits_130(tmp_path, monkeypatch, capsys):
    _write_train_csv(tmp_path / "train.csv", flip=False)
    (tmp_path / "exp.toml").write_text(textwrap.dedent("""
        eps = 0.05
        n_steps = 2
        [data]
        source = "csv"
        path = "train.csv"
        label = "y"
        [backend]
        name = "xgboost"
        nthread = 1
        [experiment]
        splits = 3
        [methods.Baseline]
        method = "gbdt"
        n_rounds = 2
    """))
    real = experiment._run_unit
    calls = []

    def interrupted_third(cfg_, unit, train, test):
        calls.append(unit.split)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(cfg_, unit, train, test)

    monkeypatch.setattr(experiment, "_run_unit", interrupted_third)
    out = tmp_path / "out"
    assert main(["experiment", str(tmp_path / "exp.toml"), "-o", str(out), "-q"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == f"budro: interrupted; 2 finished split(s) kept in {out} (run the same command again to resume)"
    assert "Traceback" not in err
    assert sorted(p.name for p in (out / "runs" / "Baseline").iterdir()) == ["split-000.json", "split-001.json"]
    monkeypatch.setattr(experiment, "_run_unit", real)
    assert main(["experiment", str(tmp_path / "exp.toml"), "-o", str(out), "-q"]) == 0
    assert "1 fit(s) computed, 2 reused" in capsys.readouterr().out


def test_every_command_exits_130_on_ctrl_c(monkeypatch, capsys):
    import budro.demo

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(budro.demo, "run_demo", interrupted)
    assert main(["demo", "--no-plot", "-q"]) == 130
    assert capsys.readouterr().err.strip() == "budro: interrupted"


def test_an_interrupted_write_leaves_no_half_file(tmp_path, monkeypatch):
    target = tmp_path / "runs" / "split-000.json"
    experiment.write_text(target, '{"old": 1}')

    def killed(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(experiment.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        experiment.write_text(target, '{"new": 2}' * 1000)
    assert target.read_text() == '{"old": 1}' and [p.name for p in target.parent.iterdir()] == ["split-000.json"]


def test_output_paths_are_checked_before_training(tmp_path, monkeypatch):
    _write_train_csv(tmp_path / "train.csv", flip=False)
    cfg = parse_config(CSV_CONFIG, base_dir=tmp_path)

    def no_training(*args, **kwargs):
        raise AssertionError("trained before the output was checked")

    monkeypatch.setattr(experiment, "_run_unit", no_training)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValidationError, match="output folder .*file' is an existing file, not a folder"):
        run_experiment(cfg, output=tmp_path / "file", progress=False)
    with pytest.raises(ValidationError, match="is an existing file where the experiment needs a folder"):
        run_experiment(cfg, output=tmp_path / "file" / "sub", progress=False)
    (tmp_path / "out" / "runs").mkdir(parents=True)
    (tmp_path / "out" / "runs" / "Baseline").write_text("x")
    with pytest.raises(ValidationError, match="runs/Baseline' is an existing file"):
        run_experiment(cfg, output=tmp_path / "out", progress=False)
    (tmp_path / "out2" / "summary.csv").mkdir(parents=True)
    with pytest.raises(ValidationError, match="output file .*summary.csv' is an existing folder"):
        run_experiment(cfg, output=tmp_path / "out2", progress=False)

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(experiment.tempfile, "mkstemp", read_only)
    with pytest.raises(ValidationError, match="out3' is not writable \\(Permission denied\\)"):
        run_experiment(cfg, output=tmp_path / "out3", progress=False)


# ---------------------------------------------------------------------------------- undefined gaps, progress


SMALL_MINORITY = {
    "n_steps": 2,
    "protected": ["x1"],
    "random_state": 0,
    "data": {"source": "synthetic", "n": 80, "n_majority": 72},  # 8 points in the minority cluster
    "backend": {"name": "xgboost", "max_depth": 2, "nthread": 1},
    "fair_metric": {"name": "sensitive-subspace", "fit_linear_models": False},
    "experiment": {"splits": 12},
    "methods": {"Baseline": {"method": "gbdt", "n_rounds": 3}},
}


def test_a_test_split_holding_one_group_gives_a_nan_gap_not_an_abort(tmp_path, capsys):
    cfg = parse_config(SMALL_MINORITY)
    ds = cfg.load_dataset()
    one_group = [k for k in range(12) if np.unique(ds.train_test_split(0.2, random_state=k)[1].groups["x1"]).size == 1]
    assert one_group  # the case that made evaluate raise and the run exit with status 2
    (tmp_path / "small.toml").write_text(_toml(SMALL_MINORITY))
    assert main(["experiment", str(tmp_path / "small.toml"), "-o", str(tmp_path / "out"), "-q"]) == 0
    err = capsys.readouterr().err
    splits = _read_csv(tmp_path / "out" / "splits.csv")
    gaps = np.array([float(r["gap_rms[x1]"]) if r["gap_rms[x1]"] else np.nan for r in splits])
    assert all(np.isnan(gaps[k]) for k in one_group)
    finite = gaps[np.isfinite(gaps)]
    assert 0 < finite.size < 12
    summary = _read_csv(tmp_path / "out" / "summary.csv")[0]
    assert float(summary["gap_rms[x1]_mean"]) == pytest.approx(finite.mean())  # over the splits with a gap
    assert int(summary["gap_rms[x1]_n"]) == finite.size and "accuracy_n" not in summary
    md = (tmp_path / "out" / "results.md").read_text()
    assert f"{finite.mean():.3f} ± {finite.std(ddof=1):.3f} ({finite.size}/12)" in md
    note = f"Baseline: the gaps of group 'x1' could not be computed on {12 - finite.size} of 12 split(s)"
    assert note in md and note in err


def _toml(config):
    """A flat TOML text of a config dict (values are numbers, strings, lists; sections one level deep)."""
    import json

    def value(v):
        return json.dumps(v) if not isinstance(v, dict) else "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"

    lines = [f"{k} = {value(v)}" for k, v in config.items() if not isinstance(v, dict)]
    for section, table in config.items():
        if isinstance(table, dict):
            lines.append(f"[{section}]")
            lines += [f"{k} = {value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def test_progress_bar_is_drawn_by_tqdm(tmp_path):
    import io

    cfg = parse_config({**CSV_CONFIG, "data": {"source": "synthetic"}, "experiment": {"splits": 3}})
    stream = io.StringIO()
    run_experiment(cfg, output=tmp_path, progress=stream)
    text = stream.getvalue()
    assert "experiment: 100%|" in text and "| 3/3 [" in text and "fit/s" in text
    assert "split=2, method=Baseline, fit=" in text
    stream = io.StringIO()
    run_experiment(cfg, output=tmp_path, splits=4, progress=stream)  # 3 reused, counted from the start
    text = stream.getvalue()
    assert "| 3/4 [" in text and "fit=cached" in text and "| 4/4 [" in text
    assert run_experiment(cfg, output=tmp_path, progress=False).n_reused == 3
